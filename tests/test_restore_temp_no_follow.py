"""Invariant 4: a restore's verified temporary, and any folder missing on the way to it, is made in
the folder the logdir store's walk reaches without following a link (``PosixStore.folder(create=
True)``), on every restore path on a disk: a reduction's put-back (plain and packed blobs,
``Vault.restore_blob`` / ``_restore_zst``), a retired run's (``retire_tree.put_back``: moved from
the vault or copied through a temporary), a restore's streamed check (``prepare_streamed``) and
its verified temporary's put-back (``Prepared.put``).

Since 269fd89 the put-back's *place* was made in that folder, but the temporary was still made by
absolute path (``os.makedirs`` then a create in the folder named): a folder on the way swapped for a
link to a folder outside the logdir between the put-back's look and the temporary's creation
received the temporary (and ``os.makedirs`` made the missing folders out there). The window is
opened by a hook at the instant after the look (``swap._where_looked``, built right before the
temporary is made; ``retire_tree._look`` of an unretire; ``no_symlink`` of the streamed
check), not by timing. Now the walk refuses the link, naming it, nothing is written outside, and
the original stays in the vault: a reduction's restore stops coded ``symlink_refused`` (recover
finishes it once the folder is back), a retirement's restore leaves that path ``not_restored``
with every other file back."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from conftest import copy_real
from test_vault_remote import make_logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Outcome, StoreError
from tb_footprint_plugin.engine import faults, restore_staged, retire_tree, swap
from tb_footprint_plugin.engine.context import Context, TransactionError
from tb_footprint_plugin.engine.restore_staged import Prepared, prepare_streamed
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_posix import PosixStore

pytestmark = pytest.mark.usefixtures("disarm_faults")

PROFILE = "train/plugins/profile/2026_11_30_00_20_30/vm.xplane.pb"


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _tree(root: Path) -> dict:
    """Everything under ``root`` (outside the logdir): relative path -> content's sha256 (None: a folder)."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for n in dirs:
            out[os.path.relpath(os.path.join(dirpath, n), root)] = None
        for n in files:
            p = os.path.join(dirpath, n)
            out[os.path.relpath(p, root)] = _sha(Path(p).read_bytes())
    return out


def _swap(logdir: Path, rel_folder: str, outside: Path, aside: Path) -> None:
    """The logdir's folder ``rel_folder`` moved aside (out of the logdir) and a link to ``outside``
    put in its place: what another user, or a writer, may do at any instant."""
    os.rename(logdir / rel_folder, aside)
    os.symlink(outside, logdir / rel_folder)


def _unswap(logdir: Path, rel_folder: str, aside: Path) -> None:
    os.unlink(logdir / rel_folder)
    os.rename(aside, logdir / rel_folder)


# --- a reduction's restore ----------------------------------------------------------------------

