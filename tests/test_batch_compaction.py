"""Issue #27 item 5: a local batch's compaction in rounds of many runs (``engine.compactor``).

A run's backups used to be compacted alone in its turn: a pack, an index object and their syncs
a run, merged again at the batch's end. Now each committed run's compaction is noted in its turn
and the runs are compacted together (``Vault.compact_ops``), their small backups in shared packs.
Each test names what it checks: fewer packs, a blob another transaction backs up kept and packed
at the batch's end, an interrupted batch's notes finished by the next start, a run taken by
another process keeping its note, a kill inside a round, and the blob locks' files (left by a
backup for the compaction that follows, never left behind).
"""
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from helpers_crash import Killed, kill
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine import compactor as cm
from tb_footprint_plugin.engine import faults, front_local, remote_vault
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.vault import KEPT_BUSY, PACKED, Vault
from tb_footprint_plugin.storage.store_posix import PosixStore

RUNS = 12
DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


def small_runs(root: Path, runs: int = RUNS, files: int = 3) -> Path:
    logdir = root / "logs"
    for r in range(runs):
        run = logdir / f"run{r:02d}"
        with synth.EventWriter(str(run)) as w:
            for step in range(5):
                w.scalar("loss", step, 1.0 / (step + 1))
        session = run / "plugins" / "profile" / "2026_01_01_00_00_00"
        session.mkdir(parents=True)
        for i in range(files):
            synth.write_xplane(str(session / f"host{i}.xplane.pb"), 20 + i * 15, seed=r * 10 + i)
    synth.age(str(logdir))
    return logdir


def tree(root: Path) -> dict:
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if rel.startswith(".tb-footprint") or not p.is_file():
            continue
        st = p.stat()
        out[rel] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mtime_ns, st.st_mode)
    return out


def reduce(logdir: Path, **kw):
    return api.reduce_logdir(str(logdir), policy=DROP, dry_run=False, verify_backends=("python",), **kw)


def backups(vault: Vault) -> list:
    return sorted({f["sha256"] for m in vault.manifests() for f in m.get("files", [])})


def pack_files(vault: Vault) -> list:
    root = remote_vault.packs_root(vault.root)
    if not os.path.isdir(root):
        return []
    return [e.key for e in PosixStore(root).list("data") if e.key.endswith(".pack")]


def lock_files(vault: Vault) -> list:
    folder = os.path.join(vault.root, "compact")
    return sorted(n for n in os.listdir(folder) if n.endswith(".lock") and n != "packs.lock") \
        if os.path.isdir(folder) else []


def restored_exactly(logdir: Path, before: dict) -> None:
    outs = api.restore(str(logdir))
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    assert tree(logdir) == before


def test_a_batch_packs_many_runs_together_not_a_pack_a_run(tmp_path, monkeypatch):
    rounds = []
    real = Vault.compact_ops

    def spy(self, ops, *a, **kw):
        rounds.append(sorted(ops))
        return real(self, ops, *a, **kw)

    monkeypatch.setattr(Vault, "compact_ops", spy)
    logdir = small_runs(tmp_path)
    before = tree(logdir)
    rep = reduce(logdir)
    assert rep.ok and sum(o.status == "verified" for o in rep.outcomes) == RUNS
    vault = Context(str(logdir)).vault
    shas = backups(vault)
    assert len(shas) == 3 * RUNS
    # 12 runs of 3 small backups wait for one round (fewer than PACK_BATCH blobs, max_ops runs)
    assert len(rounds) == 1 and len(rounds[0]) == RUNS, rounds
    assert all(vault.blob_form(s) == "packed" for s in shas)
    assert len(pack_files(vault)) == 1, pack_files(vault)
    assert vault.pending_compactions() == {}
    assert lock_files(vault) == []  # every lock file a backup left was removed by its compaction's lock
    restored_exactly(logdir, before)


