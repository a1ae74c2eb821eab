"""Invariant 4: the last by-path steps of a retirement, a put-back, a salvage's recovery and a
rollback go through the folder the logdir store's walk reaches without following a link (after
T2's f670747 moved a restore's writes there; review R7 F3):

- a retirement's own move (``DiskRetire.move``: ``os.rename(src, dst)`` by path after the look)
  and, across filesystems, its removal of the originals (``os.unlink(src)`` by path);
- a retired file's put-back resuming a killed copy (``retire_tree.put_back``'s ``begun`` branch:
  ``placement.resume_copy`` by absolute path), and a reduction's put-back doing the same
  (``swap.put_back``);
- a killed salvage's recovery (``salvage.finish_salvage``: its temporary and salvage file unlinked
  by path) and a rollback's sweep of its put-back temporaries (``swap.remove_put_back_temps``).

Each window is opened by a hook at the instant after the last look (``retire.still_recorded``,
``retire_tree.no_symlink``, ``swap.no_symlink``), not by timing: the run's folder is swapped for a
link to a folder outside the logdir holding a file of the same name. Before, that file was moved
into the vault or unlinked; now nothing out there changes, the step is refused naming the path
(``TransactionError`` coded ``StoreError.SYMLINK``; a retirement's rollback then keeps its journal,
``rollback_incomplete``), and nothing is lost."""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from test_restore_temp_no_follow import _swap, _tree, _unswap
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Failure, Outcome, StoreError
from tb_footprint_plugin.engine import retire, retire_tree, salvage, swap
from tb_footprint_plugin.engine.context import Context, TransactionError
from tb_footprint_plugin.engine.journal import Rec

pytestmark = pytest.mark.usefixtures("disarm_faults")

OLD = time.time() - 7 * 86400
CONFIG = b"lr: 0.1\n" * 40


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _logdir(root: Path) -> Path:
    with synth.EventWriter(str(root / "train")) as w:
        for step in range(3):
            w.scalar("loss", step, 1.0 / (step + 1))
    (root / "train" / "config.yaml").write_bytes(CONFIG)
    for d, _dirs, files in os.walk(root):
        for n in files:
            os.utime(os.path.join(d, n), (OLD, OLD))
    return root


def _outside(tmp_path: Path, name: str, data: bytes) -> tuple:
    outside, aside = tmp_path / "outside", tmp_path / "aside"
    outside.mkdir()
    (outside / name).write_bytes(data)
    return outside, aside


def _run_files(root: Path) -> dict:
    return {os.path.relpath(os.path.join(d, n), root): Path(d, n).read_bytes()
            for d, _x, files in os.walk(root) for n in files}


@pytest.mark.parametrize("same_fs", [True, False], ids=["renamed", "copied"])
def test_a_retirement_moves_nothing_through_a_folder_swapped_for_a_link(tmp_path, monkeypatch, same_fs):
    """The run's folder is swapped for a link to an outside folder holding a ``config.yaml`` right
    after the move's look at that file passed. Before: renamed, the outside file was moved into
    the vault (the inode check failed after it, and it was gone from outside); copied, it was read
    through the link (the sha256 check failed after). Now the move is refused at the link, naming
    the path, the outside folder unchanged; the rollback meets the link too and keeps the journal,
    and once the folder is back the next start puts every file back where it was."""
    logdir = _logdir(tmp_path / "logs")
    before = _run_files(logdir / "train")
    outside, aside = _outside(tmp_path, "config.yaml", b"another user's config\n")
    was = _tree(outside)
    if not same_fs:
        monkeypatch.setattr(retire.Vault, "same_filesystem", lambda self, p: False)
    real, done, moving = retire.still_recorded, [], []
    real_move = retire.DiskRetire.move

    def move(self, cancel, report):
        moving.append(True)
        return real_move(self, cancel, report)

    def look(ctx, f):
        got = real(ctx, f)
        if moving and f["path"] == "train/config.yaml" and not done:  # the look passed: the folder swapped next
            _swap(logdir, "train", outside, aside)
            done.append(f["path"])
        return got

    monkeypatch.setattr(retire.DiskRetire, "move", move)
    monkeypatch.setattr(retire, "still_recorded", look)
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0)
    assert done
    [o] = rep.outcomes
    assert _tree(outside) == was, "a file outside the logdir was moved or changed"
    _refused_and_kept(o)
    _unswap(logdir, "train", aside)
    monkeypatch.setattr(retire, "still_recorded", real)
    api.recover_logdir(str(logdir))
    assert _run_files(logdir / "train") == before  # every file back, byte for byte
    assert _tree(outside) == was


