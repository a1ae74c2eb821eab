"""A disk retirement of a run whose files have other hard links (a ``cp -al`` / ``rsync
--link-dest`` snapshot outside the logdir), review R9 F2. On one filesystem a retirement renamed
every file into the vault, so the vault's only "copy" of such a file was the snapshot's inode: a
write through the snapshot's name changed the retired bytes, and the restore then refused the
whole run. As a reduction's backups (review R13 F1), such a file is now retired as a copy of its
own (copied and checked into ``retired/<op>/files/<n>``, then its name in the run unlinked after
the ``delete`` record); the outcome says it frees nothing while the other names stand
(``hard_linked_elsewhere``). A failure after the first unlink puts the run back as it was; a
retirement made before (its stored file still shared) is named by ``status``'s look
(``retire_tree.stored_problems``: ``backup_shared``)."""
import hashlib
import os
import subprocess

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Finding, Outcome
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.vault import Vault


def _sha(p):
    with open(p, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _tree(run):
    return {p.name: (_sha(p), p.stat().st_mtime_ns, p.stat().st_mode) for p in run.iterdir()}


def _logdir(tmp_path, snapshot=True):
    logdir = tmp_path / "logs"
    run = logdir / "train"
    with synth.EventWriter(str(run)) as w:
        for s in range(50):
            w.scalar("loss", s, 1.0 / (s + 1))
    (run / "notes.txt").write_bytes(b"original notes\n" * 100)
    for d, dirs, files in os.walk(logdir):
        for n in dirs + files:
            os.utime(os.path.join(d, n), (1_600_000_000, 1_600_000_000))
    if snapshot:
        subprocess.run(["cp", "-al", str(logdir), str(tmp_path / "snapshot")], check=True)
    return logdir, run


def _stored(logdir):
    [m] = [m for m in Vault(str(logdir / ".tb-footprint")).manifests() if m.get("kind") == "retire"]
    d = logdir / ".tb-footprint" / "retired" / m["op_id"] / "files"
    return m, {f["path"]: d / str(i) for i, f in enumerate(m["tree"])}


def test_a_hard_linked_file_is_retired_as_a_copy_of_its_own(tmp_path):
    logdir, run = _logdir(tmp_path)
    before = _tree(run)
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0)
    [o] = rep.outcomes
    assert o.status == Outcome.VERIFIED, o.to_dict()
    assert not run.exists()
    paths = sorted(f"train/{n}" for n in before)
    assert sorted(f["path"] for f in o.findings if f["code"] == Finding.HARD_LINKED) == paths
    assert Finding.HARD_LINKED in o.reason and "stay on disk" in o.reason, o.reason
    _m, stored = _stored(logdir)
    assert all(os.lstat(p).st_nlink == 1 for p in stored.values())  # no inode shared with the snapshot
    snap = tmp_path / "snapshot" / "train"
    assert all(os.lstat(snap / n).st_nlink == 1 for n in before)  # the run's names went
    # the snapshot's copy of the notes rewritten in place (its own name; the logdir is not touched)
    with open(snap / "notes.txt", "r+b") as f:
        f.write(b"EDITED IN THE SNAPSHOT\n")

    (o,) = api.restore(str(logdir), run="train")
    assert o.status == Outcome.RESTORED and o.code is None, (o.status, o.code, o.reason)
    assert _tree(run) == before
    assert (snap / "notes.txt").read_bytes().startswith(b"EDITED IN THE SNAPSHOT\n")  # theirs, untouched


def test_a_failure_after_the_first_unlink_puts_the_run_back(tmp_path):
    logdir, run = _logdir(tmp_path)
    before = _tree(run)
    snap = _tree(tmp_path / "snapshot" / "train")
    faults.arm("retire.mid_delete", "raise")
    try:
        rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0)
    finally:
        faults.disarm_all()
    [o] = rep.outcomes
    assert o.status == Outcome.ROLLED_BACK, o.to_dict()
    assert _tree(run) == before and _tree(tmp_path / "snapshot" / "train") == snap
    assert api.retired(str(logdir)) == [] and api.recover_logdir(str(logdir)) == []
    assert not os.listdir(logdir / ".tb-footprint" / "retired")


