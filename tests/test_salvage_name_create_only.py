"""A file set beside another (``<file>.salvaged-NNN``: late records a put-back keeps, a writer's
file a retirement's rollback sets aside) takes its name create-only (invariant 1, r22 task C2).

Before, ``placement.place_at_free_name`` found a name free with ``lexists`` and then, on a folder
that renames, ``os.replace``d onto it: a file made at that name in between was overwritten; on a
folder that copies, the exclusive copy failed the whole placement. Now a file made at the chosen
name at that instant (made here by a hook at the instant, never by timing) is kept as it is and
the bytes take the next name.
"""
from __future__ import annotations

import hashlib
import os

import pytest

from test_put_back_strategy import NO_RENAME
from tb_footprint_plugin.engine import placement
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.journal import Journal, Rec
from tb_footprint_plugin.engine.salvage import salvage_name
from tb_footprint_plugin.engine.swap_strategy import swap_strategy
from tb_footprint_plugin.storage import throttle
from tb_footprint_plugin.storage.store_posix import folder_capabilities

PATH = "run/events.out.tfevents.1.host"
OURS = b"late records that exist nowhere else in the run\n" * 7
THEIRS = b"a file someone made at the name meanwhile\n"


def _intrude(monkeypatch, target: str) -> list:
    """Make a file at ``target`` once, at the instant the walk has found it free and before its
    placement: right after an lstat of it answered "nothing there", or right before a create-only
    move to it (a walk that places without looking first)."""
    made: list = []

    def make() -> None:
        if not made:
            with open(target, "xb") as f:
                f.write(THEIRS)
            made.append(target)

    real_lexists = os.path.lexists

    def lexists(p) -> bool:
        got = real_lexists(p)
        if not got and os.fspath(p) == target:
            make()
        return got

    monkeypatch.setattr(os.path, "lexists", lexists)
    real_stands_at = getattr(placement, "stands_at", None)
    if real_stands_at is not None:  # the look through the logdir's store (``Store.version``)
        def stands_at(ctx, rel) -> bool:
            got = real_stands_at(ctx, rel)
            if not got and ctx.abs(rel) == target:
                make()
            return got

        monkeypatch.setattr(placement, "stands_at", stands_at)
    real_rename_new = getattr(throttle, "rename_new", None)
    if real_rename_new is not None:
        def rename_new(src, dst) -> None:
            if os.fspath(dst) == target:
                make()
            return real_rename_new(src, dst)

        monkeypatch.setattr(throttle, "rename_new", rename_new)
    return made


def _setup(tmp_path):
    logdir = tmp_path / "logdir"
    (logdir / "run").mkdir(parents=True)
    (logdir / PATH).write_bytes(b"the file the salvage sits beside")
    ctx = Context(str(logdir))
    src = logdir / "run" / ".footprint-test-salvage.tmp"
    src.write_bytes(OURS)
    return ctx, str(src)


# a copy is always hashed (``placement``: ``s`` None only where the folder renames)
@pytest.mark.parametrize("renames,hashed", [(True, True), (False, True), (True, False)],
                         ids=["salvage-folder-renames", "salvage-folder-copies", "set-aside-folder-renames"])
def test_a_file_made_at_the_chosen_name_meanwhile_is_kept(tmp_path, monkeypatch, renames, hashed):
    ctx, src = _setup(tmp_path)
    strategy = swap_strategy(folder_capabilities() if renames else NO_RENAME)
    journal = None if renames else Journal.create(ctx.journal_dir, "op-c2", {"type": Rec.BEGIN, "kind": "test"})
    s = {"sha256": hashlib.sha256(OURS).hexdigest(), "size": len(OURS)} if hashed else None
    first = ctx.abs(salvage_name(PATH, 1))
    made = _intrude(monkeypatch, first)

    name, placed = placement.place_at_free_name(ctx, lambda k: salvage_name(PATH, k), src, s, strategy, journal,
                                                (), {}, reuse=hashed)

    assert made == [first]  # the instant came
    with open(first, "rb") as f:
        assert f.read() == THEIRS  # kept as it was made
    assert (name, placed) == (salvage_name(PATH, 2), True)
    with open(ctx.abs(name), "rb") as f:
        assert f.read() == OURS
    assert not os.path.lexists(src)


@pytest.mark.parametrize("noreplace", [True, False], ids=["renameat2", "link-unlink"])
def test_rename_new_never_replaces(tmp_path, monkeypatch, noreplace):
    """The storage primitive: a move onto a taken name fails, both files as they were; a link at
    the source is moved as the link, never followed; the same where there is no renameat2."""
    if not noreplace:
        monkeypatch.setattr(throttle, "_renameat2", lambda: None)
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    a.write_bytes(b"a")
    b.write_bytes(b"b")
    with pytest.raises(FileExistsError):
        throttle.rename_new(str(a), str(b))
    assert (a.read_bytes(), b.read_bytes()) == (b"a", b"b")
    os.symlink(str(a), str(c))
    throttle.rename_new(str(c), str(tmp_path / "d"))
    assert os.readlink(str(tmp_path / "d")) == str(a) and not os.path.lexists(str(c))
