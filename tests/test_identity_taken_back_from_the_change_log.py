"""A deleted identity.json's id is taken back from an external vault's manifests only where the state's
own change log names their operations (review R10 F6 and F9): every log of it counts — a worker's
of a sharded batch, one sealed aside full — and nothing but whole entries of logs of ours: a planted
link under a log's name is never followed, a torn last line and a damaged line name nothing."""
import json
import os

import pytest

from conftest import copy_real, user_files
from tb_footprint_plugin import api

OP = "20261206T071027-47d98e"


@pytest.mark.parametrize("log_name", ["history-shard-1-of-2@node7.jsonl",
                                      "history.sealed-1796541027000-0123456789ab.jsonl"])
def test_a_workers_or_sealed_log_takes_the_id_back(tmp_path, log_name):
    vault = str(tmp_path / "V")
    logdir = tmp_path / "L"
    copy_real("jax/profiled", logdir / "a")
    copy_real("jax/profiled", logdir / "b")
    before = user_files(logdir)
    rep = api.reduce_logdir(str(logdir), vault, policy="archive", dry_run=False, quiet_period=0, runs=["a"])
    assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
    state = logdir / ".tb-footprint"
    with open(state / "identity.json") as f:
        old_id = json.load(f)["id"]
    os.rename(state / "history.jsonl", state / log_name)  # the line a worker wrote, or a log sealed aside
    os.remove(state / "identity.json")
    rep = api.reduce_logdir(str(logdir), vault, policy="archive", dry_run=False, quiet_period=0, runs=["b"])
    assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
    with open(state / "identity.json") as f:
        assert json.load(f)["id"] == old_id
    outs = api.restore(str(logdir), backup_dir=vault)
    assert sorted(o.run for o in outs if o.status == "restored") == ["a", "b"], [o.to_dict() for o in outs]
    assert user_files(logdir) == before


def _line(op, **kw):
    return json.dumps(dict({"op_id": op, "kind": "reduce", "time": 1796541027.5}, **kw)) + "\n"


def test_only_whole_entries_of_logs_of_ours_name_an_operation(tmp_path):
    from tb_footprint_plugin.engine import changelog_files

    state = tmp_path / "state"
    state.mkdir()
    ops = [OP[:-1] + c for c in "0123456"]
    outside = tmp_path / "outside.jsonl"
    outside.write_text(_line(ops[0]))
    os.symlink(outside, state / "history.jsonl")  # a planted link: never followed
    (state / "history-shard-1-of-2@n.jsonl").write_text(
        _line(ops[1]) + "\xff not json\n" + json.dumps({"op_id": ops[2]}) + "\n"  # no time: no entry
        + _line(ops[3], time=None) + _line(ops[4]) + _line(ops[5]).rstrip("\n"))  # torn last line
    (state / "notes.jsonl").write_text(_line(ops[6]))  # no log's name
    got = changelog_files.named_operations(str(state), ops, 1 << 20)
    assert got == {ops[1], ops[4]}
    # at most the whole lines of the first ``limit`` bytes
    first = len(_line(ops[1]))
    assert changelog_files.named_operations(str(state), ops, first) == {ops[1]}
    assert changelog_files.named_operations(str(state), ops, first - 1) == set()
