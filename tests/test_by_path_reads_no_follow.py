"""Invariant 4, the last by-path reads (after I4's 6f9a830 and I5's 8126d11 moved every by-path
write through the no-follow walk): nothing outside the logdir is read as if it were the run's,
whatever folder is swapped for a link after a look.

- ``placement.partial_copy``'s source: a killed copy's beginning at a new name is removed only while
  the copy's temporary still holds the bytes whole; that temporary was opened by its path, so the
  run's folder swapped for a link after the look at the new name had an outside file of the
  temporary's name vouch for it (and the run's only copy of those bytes was unlinked);
- ``swap.folder_times``: a folder's mtime and entry count, recorded before an operation so that its
  restore or rollback gives the time back, were taken by ``lstat``/``scandir`` of its path after
  the look: an outside folder's were recorded;
- ``salvage._salvage_name``: the next free ``.salvaged-NNN`` name was looked for with
  ``os.path.lexists`` by path: an outside folder's names were read.

Each window is opened by a hook at the instant after the look (``placement.folder_at`` or
``swap.no_symlink``, whichever the code looks with), not by timing. Now each read goes through
the folder the walk reached: a link met is refused coded ``symlink_refused`` (or, for a recorded
time, the folder is not recorded), and nothing inside or outside the logdir changes."""
from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

import pytest

from test_put_back_strategy import NO_RENAME
from test_restore_temp_no_follow import _swap, _tree, _unswap
from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine import placement, salvage, swap
from tb_footprint_plugin.engine.context import Context, TransactionError
from tb_footprint_plugin.engine.journal import Journal, Rec
from tb_footprint_plugin.engine.swap_strategy import swap_strategy

pytestmark = pytest.mark.usefixtures("disarm_faults")

STAGED = b"late records of another run, set beside it\n" * 16
TMP = ".footprint-salvage-0123.tmp"
FINAL = "run/events.out.tfevents.1.salvaged-001"


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _swapping_folder_at(mod, rel: str, logdir: Path, folder: str, outside: Path, aside: Path, done: list):
    """``mod.folder_at`` that swaps ``folder`` for a link to ``outside`` right after its walk for
    ``rel`` reached its folder (the look): every later read by path goes out there."""
    real = mod.folder_at

    @contextlib.contextmanager
    def folder_at(ctx, r):
        with real(ctx, r) as got:
            if r == rel and not done:
                _swap(logdir, folder, outside, aside)
                done.append(r)
            yield got
    return folder_at


def test_a_killed_copys_beginning_is_never_vouched_for_by_an_outside_file(tmp_path, monkeypatch):
    """A salvage's recovery undoes a copy a kill stopped at its new name: the beginning there goes
    only while the temporary still holds the staged bytes whole. The run's temporary is gone; the
    run's folder is swapped for a link right after the look at the new name, to an outside folder
    holding a file of the temporary's name with those bytes. Before: that outside file was read as
    the temporary, and the run's beginning of the bytes (their only copy in the run) unlinked. Now
    the temporary is read in its folder as the walk reaches it: the link is refused coded
    ``symlink_refused`` naming it, the run's folder and the outside one unchanged."""
    logdir = tmp_path / "logs"
    ctx = Context(str(logdir))
    (logdir / "run").mkdir(parents=True)
    ctx.vault.ensure()
    (logdir / FINAL).write_bytes(STAGED[:100])
    outside, aside = tmp_path / "outside", tmp_path / "aside"
    outside.mkdir()
    (outside / TMP).write_bytes(STAGED)
    was_outside, was_run = _tree(outside), _tree(logdir / "run")
    done: list = []
    monkeypatch.setattr(placement, "folder_at",
                        _swapping_folder_at(placement, FINAL, logdir, "run", outside, aside, done))
    records = [{"type": Rec.BEGIN, "kind": "salvage", "op_id": "20261206T010000-abcdef", "vault": ctx.vault.root,
                "tmp": f"run/{TMP}", "final": FINAL, "old_sha256": _sha(b"old"), "new_sha256": _sha(b"new")},
               {"type": Rec.COPYING, "final": FINAL},
               {"type": Rec.STAGED, "tmp": f"run/{TMP}", "final": FINAL, "sha256": _sha(STAGED), "size": len(STAGED)}]
    with pytest.raises(TransactionError) as e:
        salvage.finish_salvage(ctx, records)
    assert done
    assert _tree(outside) == was_outside, "a file outside the logdir was changed"
    assert _tree(aside) == was_run, "the run's beginning of the copy was removed on an outside file's word"
    assert e.value.code == StoreError.SYMLINK and "run/" in str(e.value)


