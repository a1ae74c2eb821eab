"""Every field recovery or a restore reads from a journal is checked once, in
``trust.check_journal`` (task N6 item 4). Before, the newer fields (a swap record's ``dirs`` with
their mode, mtime and owner; ``uid``/``gid`` of backup, rmdir and retired entries; ``mtime_ns``;
``dir_times``; the put-back token; a planned action's fields; a retirement's sizes, digests and
``same_fs``) were taken as written, or silently ignored where used: a planted journal with a
folder path outside its run, a negative or huge owner id, or a field of the wrong type was
replayed. Now it is refused (``Recovery.REFUSED``, coded), its run and backups left as they are."""
import json
import os

import pytest

from conftest import copy_real
from helpers_crash import Killed, kill
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Recovery
from tb_footprint_plugin.engine import faults

pytestmark = pytest.mark.usefixtures("disarm_faults")
RUN = "tf/summary_mix"


def _journal(logdir):
    (path,) = [os.path.join(d, n) for d, _, ns in os.walk(os.path.join(logdir, ".tb-footprint"))
               for n in ns if n.endswith(".jsonl") and os.path.basename(d) == "journal"]
    return path


def _rewrite(path, change):
    records = [json.loads(line) for line in open(path).read().splitlines()]
    change(records)
    with open(path, "w") as f:
        f.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def _of(records, t):
    return [r for r in records if r["type"] == t]


def _set(t, key, value, first=True):
    def change(records):
        for r in _of(records, t)[:1] if first else _of(records, t):
            r[key] = value
    return change


def _in_first(t, key, field, value):
    def change(records):
        _of(records, t)[0][key][0][field] = value
    return change


REDUCE_CASES = {
    "swap_dirs_outside": (_set("swap", "dirs", [{"path": "../../x", "mode": 0o755, "mtime_ns": 1}]),
                          Finding.PATH_OUTSIDE),
    "swap_dirs_not_objects": (_set("swap", "dirs", ["x"]), Finding.BAD_RECORD),
    "swap_dirs_string_mode": (_in_first("swap", "dirs", "mode", "0755"), Finding.BAD_RECORD),
    "swap_dirs_huge_uid": (_in_first("swap", "dirs", "uid", 1 << 40), Finding.BAD_RECORD),
    "swap_dirs_bad_mtime": (_in_first("swap", "dirs", "mtime_ns", 1 << 70), Finding.BAD_RECORD),
    "backup_negative_uid": (_set("backup", "uid", -1), Finding.BAD_RECORD),
    "backup_string_gid": (_set("backup", "gid", "0"), Finding.BAD_RECORD),
    "backup_bool_uid": (_set("backup", "uid", True), Finding.BAD_RECORD),
    "backup_huge_mtime_ns": (_set("backup", "mtime_ns", 1 << 70), Finding.BAD_RECORD),
    "backup_infinite_mtime": (_set("backup", "mtime", 1e400), Finding.BAD_RECORD),
    "backup_huge_mode": (_set("backup", "mode", 1 << 40), Finding.BAD_RECORD),
    "rmdir_huge_gid": (_set("rmdir", "gid", 1 << 32), Finding.BAD_RECORD),
    "rmdir_string_mtime": (_set("rmdir", "mtime_ns", "1"), Finding.BAD_RECORD),
    "token_not_ours": (_set("begin", "tmp_token", "../../etc/x"), Finding.BAD_RECORD),
    "dir_times_outside": (_set("begin", "dir_times", [{"path": "../..", "entries": 1, "mtime_ns": 1}]),
                          Finding.PATH_OUTSIDE),
    "dir_times_no_count": (_set("begin", "dir_times", [{"path": RUN, "entries": "1", "mtime_ns": 1}]),
                           Finding.BAD_RECORD),
    "action_unknown_field": (lambda rs: rs[0]["plan"]["actions"][0].update(evil=1), Finding.BAD_RECORD),
    "action_unknown_kind": (lambda rs: rs[0]["plan"]["actions"][0].update(kind="chmod"), Finding.BAD_RECORD),
}