def test_a_copying_retirement_unlinks_no_original_through_a_link(tmp_path, monkeypatch):
    """Across filesystems the originals are unlinked once every copy checked out. The run's folder
    is swapped for a link right after the removal's look at ``config.yaml``. Before: the outside
    folder's ``config.yaml`` was unlinked. Now the removal is refused at the link, naming the path,
    nothing out there changes; once the folder is back the next start rolls the retirement back
    from the vault's copies, every file where it was."""
    logdir = _logdir(tmp_path / "logs")
    before = _run_files(logdir / "train")
    outside, aside = _outside(tmp_path, "config.yaml", CONFIG)  # same bytes, another user's
    was = _tree(outside)
    monkeypatch.setattr(retire.Vault, "same_filesystem", lambda self, p: False)
    real, done, removing = retire.still_recorded, [], []
    real_remove = retire.DiskRetire.remove

    def remove(self, report):
        removing.append(True)
        return real_remove(self, report)

    def look(ctx, f):
        got = real(ctx, f)
        if removing and f["path"] == "train/config.yaml" and not done:
            _swap(logdir, "train", outside, aside)
            done.append(f["path"])
        return got

    monkeypatch.setattr(retire.DiskRetire, "remove", remove)
    monkeypatch.setattr(retire, "still_recorded", look)
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0)
    assert done
    [o] = rep.outcomes
    assert _tree(outside) == was, "a file outside the logdir was unlinked"
    _refused_and_kept(o)
    _unswap(logdir, "train", aside)
    monkeypatch.setattr(retire, "still_recorded", real)
    api.recover_logdir(str(logdir))
    assert _run_files(logdir / "train") == before  # every original back from the vault's copies
    assert _tree(outside) == was


def _refused_and_kept(o) -> None:
    """The move (or removal) refused at the link, naming the path; the rollback meets the link too,
    so the journal is kept for the next start (``rollback_incomplete``), nothing lost."""
    assert (o.status, o.code) == (Outcome.FAILED, Failure.ROLLBACK_INCOMPLETE), (o.status, o.code, o.reason)
    assert o.reason.startswith("train/config.yaml: not reached without a link"), o.reason


def _retired(tmp_path: Path):
    """A logdir whose run ``train`` is retired (renamed into the vault), and its manifest."""
    logdir = _logdir(tmp_path / "logs")
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0)
    assert rep.outcomes[0].status == "verified", rep.outcomes[0].reason
    ctx = Context(str(logdir))
    [m] = retire_tree.retirements(ctx)
    return logdir, ctx, m


def test_a_retired_files_resumed_copy_removes_nothing_through_a_link(tmp_path, monkeypatch):
    """A retired file's put-back resumes a copy a killed attempt began (its ``copying`` record).
    The run's folder is swapped for a link right after the put-back's look; the outside folder
    holds a file of that name with the beginning of the retired bytes. Before: taken for the
    killed copy's beginning and unlinked. Now ``StandsThere`` coded ``symlink``, nothing out there
    changes, the retired file stays in the vault."""
    logdir, ctx, m = _retired(tmp_path)
    i, f = next((i, f) for i, f in enumerate(m["tree"]) if f["path"] == "train/config.yaml")
    os.makedirs(logdir / "train")
    outside, aside = _outside(tmp_path, "config.yaml", CONFIG[:100])
    was = _tree(outside)
    real, done = retire_tree.no_symlink, []

    def look(c, rel):
        real(c, rel)
        if rel == f["path"] and not done:
            _swap(logdir, "train", outside, aside)
            done.append(rel)

    monkeypatch.setattr(retire_tree, "no_symlink", look)
    vault = retire.Vault(m["vault"])
    with pytest.raises(retire_tree.StandsThere) as e:
        retire_tree.put_back(ctx, vault, m["op_id"], i, dict(f), True, begun={f["path"]})
    assert done
    assert _tree(outside) == was, "a file outside the logdir was removed or changed"
    assert e.value.code == StoreError.SYMLINK and f["path"] in str(e.value)
    assert retire_tree.stored_ok(vault, m["op_id"], i, f)  # the retired file is still in the vault


