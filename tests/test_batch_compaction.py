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
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from helpers_crash import Killed, kill
from test_small_packs import small_runs as small_runs_of, tree
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import compactor as cm
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine import faults, front_local, lease, remote_vault
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.vault import KEPT_BUSY, PACKED, Vault
from tb_footprint_plugin.storage.store_posix import PosixStore

RUNS = 12
DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


def small_runs(root: Path, runs: int = RUNS, files: int = 3) -> Path:
    return small_runs_of(root, runs, files)


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
    # the rounds in this process, where the spy sees them (test_compact_worker: in a worker's)
    monkeypatch.setattr(cm.BatchCompactor, "__init__", lambda self, ctx: real_init(self, ctx, max_blobs=7,
                                                                                   use_worker=False))
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


def test_a_round_of_two_operations_sharing_a_salvaged_backup_packs_it_for_neither(tmp_path):
    """``compact_ops`` across operations: a digest both name is compacted once, and one whose
    backup an operation salvaged (``grew_from``: its mtime lives on the blob) is kept a blob of
    its own for both, as ``compact_all`` keeps it for one."""
    v = Vault(str(tmp_path / "v"))
    v.ensure()
    shas = []
    for i in range(3):
        p = tmp_path / f"f{i}.xplane.pb"
        p.write_bytes(hashlib.sha256(b"%d" % i).digest() * 200)
        shas.append(hashlib.sha256(p.read_bytes()).hexdigest())
        v.store(str(p), shas[-1])
        os.unlink(p)
    s1, s2, s3 = shas
    a, b = "20260101T000000-aaaaaa", "20260101T000001-bbbbbb"
    manifests = {a: {"files": [{"sha256": s1, "grew_from": "x"}, {"sha256": s2}]},
                 b: {"files": [{"sha256": s1}, {"sha256": s3}]}}
    out = v.compact_ops({a: [s1, s2], b: [s1, s3]}, manifests)
    assert out[a][s2] == PACKED and out[b][s3] == PACKED
    assert out[a][s1] == out[b][s1] != PACKED and v.blob_form(s1) != "packed"
    assert v.pending_compactions() == {}
    for s in shas:
        assert v.check_blob(s)


def _noted_reduction(tmp_path, waits_for):
    """One run reduced into a hard-link vault, then its compaction noted as a batch would note it."""
    logdir = small_runs(tmp_path, runs=1)
    rep = reduce(logdir, vault_format="hardlink")
    assert rep.ok
    vault = Context(str(logdir)).vault
    (m,) = vault.manifests()
    shas = [f["sha256"] for f in m["files"]]
    vault.note_compaction(m["op_id"], shas, waits_for=waits_for)
    return logdir, vault, m["op_id"], shas


def test_a_start_beside_a_running_batch_leaves_that_batchs_notes_to_it(tmp_path):
    """R8 F3: a note waits outside the run's lock until its round; another process starting
    meanwhile (status, the tab, another reduce) compacted it one pack a run and said it finished
    "an interrupted compaction" of a batch still running. A note naming a live process of this
    host is left to it; once that process is gone the next start finishes it."""
    batch = subprocess.Popen(["sleep", "60"])  # the batch's process, still running
    try:
        who = {"host": socket.gethostname(), "pid": batch.pid, "pid_start": lease.process_start(batch.pid)}
        logdir, vault, op, shas = _noted_reduction(tmp_path, who)
        assert vault.compaction_waits_for(op) == who
        got = api.recover_logdir(str(logdir))
        assert not any(r.code == Finding.COMPACTION_FINISHED for r in got), [r.to_dict() for r in got]
        assert op in vault.pending_compactions() and all(vault.blob_form(s) == "plain" for s in shas)
    finally:
        batch.kill()
        batch.wait()
    got = api.recover_logdir(str(logdir))  # the batch is gone: its note is anyone's to finish
    assert any(r.code == Finding.COMPACTION_FINISHED and r.op_id == op for r in got), [r.to_dict() for r in got]
    assert vault.pending_compactions() == {} and all(vault.blob_form(s) == "packed" for s in shas)


@pytest.mark.parametrize("who", ["this process", "another host", "malformed"])
def test_a_note_of_this_process_or_of_no_live_batch_here_is_finished_at_once(tmp_path, who):
    me = {"host": socket.gethostname(), **lease.me()}
    waits_for = {"this process": me, "another host": dict(me, host=me["host"] + ".elsewhere"),
                 "malformed": {"host": me["host"], "pid": str(os.getpid())}}[who]
    logdir, vault, op, shas = _noted_reduction(tmp_path, waits_for)
    got = api.recover_logdir(str(logdir))
    assert any(r.code == Finding.COMPACTION_FINISHED and r.op_id == op for r in got), [r.to_dict() for r in got]
    assert vault.pending_compactions() == {}


def test_the_batch_ends_retries_go_in_rounds_of_max_ops_and_hold_no_manifest(tmp_path, monkeypatch):
    """R8 F1: every run that found a blob busy was retried in one round at the batch's end (two
    descriptors a run lock, unbounded) and kept its manifest till then."""
    logdir = small_runs(tmp_path, runs=5)
    ctx = Context(str(logdir))
    first = []

    def busy_in_the_first_round(c):
        if not first:
            first.append(True)
            return set(backups(ctx.vault))  # every backup of the batch is busy in its round
        return set()

    monkeypatch.setattr(cm, "journal_blobs", busy_in_the_first_round)
    real_init, real_compact = cm.BatchCompactor.__init__, cm.BatchCompactor._compact
    monkeypatch.setattr(cm.BatchCompactor, "__init__", lambda self, c: real_init(self, c, max_ops=5, use_worker=False))
    retries = []

    def spy(self, group, retry):
        if not retry:
            retries.append([(len(i[2]), i[3]) for i in group])
        return real_compact(self, group, retry)

    monkeypatch.setattr(cm.BatchCompactor, "_compact", spy)
    before = tree(logdir)
    real_close = cm.BatchCompactor.close

    def close_with_rounds_of_two(self, finish=True):
        self.max_ops = 2
        real_close(self, finish)

    monkeypatch.setattr(cm.BatchCompactor, "close", close_with_rounds_of_two)
    assert reduce(logdir).ok
    assert [len(r) for r in retries] == [2, 2, 1]
    assert all(m is None and n == 3 for r in retries for n, m in r)
    vault = Context(str(logdir)).vault
    assert all(vault.blob_form(s) == "packed" for s in backups(vault)) and vault.pending_compactions() == {}
    restored_exactly(logdir, before)