@pytest.mark.parametrize("case", sorted(REDUCE_CASES))
def test_a_planted_reduce_journal_field_is_refused(tmp_path, case):
    change, code = REDUCE_CASES[case]
    logdir = str(copy_real("tf", tmp_path / "L" / "tf").parent)
    faults.arm("reduce.swap", kill)  # every record written: backups, swap (dirs), rmdirs
    with pytest.raises(Killed):
        api.reduce_logdir(logdir, policy="archive", dry_run=False, quiet_period=0, runs=[RUN])
    faults.disarm_all()
    journal = _journal(logdir)
    records = [json.loads(line) for line in open(journal)]
    assert _of(records, "rmdir") and _of(records, "swap")[0]["dirs"] and "uid" in _of(records, "backup")[0]
    _rewrite(journal, change)
    planted = open(journal).read()
    outs = [o for o in api.recover_logdir(logdir) if o.op_id == records[0]["op_id"]]
    assert [(o.action, o.code) for o in outs] == [(Recovery.REFUSED, code)], [vars(o) for o in outs]
    assert open(journal).read() == planted  # left as it is for the user to look at


RETIRE_CASES = {
    "file_negative_uid": (_in_first("begin", "files", "uid", -1), Finding.BAD_RECORD),
    "file_string_size": (_in_first("begin", "files", "size", "7"), Finding.BAD_RECORD),
    "file_bad_digest": (_in_first("begin", "files", "sha256", "x" * 64), Finding.BAD_DIGEST),
    "file_no_mtime_ns": (lambda rs: rs[0]["files"][0].pop("mtime_ns"), Finding.BAD_RECORD),
    "dir_outside": (_in_first("begin", "dirs", "path", "elsewhere"), Finding.PATH_OUTSIDE),
    "dir_huge_gid": (_in_first("begin", "dirs", "gid", 1 << 40), Finding.BAD_RECORD),
    "dir_string_mode": (_in_first("begin", "dirs", "mode", "0755"), Finding.BAD_RECORD),
    "same_fs_string": (_set("begin", "same_fs", "yes"), Finding.BAD_RECORD),
    "nested_run_outside": (_set("begin", "takes_along", ["../x"]), Finding.PATH_OUTSIDE),
}


@pytest.mark.parametrize("case", sorted(RETIRE_CASES))
def test_a_planted_retire_journal_field_is_refused(tmp_path, case):
    change, code = RETIRE_CASES[case]
    logdir = str(copy_real("tf/keras_profiled", tmp_path / "logdir"))
    faults.arm("retire.move", kill)
    with pytest.raises(Killed):
        api.retire(logdir, api.retire_rule(runs=["train"]), dry_run=False)
    faults.disarm_all()
    journal = _journal(logdir)
    records = [json.loads(line) for line in open(journal)]
    _rewrite(journal, change)
    outs = [o for o in api.recover_logdir(logdir) if o.op_id == records[0]["op_id"]]
    assert [(o.action, o.code) for o in outs] == [(Recovery.REFUSED, code)], [vars(o) for o in outs]


def test_the_journals_this_version_writes_pass(tmp_path):
    """The checks refuse only what this tool does not write: an untouched journal of each kind is
    replayed (a reduce killed mid-swap rolled forward, a retirement killed mid-move rolled back)."""
    logdir = str(copy_real("tf", tmp_path / "L" / "tf").parent)
    faults.arm("reduce.swap", kill)
    with pytest.raises(Killed):
        api.reduce_logdir(logdir, policy="archive", dry_run=False, quiet_period=0, runs=[RUN])
    faults.disarm_all()
    outs = api.recover_logdir(logdir)
    acts = {o.action for o in outs if o.run == RUN}
    assert acts == {Recovery.COMPLETED}, [vars(o) for o in outs]  # the swap finished (and its compaction)
    other = str(copy_real("tf/keras_profiled", tmp_path / "logdir"))
    faults.arm("retire.move", kill)
    with pytest.raises(Killed):
        api.retire(other, api.retire_rule(runs=["train"]), dry_run=False)
    faults.disarm_all()
    outs = api.recover_logdir(other)
    assert {o.action for o in outs if o.run == "train"} == {Recovery.ROLLED_BACK}, [vars(o) for o in outs]