@pytest.mark.parametrize("which", ["folder", "parent"], ids=["its-folder", "a-parent-folder-missing-inside"])
@pytest.mark.parametrize("vault_format", ["hardlink", "compressed"], ids=["plain-blob", "packed-blob"])
def test_a_reduction_restore_makes_no_temporary_through_a_link(tmp_path, monkeypatch, which, vault_format):
    """The profile's folder (or its parent, the profile's folder then missing under the link) is
    swapped for a link to an outside folder right after the put-back looked at the profile's
    path. Before: the temporary (and the missing folder) appeared in the outside folder. Now
    nothing appears there at any instant, the restore stops naming the link, coded, the original
    in the vault, and once the folder is back, recover finishes the restore byte for byte."""
    logdir = make_logdir(tmp_path)
    prof = next((logdir / "a").rglob("*.xplane.pb"))
    rel = os.path.relpath(prof, logdir)
    original = prof.read_bytes()
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",),
                            vault_format=vault_format)
    op = next(o.op_id for o in rep.outcomes if o.run == "a" and o.op_id)
    assert not prof.exists(), "the archive policy removes the profile"
    form = Context(str(logdir)).vault.blob_form(_sha(original))
    assert form == ("plain" if vault_format == "hardlink" else "packed"), form
    outside, aside = tmp_path / "outside", tmp_path / "aside"
    outside.mkdir()
    (outside / "theirs.txt").write_bytes(b"another user's file\n")
    swapped = os.path.dirname(rel) if which == "folder" else os.path.dirname(os.path.dirname(rel))
    before = _tree(outside)
    seen = []
    faults.arm("restore_copied", lambda: seen.append(_tree(outside)))  # each temporary made, not yet placed
    real, done = swap._where_looked, []

    def where_looked(place, ctx, path, *a, **k):
        if path == rel and not done:  # the look is made; the temporary is made next
            _swap(logdir, swapped, outside, aside)
            done.append(path)
        return real(place, ctx, path, *a, **k)

    monkeypatch.setattr(swap, "_where_looked", where_looked)
    outs = api.restore(str(logdir), op=op)
    monkeypatch.undo()
    faults.disarm_all()
    assert done, "the put-back never reached the profile"
    assert all(s == before for s in seen), f"written outside the logdir: {seen}"
    assert _tree(outside) == before, "the folder outside the logdir changed"
    assert [(o.status, o.code) for o in outs] == [(Outcome.FAILED, StoreError.SYMLINK)], [o.to_dict() for o in outs]
    assert rel in outs[0].reason and "symlink" in outs[0].reason and "recover" in outs[0].reason, outs[0].reason
    assert Context(str(logdir)).vault.check_blob(_sha(original)), "the original is not in the vault"
    _unswap(logdir, swapped, aside)
    [r] = api.recover_logdir(str(logdir))
    assert r.action == "completed", r
    assert prof.read_bytes() == original
    assert _tree(outside) == before


# --- a retired run's restore --------------------------------------------------------------------

@pytest.mark.parametrize("which", ["folder", "parent"], ids=["its-folder", "a-parent-folder-missing-inside"])
@pytest.mark.parametrize("vault_elsewhere", [False, True], ids=["moved-from-the-vault", "copied-through-a-temporary"])
def test_an_unretire_moves_or_copies_nothing_through_a_link(tmp_path, monkeypatch, which, vault_elsewhere):
    """The profile's folder (or its parent) swapped for a link to an outside folder right after
    the unretire looked at the profile's path. Before: the vault's file was moved (or its
    temporary copied) into the outside folder, the missing folder made there. Now nothing appears
    there, the path is left ``not_restored`` naming the link, the retired file stays in the vault,
    and the run's other files are back."""
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    target = logdir / PROFILE
    events = next((logdir / "train").glob("*tfevents*"))
    retired, events_bytes = target.read_bytes(), events.read_bytes()
    vault = tmp_path / "vault"
    if vault_elsewhere:  # another filesystem: the put-back copies to a temporary, then moves it into place
        vault = Path("/dev/shm") / f"tbfp-test-{os.getpid()}-{tmp_path.name}"
    vault.mkdir()
    try:
        rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, backup_dir=str(vault))
        assert rep.ok, rep.to_dict()
        assert not target.exists()
        outside, aside = tmp_path / "outside", tmp_path / "aside"
        outside.mkdir()
        swapped = os.path.dirname(PROFILE) if which == "folder" else os.path.dirname(os.path.dirname(PROFILE))
        real, done = retire_tree._look, []  # the put-back's look, in the folder the store's walk reaches

        def look(ctx, key):
            found = real(ctx, key)
            if ctx.abs(key) == str(target) and not done:
                _swap(logdir, swapped, outside, aside)  # right after the look found the path free
                done.append(key)
            return found

        monkeypatch.setattr(retire_tree, "_look", look)
        outs = api.restore(str(logdir), op=rep.outcomes[0].op_id, backup_dir=str(vault))
        monkeypatch.undo()
        assert done, "the put-back never looked at the profile's path"
        assert _tree(outside) == {}, "written outside the logdir"
        assert [(o.status, o.code) for o in outs] == [(Outcome.RESTORED, Finding.NOT_RESTORED)], \
            [o.to_dict() for o in outs]
        assert PROFILE in outs[0].reason, outs[0].reason
        assert events.read_bytes() == events_bytes, "the run's other file is not back"
        kept = [p for p in vault.rglob("*") if p.is_file() and not p.is_symlink()
                and _sha(p.read_bytes()) == _sha(retired)]
        assert kept, "the retired file's bytes are nowhere in the vault"
    finally:
        if vault_elsewhere:
            import shutil
            shutil.rmtree(vault, ignore_errors=True)


