"""A purge killed past its intent is finished by the next start, on a disk as the purge itself
takes its runs: each run's lock once (``purge_choice``'s rule, ``run_lock.lock_for_purge``).

Before, the start took a run's lock once per operation whose intent it found: the second
operation of a run already locked by the first was refused by this very process, reported
``skipped_live`` with code ``run_locked`` ("held by a running process", which no process was)
and left unfinished, its blobs kept, until another start."""
from __future__ import annotations

import os
import time

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Finding, Recovery
from tb_footprint_plugin.engine import faults, oplog
from tb_footprint_plugin.engine.vault import Vault

pytestmark = pytest.mark.usefixtures("disarm_faults")

OLD = time.time() - 7 * 86400
DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


def _profile(run, name):
    """A profile session of two files (what ``DROP`` removes), old enough to be reduced."""
    session = run / "plugins" / "profile" / name
    session.mkdir(parents=True)
    (session / "host.xplane.pb").write_bytes(os.urandom(3000))
    (session / "host.trace.json.gz").write_bytes(os.urandom(2000))
    for d, dirs, files in os.walk(run):
        for n in files + dirs:
            os.utime(os.path.join(d, n), (OLD, OLD))


def _reduce(logdir):
    rep = api.reduce_logdir(str(logdir), policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",))
    assert [o.status for o in rep.outcomes if o.removed_files] == ["verified"], rep.to_dict()


def test_two_killed_purges_of_one_run_are_both_finished_by_the_next_start(tmp_path):
    logdir = tmp_path / "logs"
    run = logdir / "a"
    with synth.EventWriter(str(run)) as w:
        for step in range(5):
            w.scalar("loss", step, 1.0 / (step + 1))
    _profile(run, "2026_01_01_00_00_00")
    _reduce(logdir)
    _profile(run, "2026_01_02_00_00_00")  # written again: a second reduction of the same run
    _reduce(logdir)
    ops = [m for m in api.operations(str(logdir)) if m["kind"] == "reduce"]
    assert len(ops) == 2 and {m["run"] for m in ops} == {"a"}
    faults.arm("purge.intent", "raise")  # killed right after both intents
    with pytest.raises(faults.InjectedFault):
        api.purge(str(logdir), yes=True)
    faults.disarm_all()
    outs = api.recover_logdir(str(logdir))
    finished = sorted((o.op_id, o.action, o.code) for o in outs if o.op_id in {m["op_id"] for m in ops})
    assert finished == sorted((m["op_id"], Recovery.COMPLETED, Finding.PURGE_FINISHED) for m in ops), \
        [vars(o) for o in outs]
    after = [m for m in api.operations(str(logdir)) if m["kind"] == "reduce"]
    assert all(m["backup_purged"] for m in after), after
    for m in after:
        vault = Vault(m["vault"])
        assert not any(vault.has_blob(f["sha256"]) for f in m["files"]), m["op_id"]
        records = [r["type"] for r in oplog.read_log(vault.root, m["op_id"]).records
                   if r.get("type") in ("purge", "purged")]
        assert records == ["purge", "purged"], records  # its intent, then its end
