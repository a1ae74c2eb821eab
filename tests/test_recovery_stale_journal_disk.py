"""A disk start's recovery never drops the backup of an original that is not in place (the disk
twin of R7 F2's hardening, tests/contract/test_rollback_keeps_backup_of_astray_original.py).

A journal without its swap record is rolled back by swap.rollback "as the files in place are the
truth" (before a swap no original was touched) and its blobs no other operation claims deleted.
A journal older than the run (a state folder copied back, a journal file put back from a copy
taken before the swap) says no swap while the run holds the reduced files: the blobs are then the
only copies of the originals. Here the journal as it stood at ``reduce.backup`` is put back over
the one a kill after the swap left (swap record and all); the next start must not lose them."""
from __future__ import annotations

import hashlib
import os

import pytest

from helpers_crash import Killed, kill
from helpers_runs import aged_small_runs
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine import faults

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _files(root: str, state: bool = False) -> dict:
    out = {}
    for dp, ds, fs in os.walk(root):
        if not state:
            ds[:] = [d for d in ds if not d.startswith(".tb-footprint")]
        for f in fs:
            with open(os.path.join(dp, f), "rb") as fh:
                out[os.path.relpath(os.path.join(dp, f), root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def _everywhere(root: str) -> set:
    found = set(_files(root, state=True).values())
    for dp, _, fs in os.walk(root):
        found.update(f.split(".")[0] for f in fs)  # a blob is named by its original's digest
    return found


def test_a_stale_journal_without_its_swap_keeps_the_only_copies(tmp_path):
    logdir = aged_small_runs(str(tmp_path / "logs"), 1)
    before = _files(logdir)
    jdir = os.path.join(logdir, ".tb-footprint", "journal")
    stale = {}

    def capture():  # the journal as it stood with every backup made, long before the swap
        [name] = [n for n in os.listdir(jdir) if n.endswith(".jsonl")]
        with open(os.path.join(jdir, name), "rb") as f:
            stale[name] = f.read()

    faults.arm("reduce.backup", capture)
    faults.arm("reduce.swap", kill)
    with pytest.raises(Killed):
        api.reduce_logdir(logdir, policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",))
    faults.disarm_all()
    reduced = _files(logdir)
    assert reduced != before, "nothing was swapped: the case was not exercised"
    [(name, doc)] = stale.items()
    with open(os.path.join(jdir, name), "wb") as f:
        f.write(doc)  # the journal put back as it was before the swap

    settled = [o for o in api.recover_logdir(logdir) if o.run is not None]
    assert set(before.values()) <= _everywhere(logdir), f"an original exists nowhere: {settled}"
    assert [o.code for o in settled] == [Finding.ORIGINAL_NOT_IN_PLACE], settled
    assert _files(logdir) == reduced  # nothing replayed over the run