# --- a restore's streamed check and its verified temporary --------------------------------------

class _Blobs(Vault):
    """A vault whose blobs are these bytes (the remote vault's stream, for ``prepare_streamed``)."""

    def __init__(self, root: str, data: bytes):
        super().__init__(root)
        self.data = data

    def open_blob(self, sha):
        import io
        return io.BytesIO(self.data)


def test_the_streamed_check_makes_no_temporary_through_a_link(tmp_path, monkeypatch):
    """The run's folder swapped for a link to an outside folder right after the check looked at it
    (``no_symlink``). Before: its temporary was streamed into the outside folder. Now the check
    is refused naming the path, coded, nothing out there."""
    logdir, outside, aside = tmp_path / "logdir", tmp_path / "outside", tmp_path / "aside"
    (logdir / "run" / "sub").mkdir(parents=True)
    (outside / "sub").mkdir(parents=True)  # the link leads to a folder of that name
    data = b"a big remote backup\n" * 100
    real, done = restore_staged.no_symlink, []

    def look(ctx, rel):
        real(ctx, rel)
        if not done:
            _swap(logdir, "run", outside, aside)
            done.append(rel)

    monkeypatch.setattr(restore_staged, "no_symlink", look)
    prepared = Prepared()
    f = {"path": "run/sub/f.pb", "sha256": _sha(data), "size": len(data)}
    with pytest.raises(TransactionError) as e:
        prepare_streamed(Context(str(logdir)), _Blobs(str(tmp_path / "vault"), data), [f], "ab" * 16, prepared)
    assert done
    assert _tree(outside) == {"sub": None}, "the temporary was made outside the logdir"
    assert "run/sub/f.pb" in str(e.value) and "symlink" in str(e.value), e.value
    assert e.value.code is not None
    assert prepared.temps == {}


def test_a_verified_temporary_makes_no_folder_through_a_link(tmp_path):
    """``Prepared.put`` (the streamed temporary's put-back) where the target's folder is gone and a
    folder on its way is a link to an outside folder: before, ``os.makedirs`` made the folder out
    there; now the store's walk refuses it (``StoreFailure``, ``SYMLINK``) and the temporary goes."""
    logdir, outside = tmp_path / "logdir", tmp_path / "outside"
    (logdir / "run").mkdir(parents=True)
    outside.mkdir()
    os.symlink(outside, logdir / "run" / "plugins")
    tmp = logdir / "run" / ".footprint-restore-x"
    tmp.write_bytes(b"verified\n")
    prepared = Prepared()
    prepared.temps["s"] = (str(tmp), os.stat(tmp))
    dest = logdir / "run" / "plugins" / "profile" / "f.pb"
    with pytest.raises(StoreFailure) as e:
        prepared.put("s", str(dest), 0o644, None, None,
                     within=(PosixStore(str(logdir)), "run/plugins/profile/f.pb"))
    assert e.value.code == StoreError.SYMLINK, e.value
    assert _tree(outside) == {}, "a folder was made outside the logdir"
    assert not tmp.exists()


def test_the_store_walk_makes_missing_folders_and_refuses_a_link(tmp_path):
    """``PosixStore.folder(create=True)``: the folders missing on the way made by the walk that
    follows no link (each in the folder it reached); a link on the way refused, nothing made
    where it leads."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    st = PosixStore(str(root))
    with st.folder("a/b/c/f.pb", create=True) as (dfd, name):
        assert name == "f.pb" and os.path.samestat(os.fstat(dfd), os.stat(root / "a" / "b" / "c"))
    os.symlink(outside, root / "a" / "l")
    with pytest.raises(StoreFailure) as e:
        with st.folder("a/l/x/f.pb", create=True):
            pass
    assert e.value.code == StoreError.SYMLINK
    assert _tree(outside) == {}
    with pytest.raises(StoreFailure) as e:  # without create, a missing folder is not made
        with st.folder("a/y/f.pb"):
            pass
    assert e.value.code == StoreError.NOT_FOUND and not (root / "a" / "y").exists()
