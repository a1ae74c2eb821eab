"""Invariant 4 (review R6 F1): a put-back's place, after its last look, is made in the folder the
logdir store's no-follow walk reached, never by a path a folder swapped for a link since would
lead elsewhere.

The window is opened by a hook at the instant the put-back's last look (``swap._still``) said
the path is still what was stored, before the place: a folder on the path is swapped for a link.
It was followed: on a folder that copies, ``placement.copy_over`` unlinked the file of that name
in the folder the link names (an unrelated folder: bytes that exist nowhere else) before it
found the temporary missing; on a folder that renames, the original was exchanged with (renamed
over) the file in the folder moved out of the logdir. Now the place fails before anything
outside changes and the put-back's next look refuses the link, naming it."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from test_restore_put_back_window import CAPS, WRITER, _reduced, _sha
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import placement, swap
from tb_footprint_plugin.engine.context import Context

pytestmark = pytest.mark.usefixtures("disarm_faults")

VICTIM = b"another user's file, in a folder outside the logdir, nowhere else\n" * 20
TEMP_PREFIX = ".footprint-restore-"  # the put-back's own temporaries (``vault.restore_tmp_path``)


def _files(folder: Path) -> dict:
    """Each user file in ``folder`` (not the put-back's own temporaries): name -> (sha256, mtime_ns, mode)."""
    out = {}
    for e in os.scandir(folder):
        if not e.name.startswith(TEMP_PREFIX):
            st = e.stat(follow_symlinks=False)
            out[e.name] = (hashlib.sha256(Path(e.path).read_bytes()).hexdigest(), st.st_mtime_ns, st.st_mode)
    return out


def _after_the_last_look(monkeypatch, logdir: Path, prof: Path, swap_folder) -> list:
    """Run ``swap_folder()`` once, right after the put-back's last look at ``prof`` said it is
    still what was stored (``swap._still``: the look before the place); returns what it returned."""
    rel = os.path.relpath(prof, logdir)
    real, done = swap._still, []

    def still(ctx, path, look, stored):
        ok = real(ctx, path, look, stored)
        if ok and path == rel and not done:
            done.append(swap_folder())
        return ok

    monkeypatch.setattr(swap, "_still", still)
    return done


@pytest.mark.parametrize("caps", list(CAPS.values()), ids=list(CAPS))
def test_a_folder_swapped_for_a_link_to_another_folder_after_the_last_look(tmp_path, monkeypatch, caps):
    """The run's folder moved aside and a link to an unrelated folder (holding a file of the
    profile's name) put in its place. On a copying folder that file was unlinked (HEAD before
    the fix: gone, in no vault). Now nothing there changes, nor in the folder moved aside."""
    logdir, prof, original, op = _reduced(tmp_path, monkeypatch, caps)
    prof.parent.mkdir(parents=True, exist_ok=True)
    prof.write_bytes(WRITER)  # something stands at the path: looked at, stored, then placed over
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / prof.name).write_bytes(VICTIM)
    aside = tmp_path / "aside"

    def swap_folder():
        os.rename(prof.parent, aside)
        os.symlink(victim, prof.parent)
        return {"victim": _files(victim), "aside": _files(aside)}

    done = _after_the_last_look(monkeypatch, logdir, prof, swap_folder)
    outs = api.restore(str(logdir), op=op)
    assert done, "the put-back never reached its place"
    assert (victim / prof.name).read_bytes() == VICTIM, "a file in a folder outside the logdir was removed"
    assert {"victim": _files(victim), "aside": _files(aside)} == done[0], "a folder outside the logdir changed"
    assert [o.status for o in outs] == ["failed"], [o.to_dict() for o in outs]
    assert "link" in outs[0].reason, outs[0].reason
    assert Context(str(logdir)).vault.check_blob(_sha(WRITER))  # what stood there is kept in the vault


@pytest.mark.parametrize("caps", list(CAPS.values()), ids=list(CAPS))
def test_a_folder_moved_out_of_the_logdir_and_linked_back_after_the_last_look(tmp_path, monkeypatch, caps):
    """The run's folder moved out of the logdir and a link to it put in its place (review R6's
    second case). On a renaming folder the original was exchanged with the file out there (HEAD
    before the fix). Now nothing out there changes: the restore fails, naming the link."""
    logdir, prof, original, op = _reduced(tmp_path, monkeypatch, caps)
    prof.parent.mkdir(parents=True, exist_ok=True)
    prof.write_bytes(WRITER)
    outside = tmp_path / "outside"
    outside.mkdir()
    moved = outside / prof.parent.name

    def swap_folder():
        os.rename(prof.parent, moved)
        os.symlink(moved, prof.parent)
        return _files(moved)

    done = _after_the_last_look(monkeypatch, logdir, prof, swap_folder)
    outs = api.restore(str(logdir), op=op)
    assert done, "the put-back never reached its place"
    assert (moved / prof.name).read_bytes() == WRITER, "the original was written outside the logdir"
    assert _files(moved) == done[0], "a folder outside the logdir changed"
    assert [o.status for o in outs] == ["failed"], [o.to_dict() for o in outs]
    assert "link" in outs[0].reason, outs[0].reason
    assert Context(str(logdir)).vault.check_blob(_sha(WRITER))


def test_copy_over_looks_at_the_temporary_before_it_unlinks_the_final_name(tmp_path):
    """``placement.copy_over`` by paths (retire_tree's and salvage's callers): the temporary's
    folder is looked in before anything at the final name changes, in the one folder opened for
    both. A folder swapped for a link to another folder (no temporary there) fails the copy with
    the other folder's file of that name kept (it unlinked it first, then found no temporary)."""
    run = tmp_path / "run"
    run.mkdir()
    data = b"the verified bytes\n" * 10
    (run / ".footprint-restore-tmp").write_bytes(data)
    (run / "f.pb").write_bytes(WRITER)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "f.pb").write_bytes(VICTIM)
    os.rename(run, tmp_path / "aside")
    os.symlink(victim, run)
    with pytest.raises(FileNotFoundError):
        placement.copy_over(str(run / ".footprint-restore-tmp"), str(run / "f.pb"), _sha(data), len(data))
    assert (victim / "f.pb").read_bytes() == VICTIM
    assert sorted(os.listdir(victim)) == ["f.pb"]
