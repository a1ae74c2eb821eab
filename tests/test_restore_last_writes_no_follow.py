"""Invariant 4: the last writes a restore made by path go through the folder the logdir store's
walk reaches without following a link (after a20af3d moved a restore's temporary there):

- the late records a restore sets beside an original (``salvage.keep_late_records``), and those
  a start salvages from a grown backup (``salvage.salvage_one``): the temporary and the
  ``<file>.salvaged-NNN`` were made and placed by path;
- the recorded folders a restore makes again (``swap.make_dirs``): ``os.makedirs`` by path after
  ``no_symlink``;
- a retired run's put-back (``retire_tree.put_back``): its looks and the removal of a killed
  copy's temporary (``os.unlink(tmp)``) went by path;
- the recorded mode and time the folders get once every file is back (``swap.settle_dirs``,
  ``retire_tree.chmod_dirs``): ``os.chmod``/``os.utime`` by path after a look.

Each window is opened by a hook at the instant after the last look by path (``Context.abs`` of
the salvage's folder, the backup's read into a start's temporary, ``swap.no_symlink`` of a folder
to make, ``retire_tree.holds_original`` of the temporary, ``recorded_owner`` of a folder whose
mode is set next), not by timing: the run's folder (or one on its way) is swapped for a link to a
folder outside the logdir. Before, a file or a folder appeared there (or its file was removed,
or its folder's mode and time changed); now nothing out there changes, a restore's outcome is
coded ``StoreError.SYMLINK`` naming the path (a start's salvage, whose walk came first, is made in
the run's own folder; a folder's mode is left), and nothing is lost: what stood at the path is in
the vault and named, and once the folder is back the restore is finished byte for byte."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from conftest import copy_real
from test_put_back_strategy_salvage import _grown_backup, _reduced_with_late_records, _restored_once, _salvaged_once
from test_restore_temp_no_follow import PROFILE, _swap, _tree, _unswap
from test_vault_remote import make_logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome, Recovery, StoreError
from tb_footprint_plugin.engine import restore, retire_tree, salvage, swap
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.vault import Vault

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _outside(tmp_path: Path) -> tuple:
    outside, aside = tmp_path / "outside", tmp_path / "aside"
    outside.mkdir()
    (outside / "theirs.txt").write_bytes(b"another user's file\n")
    return outside, aside


def test_the_late_records_are_set_beside_nothing_through_a_link(tmp_path, monkeypatch):
    """A writer appended records to the reduced event file; the restore stores that file in the
    vault and sets its late records beside the original. The run's folder is swapped for a link
    to an outside folder right after the salvage named its folder. Before: the temporary and the
    ``.salvaged-001`` file were made out there. Now nothing appears there, the restore stops coded
    ``symlink_refused`` naming the path, the writer's file is in the vault and named in the
    reduction's manifest (``restore_displaced``), and once the folder is back ``recover``
    finishes: the original byte for byte, the late records beside it once."""
    logdir, run, path, was = _reduced_with_late_records(tmp_path)
    rel = os.path.relpath(path, logdir)
    grown = path.read_bytes()
    op = next(m["op_id"] for m in Context(str(logdir)).vault.manifests())
    outside, aside = _outside(tmp_path)
    before = _tree(outside)
    real_keep, real_abs, inside, done = swap.keep_late_records, Context.abs, [], []

    def keep(ctx, p, *a, **k):
        inside.append(p)
        return real_keep(ctx, p, *a, **k)

    def abs_(self, r):
        got = real_abs(self, r)
        if inside and r == rel and not done:  # the salvage's folder named: the temporary is made next
            _swap(logdir, "run", outside, aside)
            done.append(r)
        return got

    monkeypatch.setattr(swap, "keep_late_records", keep)
    monkeypatch.setattr(Context, "abs", abs_)
    outs = api.restore(str(logdir), op=op)
    monkeypatch.undo()
    assert done, "the restore never set the late records aside"
    assert _tree(outside) == before, "written outside the logdir"
    assert [(o.status, o.code) for o in outs] == [(Outcome.FAILED, StoreError.SYMLINK)], [o.to_dict() for o in outs]
    assert rel in outs[0].reason and "link" in outs[0].reason, outs[0].reason
    ctx = Context(str(logdir))
    assert ctx.vault.check_blob(_sha(grown)), "the writer's file is not in the vault"
    named = ctx.vault.read_manifest(op).get("restore_displaced", [])
    assert [d["sha256"] for d in named] == [_sha(grown)], f"the writer's file is not named: {named}"
    _unswap(logdir, "run", aside)
    [r] = api.recover_logdir(str(logdir))
    assert r.action == "completed", r
    _restored_once(run, path, was)
    assert _tree(outside) == before


def test_a_recorded_folder_is_made_again_nowhere_through_a_link(tmp_path, monkeypatch):
    """The archive removed the profile and its folders (``a/plugins/profile/<ts>``); the restore
    makes them again. ``a/plugins`` is made, then swapped for a link to an outside folder right
    after the next folder's look (``no_symlink``). Before: ``profile/<ts>`` was made out there.
    Now nothing appears there, the restore stops coded ``symlink_refused`` naming the path, and
    once the folder is back ``recover`` puts the profile back byte for byte, its folders 0755."""
    logdir = make_logdir(tmp_path)
    prof = next((logdir / "a").rglob("*.xplane.pb"))
    original = prof.read_bytes()
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    op = next(o.op_id for o in rep.outcomes if o.run == "a" and o.op_id)
    assert not (logdir / "a" / "plugins").exists(), "the archive removes the profile's folders"
    outside, aside = _outside(tmp_path)
    before = _tree(outside)
    real_make, real_look, inside, done = restore.make_dirs, swap.no_symlink, [], []

    def make(ctx, dirs, refuse_theirs=False):
        inside.append(dirs)
        return real_make(ctx, dirs, refuse_theirs)

    def look(ctx, r):
        real_look(ctx, r)
        if inside and r == "a/plugins/profile" and not done:  # looked at; made next
            _swap(logdir, "a/plugins", outside, aside)
            done.append(r)

    monkeypatch.setattr(restore, "make_dirs", make)
    monkeypatch.setattr(swap, "no_symlink", look)
    outs = api.restore(str(logdir), op=op)
    monkeypatch.undo()
    assert done, "the restore never made the profile's folder"
    assert _tree(outside) == before, "a folder was made outside the logdir"
    assert [(o.status, o.code) for o in outs] == [(Outcome.FAILED, StoreError.SYMLINK)], [o.to_dict() for o in outs]
    assert "a/plugins/profile" in outs[0].reason and "link" in outs[0].reason, outs[0].reason
    assert Context(str(logdir)).vault.check_blob(_sha(original)), "the original is not in the vault"
    os.unlink(logdir / "a" / "plugins")
    os.rename(aside, logdir / "a" / "plugins")
    [r] = api.recover_logdir(str(logdir))
    assert r.action == "completed", r
    assert prof.read_bytes() == original
    assert (os.stat(logdir / "a" / "plugins" / "profile").st_mode & 0o777) == 0o755
    assert _tree(outside) == before


def test_a_retired_files_put_back_removes_nothing_through_a_link(tmp_path, monkeypatch):
    """A retired run's file stands at its path already, and a killed copy's temporary holding it
    beside it (a put-back killed before it deleted its source). The file's folder is swapped for a
    link to an outside folder right after the temporary was found to hold the file. Before: the
    outside folder's file of that name was removed. Now nothing out there changes, the path is
    refused (``StandsThere``, coded ``StoreError.SYMLINK``, naming it), the retired file stays in
    the vault, and once the folder is back the put-back finishes, the temporary gone."""
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    target = logdir / PROFILE
    retired = target.read_bytes()
    vault = tmp_path / "vault"
    vault.mkdir()
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, backup_dir=str(vault))
    assert rep.ok, rep.to_dict()
    op = rep.outcomes[0].op_id
    [m] = [m for m in Vault(str(vault)).manifests() if m.get("op_id") == op]
    i, f = next((i, f) for i, f in enumerate(m["tree"]) if f["path"] == PROFILE)
    tmp_name = f".footprint-unretire-{op}-{i}.tmp"
    target.parent.mkdir(parents=True)
    target.write_bytes(retired)  # what a killed put-back left: the file in place, its temporary beside it
    (target.parent / tmp_name).write_bytes(retired)
    outside, aside = _outside(tmp_path)
    (outside / tmp_name).write_bytes(b"another user's file of that name\n")
    before = _tree(outside)
    folder = os.path.dirname(PROFILE)
    real, done = retire_tree.holds_original, []
    ctx = Context(str(logdir))
    tmp_key = ctx.key(os.path.join(folder, tmp_name))

    def holds(store, key, *a, **k):
        got = real(store, key, *a, **k)
        if key == tmp_key and got and not done:  # found to hold the file: removed next
            _swap(logdir, folder, outside, aside)
            done.append(key)
        return got

    monkeypatch.setattr(retire_tree, "holds_original", holds)
    try:
        got = retire_tree.put_back(ctx, Vault(str(vault)), op, i, f, same_fs=True)
    except retire_tree.StandsThere as e:
        got = e
    monkeypatch.undo()
    assert done, "the put-back never looked at its temporary"
    assert _tree(outside) == before, "removed or written outside the logdir"
    assert isinstance(got, retire_tree.StandsThere), f"not refused: {got!r}"
    assert got.code == StoreError.SYMLINK and PROFILE in str(got), (got.code, str(got))
    assert retire_tree.stored_ok(Vault(str(vault)), op, i, f), "the retired file left the vault"
    _unswap(logdir, folder, aside)
    assert retire_tree.put_back(ctx, Vault(str(vault)), op, i, f, same_fs=True) is None
    assert target.read_bytes() == retired and not (target.parent / tmp_name).exists()
    assert _tree(outside) == before


def test_a_start_salvages_late_records_nowhere_through_a_link(tmp_path, monkeypatch):
    """A writer that kept the original open appended records to its hard-linked backup; a start
    salvages them beside the reduced file (``salvage_one``). The run's folder is swapped for a
    link to an outside folder right before the temporary is made. Before: the temporary and
    the ``.salvaged-001`` file were made out there. Now both are made in the folder the walk
    reached (the run's own, wherever it was moved): nothing appears outside, and once the folder
    is back the records stand in the run once."""
    logdir, path = _grown_backup(tmp_path)
    rel = f"run/{path.name}.salvaged-001"
    outside, aside = _outside(tmp_path)
    before = _tree(outside)
    real_open, opened, done = salvage.open_regular, [], []

    def open_regular(p, *a, **k):
        opened.append(p)  # the backup: read whole first, then copied into the temporary
        if len(opened) == 2 and not done:  # the salvage's folder looked at: the temporary is made next
            _swap(logdir, "run", outside, aside)
            done.append(p)
        return real_open(p, *a, **k)

    monkeypatch.setattr(salvage, "open_regular", open_regular)
    outs = api.recover_logdir(str(logdir))
    monkeypatch.undo()
    assert done, "the start never salvaged the late records"
    assert _tree(outside) == before, "written outside the logdir"
    assert [o.action for o in outs] == [Recovery.SALVAGED], outs
    _unswap(logdir, "run", aside)
    _salvaged_once(path)
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".footprint-")]


def _stats(root: Path) -> dict:
    """Each entry under ``root``: its mode and mtime."""
    return {os.path.relpath(os.path.join(d, n), root): (os.lstat(os.path.join(d, n)).st_mode,
                                                        os.lstat(os.path.join(d, n)).st_mtime_ns)
            for d, dirs, files in os.walk(root) for n in dirs + files}


def _outside_folder(tmp_path: Path, name: str) -> tuple:
    """An outside folder holding a folder ``name`` of its own mode and time (0711, 2001)."""
    outside, aside = _outside(tmp_path)
    (outside / name).mkdir()
    os.chmod(outside / name, 0o711)
    os.utime(outside / name, ns=(10**18, 10**18))
    return outside, aside


def test_a_restores_folder_modes_change_nothing_through_a_link(tmp_path, monkeypatch):
    """Every file is back; the folders the restore made get their recorded mode and time. The
    profile's parent folder is swapped for a link to an outside folder holding a folder of the
    same name right after the restore looked at the profile's folder. Before: that outside
    folder got the recorded mode and time. Now nothing out there changes, and once the folder is
    back the profile is there byte for byte."""
    logdir = make_logdir(tmp_path)
    prof = next((logdir / "a").rglob("*.xplane.pb"))
    original = prof.read_bytes()
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    op = next(o.op_id for o in rep.outcomes if o.run == "a" and o.op_id)
    folder = os.path.relpath(prof.parent, logdir)
    outside, aside = _outside_folder(tmp_path, prof.parent.name)
    before = _stats(outside)
    real, done = swap.recorded_owner, []

    def owner(rec):
        if rec.get("path") == folder and "sha256" not in rec and not done:  # its mode is set next
            _swap(logdir, os.path.dirname(folder), outside, aside)
            done.append(rec["path"])
        return real(rec)

    monkeypatch.setattr(swap, "recorded_owner", owner)
    api.restore(str(logdir), op=op)
    monkeypatch.undo()
    assert done, "the restore never set the profile folder's mode"
    assert _stats(outside) == before, "a folder outside the logdir changed"
    _unswap(logdir, os.path.dirname(folder), aside)
    assert prof.read_bytes() == original


def test_an_unretires_folder_modes_change_nothing_through_a_link(tmp_path, monkeypatch):
    """A retired run is back; its folders get their recorded mode and time. The profile's parent
    folder is swapped for a link to an outside folder holding a folder of the same name right
    before the profile's folder gets its owner. Before: that outside folder got the recorded mode
    and time. Now nothing out there changes, and the run's files are back."""
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    target = logdir / PROFILE
    retired = target.read_bytes()
    vault = tmp_path / "vault"
    vault.mkdir()
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, backup_dir=str(vault))
    assert rep.ok, rep.to_dict()
    folder = os.path.dirname(PROFILE)
    outside, aside = _outside_folder(tmp_path, os.path.basename(folder))
    before = _stats(outside)
    real, done = retire_tree.recorded_owner, []

    def owner(rec):
        if rec.get("path") == folder and "sha256" not in rec and not done:  # its mode is set next
            _swap(logdir, os.path.dirname(folder), outside, aside)
            done.append(rec["path"])
        return real(rec)

    monkeypatch.setattr(retire_tree, "recorded_owner", owner)
    api.restore(str(logdir), op=rep.outcomes[0].op_id, backup_dir=str(vault))
    monkeypatch.undo()
    assert done, "the unretire never set the profile folder's mode"
    assert _stats(outside) == before, "a folder outside the logdir changed"
    _unswap(logdir, os.path.dirname(folder), aside)
    assert target.read_bytes() == retired