def test_rounds_start_when_enough_backups_wait(tmp_path, monkeypatch):
    rounds = []
    real = Vault.compact_ops

    def spy(self, ops, *a, **kw):
        rounds.append(len(ops))
        return real(self, ops, *a, **kw)

    monkeypatch.setattr(Vault, "compact_ops", spy)
    real_init = cm.BatchCompactor.__init__
    monkeypatch.setattr(cm.BatchCompactor, "__init__", lambda self, ctx: real_init(self, ctx, max_blobs=7))
    logdir = small_runs(tmp_path, runs=6)
    rep = reduce(logdir)
    assert rep.ok
    # 3 backups a run: a round when 7 or more wait (after the 3rd and the 6th run)
    assert rounds == [3, 3], rounds
    vault = Context(str(logdir)).vault
    assert all(vault.blob_form(s) == "packed" for s in backups(vault))


def test_a_blob_a_transaction_under_way_backs_up_is_kept_then_packed_at_the_batch_end(tmp_path, monkeypatch):
    logdir = small_runs(tmp_path, runs=4)
    ctx = Context(str(logdir))
    seen = {}
    real_journal_blobs = cm.journal_blobs

    def busy_during_the_batch(c):
        # the first round sees one of run00's backups named by another run's journal
        if "first" not in seen:
            seen["first"] = backups(ctx.vault)[0]
            return real_journal_blobs(c) | {seen["first"]}
        return real_journal_blobs(c)

    monkeypatch.setattr(cm, "journal_blobs", busy_during_the_batch)
    results = []
    real = Vault.compact_ops

    def spy(self, ops, *a, **kw):
        out = real(self, ops, *a, **kw)
        results.append({s: v for what in out.values() for s, v in what.items()})
        return out

    monkeypatch.setattr(Vault, "compact_ops", spy)
    before = tree(logdir)
    rep = reduce(logdir)
    assert rep.ok
    busy = seen["first"]
    assert results[0][busy] == KEPT_BUSY and len(results) == 2  # the round, then the batch end's retry
    assert results[1][busy] == PACKED
    vault = Context(str(logdir)).vault
    assert all(vault.blob_form(s) == "packed" for s in backups(vault))
    assert vault.pending_compactions() == {}
    restored_exactly(logdir, before)


def test_an_interrupted_batch_compacts_nothing_more_and_its_notes_are_settled(tmp_path, monkeypatch):
    """Ctrl-C after the runs committed: the compactor's round is not started (``close(finish=
    False)``); the notes each run left are what the interrupt's settling (``recover``) finishes."""
    logdir = small_runs(tmp_path, runs=4)
    before = tree(logdir)
    real_run_batch = front_local.run_batch
    rounds, closes, noted = [], [], []
    real_compact, real_close = cm.BatchCompactor._compact, cm.BatchCompactor.close

    def run_then_interrupt(*a, **kw):  # Ctrl-C right after the batch's runs committed
        real_run_batch(*a, **kw)
        noted.append(len(Context(str(logdir)).vault.pending_compactions()))
        raise KeyboardInterrupt

    monkeypatch.setattr(front_local, "run_batch", run_then_interrupt)
    monkeypatch.setattr(cm.BatchCompactor, "_compact", lambda self, *a, **kw: rounds.append(a) or real_compact(
        self, *a, **kw))
    monkeypatch.setattr(cm.BatchCompactor, "close", lambda self, finish=True: closes.append(finish) or real_close(
        self, finish))
    with pytest.raises(KeyboardInterrupt):
        reduce(logdir)
    assert noted == [4] and closes == [False] and rounds == []
    vault = Context(str(logdir)).vault
    assert len(vault.manifests()) == 4 and vault.pending_compactions() == {}
    assert all(vault.blob_form(s) == "packed" for s in backups(vault))
    monkeypatch.undo()
    restored_exactly(logdir, before)


