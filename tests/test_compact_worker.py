"""Issue #27 item 5: a batch's compaction rounds run in a worker process (``compactor.CompactWorker``,
``engine.compact_worker``) on the other core, beside the next runs' transactions.

Each test names what it checks: the rounds leave this process (and every backup ends packed,
every note done, every original restorable), a worker killed midway has its rounds done here at
the batch's end, an interrupt stops it and the settling finishes its notes, a worker that cannot
start leaves the rounds here, and Ctrl-C (SIGINT to the whole foreground group) is not the worker's.
"""
import os
import signal
import sys
import time

import pytest

from test_batch_compaction import backups, reduce, restored_exactly, small_runs
from test_small_packs import tree
from tb_footprint_plugin.engine import compactor as cm
from tb_footprint_plugin.engine import front_local
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.vault import Vault


@pytest.fixture
def spied(monkeypatch):
    """Rounds of 7 backups (3 a run: rounds after the 3rd and the 6th run), a worker allowed; the
    workers started and this process's own ``compact_ops`` calls recorded."""
    seen = {"workers": [], "here": []}
    real_init, real_worker, real_ops = cm.BatchCompactor.__init__, cm.CompactWorker.__init__, Vault.compact_ops
    monkeypatch.setattr(cm.BatchCompactor, "__init__",
                        lambda self, ctx: real_init(self, ctx, max_blobs=7, use_worker=True))

    def worker_init(self, ctx):
        real_worker(self, ctx)
        seen["workers"].append(self)

    def ops_here(self, ops, *a, **kw):
        seen["here"].append(sorted(ops))
        return real_ops(self, ops, *a, **kw)

    monkeypatch.setattr(cm.CompactWorker, "__init__", worker_init)
    monkeypatch.setattr(Vault, "compact_ops", ops_here)
    return seen


def all_packed(logdir) -> Vault:
    vault = Context(str(logdir)).vault
    assert backups(vault) and all(vault.blob_form(s) == "packed" for s in backups(vault))
    assert vault.pending_compactions() == {}
    return vault


def test_a_batchs_rounds_run_in_a_worker_process_not_in_its_own(tmp_path, spied):
    logdir = small_runs(tmp_path, runs=6)
    before = tree(logdir)
    assert reduce(logdir).ok
    assert len(spied["workers"]) == 1 and spied["here"] == []  # both rounds went to the worker
    w = spied["workers"][0]
    assert w.proc.returncode == 0 and w.sent == 2 and w.answered == 2
    all_packed(logdir)
    restored_exactly(logdir, before)


def test_a_batch_of_a_few_runs_starts_no_worker(tmp_path, spied):
    logdir = small_runs(tmp_path, runs=2)  # 6 backups: never a full round, compacted at the end
    assert reduce(logdir).ok
    assert spied["workers"] == [] and len(spied["here"]) == 1
    all_packed(logdir)


def test_a_worker_killed_midway_has_its_rounds_done_here_at_the_batchs_end(tmp_path, spied, monkeypatch):
    real_send = cm.CompactWorker.send

    def send_then_die(self, group):
        ok = real_send(self, group)
        if self.sent == 1:
            self.proc.kill()  # its first round done or not: either way the batch's end sees to it
            self.proc.wait()
        return ok

    monkeypatch.setattr(cm.CompactWorker, "send", send_then_die)
    logdir = small_runs(tmp_path, runs=6)
    before = tree(logdir)
    assert reduce(logdir).ok
    assert spied["workers"][0].proc.returncode == -signal.SIGKILL
    assert spied["here"]  # the second round (its send failed) and any unanswered one, here
    all_packed(logdir)
    restored_exactly(logdir, before)


