"""Three workers of one shard at once (test_shards' overlapping workers): a loser that planned
while the winner's reduce of a run was still journaled, and marks after the winner's ``done``,
must not turn that ``done`` into a skip (the intermediate CI of 94403bf: the ledger ended
``skipped: unfinished_operation`` for a run reduced and verified once).

- ``keeps_done``: an ``unfinished_operation`` skip is one of the skips that say another process
  got to the run first; a ``done`` entry stands against it.
- the plan's look at unfinished journals: a journal its holder closed between the listing and
  the look at its lock is no unfinished operation (the winner closes its journal, then releases
  its lock: a loser saw the journal, then no holder)."""
import os

import pytest

from helpers_crash import Killed, kill
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Skip
from tb_footprint_plugin.engine import faults, front_local
from tb_footprint_plugin.engine.ledger_entries import keeps_done

DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in ("profile_xplane", "profile_other")}}


def test_a_done_entry_stands_against_a_loser_s_unfinished_operation_skip():
    done = {"state": "done", "after_size_bytes": 10, "op_id": "20260101T000000-aaaaaa"}
    assert keeps_done(done, "skipped", {"code": Skip.UNFINISHED, "original_size_bytes": 10})
    assert keeps_done(done, "skipped", {"code": Skip.LOCKED})
    assert not keeps_done(done, "skipped", {"code": Skip.NOTHING, "original_size_bytes": 99})  # changed since


def test_a_journal_closed_while_the_plan_looked_is_no_unfinished_operation(tmp_path, monkeypatch):
    logdir = tmp_path / "logs"
    with synth.EventWriter(str(logdir / "r")) as w:
        w.scalar("loss", 0, 1.0)
    session = logdir / "r" / "plugins" / "profile" / "2026_01_01_00_00_00"
    session.mkdir(parents=True)
    (session / "host.xplane.pb").write_bytes(os.urandom(3000))
    # a reduce of r stopped once its backups are made: its journal is left
    faults.arm("reduce.backup", kill)
    try:
        with pytest.raises(Killed):
            api.reduce_logdir(str(logdir), policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",))
    finally:
        faults.disarm_all()
    (j,) = (logdir / ".tb-footprint" / "journal").glob("*.jsonl")
    plan = api.plan(str(logdir), policy=DROP, quiet_period=0)
    assert [rp.code for rp in plan.runs if rp.run == "r"] in ([Skip.LOCKED], [Skip.UNFINISHED])  # the journal counts

    real = front_local.folder_lock

    class Closing:
        """The run's lock as the look finds it: its holder closed the journal just now."""

        def __init__(self, lock):
            self.lock = lock

        def live_holder(self):
            if j.exists():
                j.unlink()
            return None

    monkeypatch.setattr(front_local, "folder_lock", lambda *a, **k: Closing(real(*a, **k)))
    plan = api.plan(str(logdir), policy=DROP, quiet_period=0)
    (rp,) = [rp for rp in plan.runs if rp.run == "r"]
    assert rp.code not in (Skip.UNFINISHED, Skip.LOCKED), (rp.code, rp.skipped)
