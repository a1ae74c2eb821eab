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

from test_restore_put_back_window import WRITER, _sha
from tb_footprint_plugin.engine import placement

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