def test_an_interrupt_stops_the_worker_and_the_settling_finishes_its_notes(tmp_path, spied, monkeypatch):
    logdir = small_runs(tmp_path, runs=6)
    before = tree(logdir)
    real_run_batch = front_local.run_batch

    def run_then_interrupt(*a, **kw):  # Ctrl-C right after the batch's runs committed
        real_run_batch(*a, **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(front_local, "run_batch", run_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        reduce(logdir)
    w = spied["workers"][0]
    assert w.proc.returncode is not None  # gone before the batch's reduce returned
    all_packed(logdir)  # whatever it had not done, the interrupt's settling did
    monkeypatch.undo()
    restored_exactly(logdir, before)


def test_a_worker_that_cannot_start_leaves_the_rounds_here(tmp_path, spied, monkeypatch):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    logdir = small_runs(tmp_path, runs=6)
    assert reduce(logdir).ok
    assert spied["workers"] == [] and [len(r) for r in spied["here"]] == [3, 3]
    all_packed(logdir)


def test_ctrl_c_to_the_foreground_group_is_not_the_workers(tmp_path):
    """A terminal's Ctrl-C signals every process of the group: the parent decides (it stops the
    worker between rounds, ``stop``); the worker itself ignores SIGINT and ends when told."""
    logdir = small_runs(tmp_path, runs=1)
    w = cm.CompactWorker(Context(str(logdir)))
    try:
        assert w.ready.wait(60)  # its handlers set
        os.kill(w.proc.pid, signal.SIGINT)
        time.sleep(0.3)
        assert w.proc.poll() is None
    finally:
        busy, unanswered = w.finish()
    assert w.proc.returncode == 0 and busy == [] and unanswered == []


def test_the_worker_packs_with_its_parents_threshold(tmp_path, spied, monkeypatch):
    """A caller that packs nothing (``PACK_BELOW = 0``: each blob compressed alone, or kept plain
    where that saves no block) gets the same from the worker, another process whose module
    default would pack them all."""
    from tb_footprint_plugin.engine import vault as vault_mod

    monkeypatch.setattr(vault_mod, "PACK_BELOW", 0)
    logdir = small_runs(tmp_path, runs=6)
    before = tree(logdir)
    assert reduce(logdir).ok
    assert len(spied["workers"]) == 1 and spied["here"] == []
    vault = Context(str(logdir)).vault
    assert backups(vault) and not any(vault.blob_form(s) == "packed" for s in backups(vault))
    assert vault.pending_compactions() == {}
    restored_exactly(logdir, before)


def test_runs_sharing_backups_with_the_worker_at_work_beside_them_all_restore(tmp_path, spied):
    """Every run's profile is the same bytes: while the worker packs a committed run's blobs, the
    next run's transaction backs up those very digests (its store under the blob's lock, with a
    pin; the worker's pack under the same lock) — each blob in one form at every instant, packed
    by the end, and every run restored byte for byte."""
    from tb_footprint_plugin import synth

    logdir = tmp_path / "logdir"
    for r in range(8):
        run = logdir / f"run{r:02d}"
        with synth.EventWriter(str(run)) as w:
            for step in range(5):
                w.scalar("loss", step, 1.0 / (step + 1) + r)
        session = run / "plugins" / "profile" / "2026_01_01_00_00_00"
        session.mkdir(parents=True)
        for i in range(3):
            synth.write_xplane(str(session / f"host{i}.xplane.pb"), 20 + i * 15, seed=i)  # same in every run
    synth.age(str(logdir))
    before = tree(logdir)
    rep = reduce(logdir)
    assert rep.ok and sum(o.status == "verified" for o in rep.outcomes) == 8
    assert len(spied["workers"]) == 1
    vault = all_packed(logdir)
    assert len(backups(vault)) == 3
    restored_exactly(logdir, before)


def test_ctrl_c_while_the_batch_end_waits_for_the_worker_stops_it(tmp_path):
    """Ctrl-C while ``close`` waits for the worker to end its rounds: the worker is told to stop
    after the round under way (``stop``: SIGTERM, then waited for) before the interrupt goes on,
    so the interrupt's settling does not race a worker still going through its queue."""
    logdir = small_runs(tmp_path, runs=1)
    w = cm.CompactWorker(Context(str(logdir)))
    assert w.ready.wait(60)
    real_wait, waits = w.proc.wait, []

    def interrupted_once(timeout=None):
        waits.append(timeout)
        if len(waits) == 1:
            raise KeyboardInterrupt
        return real_wait(timeout)

    w.proc.wait = interrupted_once
    with pytest.raises(KeyboardInterrupt):
        w.finish()
    assert waits == [None, 60.0] and w.proc.returncode is not None


def test_the_worker_never_imports_code_from_the_current_folder(tmp_path, spied, monkeypatch):
    """Review R9 F1: ``python -m`` put the current folder first on the worker's ``sys.path``, so a
    ``tb_footprint_plugin/`` planted in a shared logdir one stood in ran as this user (and the
    rounds, its replies missing, went on quietly in the parent)."""
    planted = tmp_path / "shared"
    pkg = planted / "tb_footprint_plugin"
    (pkg / "engine").mkdir(parents=True)
    marker = tmp_path / "planted-code-ran"
    (pkg / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (pkg / "engine" / "__init__.py").write_text("")
    (pkg / "engine" / "compact_worker.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\ndef main():\n    return 0\n")
    monkeypatch.chdir(planted)
    monkeypatch.setenv("PYTHONPATH", str(planted))
    logdir = small_runs(tmp_path, runs=6)
    assert reduce(logdir).ok
    assert not marker.exists()
    w = spied["workers"][0]
    assert w.answered == w.sent == 2 and spied["here"] == []  # our worker did the rounds
    all_packed(logdir)


def test_no_interpreter_to_start_a_worker_with_leaves_the_rounds_here_and_every_run_verified(tmp_path, spied,
                                                                                             monkeypatch):
    """Review R9 F4: with ``sys.executable`` None the start raised TypeError out of ``submit``,
    after the commit: verified runs were reported failed."""
    monkeypatch.setattr(sys, "executable", None)
    logdir = small_runs(tmp_path, runs=6)
    rep = reduce(logdir)
    assert rep.ok and [o.status for o in rep.outcomes] == ["verified"] * 6
    assert spied["workers"] == [] and [len(r) for r in spied["here"]] == [3, 3]
    all_packed(logdir)


def test_a_batchs_rounds_leave_the_shard_folders_to_its_end(tmp_path, monkeypatch):
    """Each round's packing emptied most shard folders (``blobs/ab``) and removed them, and the
    next runs' backups made them again at once (up to 256 mkdir + rmdir a round of 256 blobs): the
    rounds leave them, and the batch's end removes those left empty, once."""
    real_init, real_prune = cm.BatchCompactor.__init__, Vault.prune_shards
    monkeypatch.setattr(cm.BatchCompactor, "__init__", lambda self, ctx: real_init(self, ctx, max_blobs=7,
                                                                                   use_worker=False))
    prunes = []

    def spy(self, shas):
        shas = list(shas)
        prunes.append(len({s[:2] for s in shas}))
        return real_prune(self, shas)

    monkeypatch.setattr(Vault, "prune_shards", spy)
    logdir = small_runs(tmp_path, runs=6)
    before = tree(logdir)
    assert reduce(logdir).ok
    vault = all_packed(logdir)
    assert len(prunes) == 1 and prunes[0] == len({s[:2] for s in backups(vault)})  # once, every folder used
    blobs = os.path.join(vault.root, "blobs")
    assert not os.path.isdir(blobs) or os.listdir(blobs) == []
    restored_exactly(logdir, before)