def _vault_blob(ctx: Context, data: bytes, tmp_path: Path) -> str:
    ctx.vault.ensure()
    src = tmp_path / "blob-src"
    src.write_bytes(data)
    sha = _sha(data)
    ctx.vault.store(str(src), sha, link=False)
    return sha


def test_a_reductions_resumed_put_back_removes_nothing_through_a_link(tmp_path, monkeypatch):
    """A reduction's put-back resumes a copy a killed attempt began at an original's path. The
    run's folder is swapped for a link right after ``put_back``'s look; the outside folder holds
    a file of that name with the beginning of the original. Before: taken for the killed copy's
    beginning and unlinked. Now the put-back is refused coded ``symlink``, nothing out there
    changes."""
    ctx = Context(str(tmp_path / "logs"))
    os.makedirs(os.path.join(ctx.logdir, "run"))
    sha = _vault_blob(ctx, CONFIG, tmp_path)
    rec = {"path": "run/config.yaml", "sha256": sha, "size": len(CONFIG), "mode": 0o644, "mtime": OLD}
    outside, aside = _outside(tmp_path, "config.yaml", CONFIG[:100])
    was = _tree(outside)
    real, done = swap.no_symlink, []

    def look(c, rel):
        real(c, rel)
        if rel == rec["path"] and not done:
            _swap(Path(ctx.logdir), "run", outside, aside)
            done.append(rel)

    monkeypatch.setattr(swap, "no_symlink", look)
    with pytest.raises(TransactionError) as e:
        swap.put_back(ctx, ctx.vault, rec, begun={rec["path"]})
    assert done
    assert _tree(outside) == was, "a file outside the logdir was removed or changed"
    assert e.value.code == StoreError.SYMLINK and rec["path"] in str(e.value)


def test_a_killed_salvages_recovery_unlinks_nothing_through_a_link(tmp_path):
    """Recovery undoes a salvage a kill stopped: its temporary and its salvage file go. The run's
    folder is a link to an outside folder holding files of those names. Before: the temporary's
    namesake there was unlinked (by path, no look). Now the recovery is refused coded ``symlink``
    naming the path (the journal stays for the next start), nothing out there changes."""
    ctx = Context(str(tmp_path / "logs"))
    os.makedirs(ctx.logdir)
    ctx.vault.ensure()
    staged = b"late records\n" * 8
    tmp_name = ".footprint-salvage-0123.tmp"
    outside, aside = _outside(tmp_path, tmp_name, staged)
    (outside / "events.out.tfevents.1.salvaged-001").write_bytes(staged)
    was = _tree(outside)
    os.symlink(outside, os.path.join(ctx.logdir, "run"))
    records = [{"type": Rec.BEGIN, "kind": "salvage", "op_id": "20261205T211900-abcdef", "vault": ctx.vault.root,
                "tmp": f"run/{tmp_name}", "final": "run/events.out.tfevents.1.salvaged-001",
                "old_sha256": _sha(b"old"), "new_sha256": _sha(b"new")},
               {"type": Rec.STAGED, "sha256": _sha(staged), "size": len(staged)}]
    with pytest.raises(TransactionError) as e:
        salvage.finish_salvage(ctx, records)
    assert _tree(outside) == was, "a file outside the logdir was unlinked"
    assert e.value.code == StoreError.SYMLINK and "run/" in str(e.value)


def test_a_rollbacks_sweep_of_its_temporaries_removes_nothing_through_a_link(tmp_path, monkeypatch):
    """A rollback sweeps the put-back temporaries a killed attempt left (names only its journaled
    token gives). The run's folder is swapped for a link right after the sweep's look at it; the
    outside folder holds a file of such a name. Before: listed and unlinked out there. Now that
    folder is passed over, nothing out there removed."""
    ctx = Context(str(tmp_path / "logs"))
    os.makedirs(os.path.join(ctx.logdir, "run"))
    token = swap.new_put_back_token()
    sha = _sha(CONFIG)
    name = sorted(swap._temp_names(sha, token))[0]
    outside, aside = _outside(tmp_path, name, b"another user's file\n")
    was = _tree(outside)
    real, done = swap.no_symlink, []

    def look(c, rel):
        real(c, rel)
        if rel.startswith("run/") and not done:
            _swap(Path(ctx.logdir), "run", outside, aside)
            done.append(rel)

    monkeypatch.setattr(swap, "no_symlink", look)
    monkeypatch.setattr(swap, "folder_at", _after_look(swap, look), raising=False)
    swap.remove_put_back_temps(ctx, [{"path": "run/config.yaml", "sha256": sha}], token)
    assert done
    assert _tree(outside) == was, "a file outside the logdir was removed"