def test_only_the_linked_file_is_copied_the_others_are_renamed(tmp_path):
    logdir, run = _logdir(tmp_path, snapshot=False)
    os.link(run / "notes.txt", tmp_path / "notes-snapshot.txt")  # one file with another name
    before = _tree(run)
    inodes = {p.name: p.stat().st_ino for p in run.iterdir()}
    [o] = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0).outcomes
    assert o.status == Outcome.VERIFIED, o.to_dict()
    assert o.findings == [{"code": Finding.HARD_LINKED, "path": "train/notes.txt"}], o.findings
    _m, stored = _stored(logdir)
    event = next(p for p in stored if "tfevents" in p)
    assert os.lstat(stored[event]).st_ino == inodes[event.split("/")[-1]]  # renamed: no copy, no space
    assert os.lstat(stored["train/notes.txt"]).st_ino != inodes["notes.txt"]  # a copy of its own
    assert os.lstat(tmp_path / "notes-snapshot.txt").st_nlink == 1
    (o,) = api.restore(str(logdir), run="train")
    assert o.status == Outcome.RESTORED and _tree(run) == before, o.to_dict()


def test_status_names_a_retired_file_still_shared_with_a_snapshot(tmp_path):
    """A retirement made before this change renamed a linked file into the vault: status names it."""
    from tb_footprint_plugin.engine.retire_tree import stored_problems

    logdir, run = _logdir(tmp_path, snapshot=False)
    assert api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0).ok
    m, stored = _stored(logdir)
    assert stored_problems(m) == []
    os.link(stored["train/notes.txt"], tmp_path / "outside-name")  # what a rename of a linked file left
    assert [(c, p) for c, p, _w in stored_problems(m)] == [(Finding.BACKUP_SHARED, "train/notes.txt")]


@pytest.fixture(autouse=True)
def _disarm():
    yield
    faults.disarm_all()


def _du(*paths) -> int:
    """Allocated bytes under ``paths``, each inode once (``du``'s count)."""
    seen, total = set(), 0
    for top in paths:
        for d, _dirs, files in os.walk(top):
            for n in files:
                st = os.lstat(os.path.join(d, n))
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


def test_links_between_the_runs_own_files_move_as_one_inode_and_come_back_linked(tmp_path):
    """Review R17 F6: two names of one inode, both in the run, are no snapshot. Before, each was
    retired as a copy of its own (the disk grew by the file, the outcome said "other hard links (a
    snapshot?)") and the restore gave back two inodes (nlink 2 -> 1, du grown by the file)."""
    logdir, run = _logdir(tmp_path, snapshot=False)
    (run / "big.bin").write_bytes(os.urandom(400_000))
    os.link(run / "big.bin", run / "twin.bin")
    os.utime(run / "big.bin", (1_600_000_000, 1_600_000_000))
    before = _tree(run)
    ino = (run / "big.bin").stat().st_ino
    used = _du(logdir)
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0)
    [o] = rep.outcomes
    assert o.status == Outcome.VERIFIED, o.to_dict()
    assert Finding.HARD_LINKED not in [f["code"] for f in o.findings], o.to_dict()
    m, stored = _stored(logdir)
    assert stored["train/big.bin"].stat().st_ino == stored["train/twin.bin"].stat().st_ino == ino
    assert _du(logdir) <= used + 64 * 1024, "the retirement copied a file its run's own names share"

    [r] = api.restore(str(logdir), run="train")
    assert r.status == Outcome.RESTORED, r.to_dict()
    assert _tree(run) == before
    assert (run / "big.bin").stat().st_ino == (run / "twin.bin").stat().st_ino
    assert (run / "big.bin").stat().st_nlink == 2


def test_a_run_file_linked_inside_and_outside_the_run_is_still_a_copy(tmp_path):
    """The other name outside the run keeps the rule of R9 F2: the vault's copy is its own."""
    logdir, run = _logdir(tmp_path, snapshot=False)
    (run / "big.bin").write_bytes(os.urandom(100_000))
    os.link(run / "big.bin", run / "twin.bin")
    os.link(run / "big.bin", tmp_path / "outside.bin")
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0)
    [o] = rep.outcomes
    assert o.status == Outcome.VERIFIED, o.to_dict()
    m, stored = _stored(logdir)
    outside = (tmp_path / "outside.bin").stat().st_ino
    assert stored["train/big.bin"].stat().st_ino != outside and stored["train/twin.bin"].stat().st_ino != outside
    with open(tmp_path / "outside.bin", "r+b") as f:
        f.write(b"changed through the snapshot")
    [r] = api.restore(str(logdir), run="train")
    assert r.status == Outcome.RESTORED, r.to_dict()