def test_a_run_another_process_holds_keeps_its_note(tmp_path, monkeypatch):
    logdir = small_runs(tmp_path, runs=3)
    ctx = Context(str(logdir))
    held = {}
    real_close = cm.BatchCompactor.close

    def close_while_run01_is_taken(self, finish=True):
        # another process takes run01 (a restore) between its commit and the round
        script = ("import sys, time; from tb_footprint_plugin.engine.journal import RunLock\n"
                  "with RunLock(sys.argv[1], 'run01'):\n    print('held', flush=True); sys.stdin.read()")
        p = subprocess.Popen([sys.executable, "-c", script, ctx.lock_dir], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, cwd=REPO)
        try:
            assert p.stdout.readline().strip() == "held"
            held["yes"] = True
            real_close(self, finish)
        finally:
            p.communicate("", timeout=30)

    monkeypatch.setattr(cm.BatchCompactor, "close", close_while_run01_is_taken)
    before = tree(logdir)
    rep = reduce(logdir)
    assert rep.ok and held
    vault = Context(str(logdir)).vault
    pending = vault.pending_compactions()
    by_run = {m["run"]: m for m in vault.manifests()}
    assert list(pending) == [by_run["run01"]["op_id"]]
    assert all(vault.blob_form(f["sha256"]) == "plain" for f in by_run["run01"]["files"])
    assert all(vault.blob_form(f["sha256"]) == "packed" for r in ("run00", "run02") for f in by_run[r]["files"])
    monkeypatch.undo()
    api.recover_logdir(str(logdir))
    assert vault.pending_compactions() == {}
    assert all(vault.blob_form(s) == "packed" for s in backups(vault))
    restored_exactly(logdir, before)


@pytest.mark.parametrize("step", ["reduce.pack_indexed", "reduce.pack_unlinked"])
def test_a_kill_inside_a_round_is_finished_by_the_next_start(tmp_path, step):
    logdir = small_runs(tmp_path, runs=5)
    before = tree(logdir)
    faults.arm(step, kill)
    with pytest.raises(Killed):
        reduce(logdir)
    faults.disarm_all()
    vault = Context(str(logdir)).vault
    assert len(vault.pending_compactions()) == 5  # every run of the round still noted
    for s in backups(vault):
        assert vault.check_blob(s)  # whole, in one form or two
    api.recover_logdir(str(logdir))
    assert vault.pending_compactions() == {}
    assert all(vault.blob_form(s) == "packed" for s in backups(vault))
    assert lock_files(vault) == []
    restored_exactly(logdir, before)


def test_a_hard_link_vault_leaves_no_lock_file(tmp_path):
    logdir = small_runs(tmp_path, runs=3)
    rep = reduce(logdir, vault_format="hardlink")
    assert rep.ok
    vault = Context(str(logdir)).vault
    assert all(vault.blob_form(s) == "plain" for s in backups(vault))
    assert lock_files(vault) == []


def test_a_lock_file_a_backup_left_is_the_same_lock_for_everyone(tmp_path):
    v = Vault(str(tmp_path / "v"))
    v.ensure()
    v.compacts = True
    p = tmp_path / "f.xplane.pb"
    p.write_bytes(b"x" * 5000)
    sha = hashlib.sha256(p.read_bytes()).hexdigest()
    v.store(str(p), sha, pin="20260101T000000-abcdef")
    lock = os.path.join(v.root, "compact", sha + ".lock")
    assert os.path.isfile(lock)  # left for the compaction
    script = ("import sys; from tb_footprint_plugin.engine.vault import Vault\n"
              "v = Vault(sys.argv[1])\n"
              "with v._blob_lock(sys.argv[2]) as mine:\n    print(mine)")
    with v._blob_lock(sha) as mine:
        assert mine
        other = subprocess.run([sys.executable, "-c", script, v.root, sha], capture_output=True, text=True,
                               cwd=REPO, check=True).stdout.strip()
        assert other == "False"  # another process is refused while this one holds the left file
    assert not os.path.exists(lock)  # a lock without ``leave`` removes it