def _after_look(mod, look):
    """``folder_at`` with the look (``no_symlink``) run first: the sweep's look, whichever form it has."""
    real = getattr(mod, "folder_at", None)  # none before: the sweep looked by ``no_symlink`` only

    def folder_at(ctx, rel):
        look(ctx, rel)
        return real(ctx, rel)
    return folder_at


def test_a_folders_recorded_time_is_set_on_nothing_through_a_link(tmp_path, monkeypatch):
    """A rollback or a restore gives each folder it recorded (``swap.folder_times``) its time back
    once every file is back (``swap.settle_folder_times``). A folder on its way is swapped for a
    link to an outside folder right after the look at it. Before: the outside folder of that name
    had its time set (``os.utime`` by path follows a link on the way). Now its time is unchanged."""
    ctx = Context(str(tmp_path / "logs"))
    os.makedirs(os.path.join(ctx.logdir, "exp", "run"))
    outside, aside = _outside(tmp_path, "note.txt", b"theirs\n")
    (outside / "run").mkdir()
    mtime = os.stat(outside / "run").st_mtime_ns
    real, done = swap.no_symlink, []

    def look(c, rel):
        real(c, rel)
        if rel == "exp/run" and not done:
            _swap(Path(ctx.logdir), "exp", outside, aside)
            done.append(rel)

    monkeypatch.setattr(swap, "no_symlink", look)
    swap.settle_folder_times(ctx, [{"path": "exp/run", "mtime_ns": 1_000_000_000, "entries": 0}])
    assert done
    assert os.stat(outside / "run").st_mtime_ns == mtime, "an outside folder's time was changed"
    _unswap(Path(ctx.logdir), "exp", aside)
    monkeypatch.setattr(swap, "no_symlink", real)
    swap.settle_folder_times(ctx, [{"path": "exp/run", "mtime_ns": 1_000_000_000, "entries": 0}])
    assert os.stat(os.path.join(ctx.logdir, "exp", "run")).st_mtime_ns == 1_000_000_000  # its own folder's, as before


def test_a_restored_retirement_names_a_folder_it_could_not_settle(tmp_path, monkeypatch):
    """Review R7 F6: a retired run is back, its folders get their recorded mode and time through
    their own descriptors; a recorded folder that is a link now (put there after the folders were
    made) is left as it is, nothing followed. Before, the restore said only 'restored'. Now its
    outcome names that folder, as one whose recorded mode and time were not given back."""
    logdir = _logdir(tmp_path / "logs")
    (logdir / "train" / "empty").mkdir(mode=0o750)
    os.utime(logdir / "train" / "empty", (OLD, OLD))
    os.utime(logdir / "train", (OLD, OLD))
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0)
    assert rep.outcomes[0].status == "verified", rep.outcomes[0].reason
    outside = tmp_path / "outside"
    outside.mkdir()
    mode = os.stat(outside).st_mode
    real = retire.make_dirs

    def made(ctx, dirs, refuse_theirs=False):  # the folders made; then one of them becomes a link outside
        got = real(ctx, dirs, refuse_theirs)
        os.rmdir(logdir / "train" / "empty")
        os.symlink(outside, logdir / "train" / "empty")
        return got

    monkeypatch.setattr(retire, "make_dirs", made)
    [o] = api.restore(str(logdir), op=rep.outcomes[0].op_id)
    assert o.status == Outcome.RESTORED, (o.status, o.reason)
    assert os.stat(outside).st_mode == mode  # never followed
    assert (logdir / "train" / "config.yaml").read_bytes() == CONFIG
    assert "train/empty" in o.reason and "mode and time" in o.reason, o.reason