def test_a_resumed_salvage_copy_reads_its_source_in_the_placements_folder(tmp_path):
    """A salvage file is placed in the folder its walk reached (``place_at_free_name``'s
    ``dir_fd``); on a folder that copies, a name a killed attempt's ``copying`` record names holds
    the beginning of the records, removed and copied again once the source proves it. The run's
    folder is swapped for a link after that walk, to an outside folder holding another file of
    the source's name. Before: that outside file was read as the source, the beginning not
    proven, and the walk went on to names only the link answered (it never found one: bounded
    here). Now the source is read in the placement's folder: the beginning is emptied and the
    records copied there, in the run's own folder; nothing outside is read or changed."""
    logdir = tmp_path / "logs"
    ctx = Context(str(logdir))
    (logdir / "run").mkdir(parents=True)
    (logdir / "run" / TMP).write_bytes(STAGED)
    (logdir / FINAL).write_bytes(STAGED[:100])  # a killed copy's beginning
    outside, aside = tmp_path / "outside", tmp_path / "aside"
    outside.mkdir()
    (outside / TMP).write_bytes(STAGED[:-1] + b"?")  # another file of the source's name
    was_outside = _tree(outside)
    s = {"sha256": _sha(STAGED), "size": len(STAGED)}
    journal = Journal.create(ctx.journal_dir, "20261206T010000-abcdef", {"type": Rec.BEGIN, "kind": "salvage"})

    def name_of(k: int) -> str:
        assert k <= 3, "the walk over names went on past the name the killed copy began"
        return salvage.salvage_name("run/events.out.tfevents.1", k)

    with placement.folder_at(ctx, FINAL) as (dfd, _name):
        _swap(logdir, "run", outside, aside)  # after the caller's walk, before the placement
        got = placement.place_at_free_name(ctx, name_of, str(logdir / "run" / TMP), s, swap_strategy(NO_RENAME),
                                           journal, {FINAL}, {}, reuse=True, dir_fd=dfd)
    assert got == (FINAL, True)
    assert _tree(outside) == was_outside, "a file outside the logdir was changed"
    assert (aside / os.path.basename(FINAL)).read_bytes() == STAGED and not (aside / TMP).exists()


def test_partial_copy_at_reads_the_source_in_its_walked_folder(tmp_path):
    """``placement.partial_copy_at`` (the by-path callers' form): the temporary's folder a link to an
    outside folder holding the whole bytes under its name is refused coded ``symlink_refused``,
    never taken as the source; reached without a link, the same files answer as before."""
    logdir = tmp_path / "logs"
    ctx = Context(str(logdir))
    (logdir / "run").mkdir(parents=True)
    (logdir / "run" / "config.yaml").write_bytes(STAGED[:100])
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / TMP).write_bytes(STAGED)
    os.symlink(outside, logdir / "tmpdir")
    s = {"sha256": _sha(STAGED), "size": len(STAGED)}
    with pytest.raises(TransactionError) as e:
        placement.partial_copy_at(ctx, "run/config.yaml", f"tmpdir/{TMP}", s)
    assert e.value.code == StoreError.SYMLINK
    (logdir / "run" / TMP).write_bytes(STAGED)
    assert placement.partial_copy_at(ctx, "run/config.yaml", f"run/{TMP}", s)
    (logdir / "run" / TMP).write_bytes(STAGED[:-1] + b"?")
    assert not placement.partial_copy_at(ctx, "run/config.yaml", f"run/{TMP}", s)


