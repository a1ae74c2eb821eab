"""Invariant 4: the reduce's forward swap (``swap.apply_swap``, and recovery's ``roll_forward``)
places its staged files, unlinks the originals it replaces and removes the folders it empties in
the folders the logdir store's walk reaches after its look, never by path (r26 task I5; report_I4's
'Left'). Before, each of these was by path after the look (``no_symlink``): a run's folder swapped
for a link to an outside folder in between made the swap rename over, unlink or rmdir out there.

Each window is opened at the instant after the look: the placement's look at the staged file's
path (``swap.no_symlink`` in the placement loop), or the failpoint ``reduce.mid_swap`` right after
the placement (the unlinks and rmdirs come next). Now nothing out there changes, the swap is refused
naming the path (``StoreError.SYMLINK``), the rollback meets the link too and keeps the journal
(``rollback_incomplete``), every original's bytes are in the run or the vault, and once the folder
is back the next start puts the run back as it was."""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from conftest import copy_real
from test_restore_temp_no_follow import _swap, _tree, _unswap
from test_swap_strategy import NO_RENAME
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine import faults, swap, transaction
from tb_footprint_plugin.engine.context import Context

pytestmark = pytest.mark.usefixtures("disarm_faults")

RUN = "tf/summary_mix"


def _files(root: Path) -> dict:
    return {os.path.relpath(os.path.join(d, n), root): Path(d, n).read_bytes()
            for d, _x, fs in os.walk(root) for n in fs}


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _setup(tmp_path: Path):
    logdir = copy_real("tf", tmp_path / "L" / "tf").parent
    run = logdir / RUN
    (session,) = (run / "plugins" / "profile").iterdir()
    return logdir, run, session


def _refused_kept_and_recovered(logdir: Path, run: Path, before: dict, outside: Path, was: dict, rep, aside: Path,
                                swapped: str) -> None:
    [o] = [o for o in rep.outcomes if o.run == RUN]
    assert _tree(outside) == was, "a file outside the logdir was replaced, unlinked or removed"
    assert o.status == Outcome.FAILED and o.code == Failure.ROLLBACK_INCOMPLETE, o.to_dict()
    assert "symlink" in o.reason, o.reason
    # every original's bytes in the run (moved aside with its folder) or in the vault
    vault = Context(str(logdir)).vault
    inner = os.path.relpath(logdir / swapped, run)  # the swapped folder within the run ('.': the run itself)
    here = {**(_files(run) if swapped != RUN else {}),
            **{os.path.normpath(os.path.join(inner, k)): v for k, v in _files(aside).items()}}
    for rel, data in before.items():
        assert here.get(rel) == data or vault.check_blob(_sha(data)), f"{rel}: its bytes are nowhere"
    _unswap(logdir, swapped, aside)
    api.recover_logdir(str(logdir))
    assert _files(run) == before, "the run is not back as it was"
    assert _tree(outside) == was


@pytest.mark.parametrize("renames", [True, False], ids=["renamed", "copied"])
def test_a_staged_file_is_placed_through_no_link(tmp_path, monkeypatch, renames):
    """The run's folder is swapped for a link to an outside folder holding a file of the staged
    file's name and one of its original's, right after the placement's look. Before: the outside
    temporary was renamed (or copied) over the outside event file. Now the placement is refused at
    the link."""
    if not renames:  # a folder that does not rename: the copy + delete swap (and its recovery)
        for mod in (transaction, swap):
            monkeypatch.setattr(mod, "folder_capabilities", lambda: NO_RENAME)
    logdir, run, _session = _setup(tmp_path)
    before = _files(run)
    (events,) = [k for k in before if "tfevents" in k]
    outside, aside = tmp_path / "outside", tmp_path / "aside"
    outside.mkdir()
    (outside / events).write_bytes(b"another user's events\n")
    real, real_apply, placing, done, was = swap.no_symlink, swap.apply_swap, [], [], {}

    def apply(ctx, rp, journal, staged, *a, **kw):
        placing.extend(s for s in staged if os.path.basename(s["final"]) == events)
        return real_apply(ctx, rp, journal, staged, *a, **kw)

    def look(ctx, rel):
        got = real(ctx, rel)
        # within the swap the check loop looks at each backup (the event file among them) first;
        # the second look at the staged file's path is the placement's: the folder swapped next
        if placing and rel == placing[0]["final"]:
            done.append(rel)
            if len(done) == 2:
                _swap(logdir, RUN, outside, aside)
                tmp = os.path.basename(placing[0]["tmp"])
                shutil.copyfile(aside / tmp, outside / tmp)  # another user's file of that name
                was.update(_tree(outside))
        return got

    monkeypatch.setattr(transaction, "apply_swap", apply)  # the driver's own name of it
    monkeypatch.setattr(swap, "no_symlink", look)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0, runs=[RUN])
    assert len(done) >= 2, "the swap never reached the placement"
    monkeypatch.setattr(swap, "no_symlink", real)
    _refused_kept_and_recovered(logdir, run, before, outside, was, rep, aside, RUN)


def test_an_original_is_unlinked_and_its_folder_removed_through_no_link(tmp_path, monkeypatch):
    """The run's ``plugins`` folder is swapped for a link to an outside folder holding a profile of
    the same name right after the staged file took its place (``reduce.mid_swap``): the profile's
    unlink and its session folder's rmdir come next. Before: the outside profile was unlinked and
    its folder removed. Now the unlink is refused at the link, nothing out there changes."""
    logdir, run, session = _setup(tmp_path)
    before = _files(run)
    swapped = f"{RUN}/plugins"
    outside, aside = tmp_path / "outside", tmp_path / "aside"
    prof = next(session.iterdir())
    theirs = outside / os.path.relpath(prof, run / "plugins")
    theirs.parent.mkdir(parents=True)
    theirs.write_bytes(prof.read_bytes())  # the same bytes, another user's
    was = _tree(outside)
    done = []

    def swapped_now():
        if not done:
            _swap(logdir, swapped, outside, aside)
            done.append(True)

    faults.arm("reduce.mid_swap", swapped_now)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0, runs=[RUN])
    faults.disarm_all()
    assert done, "the swap never reached its placement"
    _refused_kept_and_recovered(logdir, run, before, outside, was, rep, aside, swapped)
