"""A start's recovery acts on the journal as it stands once it holds the run's lock, never on what
it read before.

Four shard workers start at once: one that starts late settles, at its start, the journals it
finds, and finds the journals of the others' reductions under way. It read a journal, then took
the run's lock, which its live holder keeps until its operation ends; the records it then acted on
were those read before. A holder that went on past its swap and was killed (a preempted job) in
between left a journal whose swap the late worker had not read: it settled the reduction as
stopped before its swap (nothing put back) and deleted its backups, the only copy of the removed
files."""
import os
import subprocess
import sys
import time

from conftest import REPO, user_files
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Recovery
from tb_footprint_plugin.engine import recovery
from tb_footprint_plugin.engine.front_local import local_context

OLD = time.time() - 86400


def _logdir(root) -> str:
    run = os.path.join(str(root), "run0")
    os.makedirs(run)
    with synth.EventWriter(run, timestamp=1_700_000_000) as w:
        for step in range(20):
            w.scalar("loss", step, 1.0 / (step + 1))
    synth.write_profile_session(run, synth.session_name_for(1_700_000_000), "host", n_events=200, seed=1)
    for d, _dirs, files in os.walk(str(root)):
        for f in files:
            os.utime(os.path.join(d, f), (OLD, OLD))
    return str(root)


def test_a_holder_killed_past_its_swap_after_the_journal_was_read_is_rolled_back_from_its_journal(tmp_path):
    logdir = _logdir(tmp_path / "logs")
    before = user_files(logdir)
    gate = tmp_path / "gate"
    # the holder: held once every backup is made, then on to its swap, killed once it is done
    holder = subprocess.Popen(
        [sys.executable, "-m", "tb_footprint_plugin.cli", "reduce", logdir, "--verify", "python", "--json", "--yes"],
        env=dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2", TB_FOOTPRINT_FAILPOINT_GATE=str(gate),
                 TB_FOOTPRINT_FAILPOINTS="reduce.backup=wait,reduce.swap=kill"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not api.pending_operations(logdir) and time.time() < deadline and holder.poll() is None:
            time.sleep(0.05)
        assert api.pending_operations(logdir), holder.communicate(timeout=60)
        time.sleep(0.5)  # past its backups' records: it waits at the gate, holding the run

        real = recovery.run_lock
        let_go = []

        def late_lock(ctx, run):
            # the late worker has read the journal; the holder goes on before its lock is taken
            lock = real(ctx, run)
            acquire = lock.acquire

            def after_the_holder():
                if not let_go:
                    let_go.append(run)
                    gate.write_text("go")
                    holder.communicate(timeout=300)
                return acquire()

            lock.acquire = after_the_holder
            return lock

        recovery.run_lock = late_lock
        try:
            settled = recovery.recover(local_context(logdir, None))
        finally:
            recovery.run_lock = real
        assert let_go == ["run0"] and holder.returncode == -9  # killed past its swap, as arranged
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.communicate()
    # what the journal said once the lock was held: swapped, verified: finished, or put back; the
    # run has its files either way, and nothing of it is only in a deleted backup
    assert [o.action for o in settled] in ([Recovery.COMPLETED], [Recovery.ROLLED_BACK]), settled
    if settled[0].action == Recovery.ROLLED_BACK:
        assert user_files(logdir) == before
    else:
        assert [o.status for o in api.restore(logdir, run="run0")] == ["restored"]
        assert user_files(logdir) == before
    assert api.pending_operations(logdir) == []