def test_a_folders_time_is_never_recorded_from_an_outside_folder(tmp_path, monkeypatch):
    """``swap.folder_times`` records a folder's mtime and entry count before an operation (a restore
    or a rollback gives the time back). The folder's parent is swapped for a link to an outside
    folder right after the look at it. Before: the outside folder's time and entries were recorded
    (a later settle would give the run's folder an outside folder's time). Now the folder is read
    through the descriptor the walk reached: its own time and entries, or nothing."""
    logdir = tmp_path / "logs"
    ctx = Context(str(logdir))
    (logdir / "exp" / "run").mkdir(parents=True)
    (logdir / "exp" / "run" / "a.txt").write_bytes(b"a\n")
    os.utime(logdir / "exp" / "run", ns=(2_000_000_000, 2_000_000_000))
    outside, aside = tmp_path / "outside", tmp_path / "aside"
    (outside / "run").mkdir(parents=True)
    for n in ("x", "y", "z"):
        (outside / "run" / n).write_bytes(b"theirs\n")
    os.utime(outside / "run", ns=(3_000_000_000, 3_000_000_000))
    done: list = []
    real = swap.no_symlink

    def look(c, rel):  # the look before this change
        real(c, rel)
        if rel == "exp/run" and not done:
            _swap(logdir, "exp", outside, aside)
            done.append(rel)

    monkeypatch.setattr(swap, "no_symlink", look)
    monkeypatch.setattr(swap, "folder_at", _swapping_folder_at(swap, "exp/run", logdir, "exp", outside, aside, done))
    got = swap.folder_times(ctx, ["exp/run"])
    assert done
    assert all(r["mtime_ns"] != 3_000_000_000 and r["entries"] != 3 for r in got), got
    assert got in ([], [{"path": "exp/run", "mtime_ns": 2_000_000_000, "entries": 1}])
    # the folder a link from the start: not recorded, as any folder that is no folder reached without one
    assert swap.folder_times(ctx, ["exp/run"]) == []
    _unswap(logdir, "exp", aside)
    monkeypatch.undo()
    assert swap.folder_times(ctx, ["exp/run", ""]) == [
        {"path": "exp/run", "mtime_ns": 2_000_000_000, "entries": 1},
        {"path": "", "mtime_ns": os.stat(logdir).st_mtime_ns, "entries": 1}]


def test_a_salvage_name_is_never_looked_up_in_an_outside_folder(tmp_path):
    """The next free ``.salvaged-NNN`` name beside a file is looked up in its folder. The run's
    folder is a link to an outside folder holding ``…salvaged-001``. Before: ``lexists`` by path
    read the outside folder's names and answered ``-002``. Now the lookup goes through the walk:
    refused coded ``symlink_refused`` naming the file, nothing read out there; reached without a
    link, a name something stands at (a link too, never followed) is passed over."""
    logdir = tmp_path / "logs"
    ctx = Context(str(logdir))
    logdir.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "events.out.tfevents.1.salvaged-001").write_bytes(b"theirs\n")
    os.symlink(outside, logdir / "run")
    with pytest.raises(TransactionError) as e:
        salvage._salvage_name(ctx, {"salvaged": []}, "run/events.out.tfevents.1")
    assert e.value.code == StoreError.SYMLINK and "run/events.out.tfevents.1" in str(e.value)
    os.unlink(logdir / "run")
    (logdir / "run").mkdir()
    os.symlink(outside / "nothing", logdir / "run" / "events.out.tfevents.1.salvaged-001")
    assert salvage._salvage_name(ctx, {"salvaged": []}, "run/events.out.tfevents.1") == \
        "run/events.out.tfevents.1.salvaged-002"
    assert salvage._salvage_name(ctx, {"salvaged": [{"file": "run/events.out.tfevents.1.salvaged-002"}]},
                                 "run/events.out.tfevents.1") == "run/events.out.tfevents.1.salvaged-003"
    assert salvage._salvage_name(ctx, {"salvaged": []}, "gone/events.out.tfevents.1") == \
        "gone/events.out.tfevents.1.salvaged-001"
