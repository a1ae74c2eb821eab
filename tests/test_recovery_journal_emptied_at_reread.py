"""A disk start's recovery reads a journal, takes the run's lock, and reads it again (764b7f0):
what it finds empty at that second read (review R7 F4).

A journal is created holding its begin record and only grows, so one that held a begin record at
the first read and reads empty under the lock was emptied (truncated, or replaced by an empty
file), not left by an older version that crashed before its first record. Nothing may be replayed
from the first read (its holder may have gone on meanwhile), and the file, the only sign left of
the operation, is not removed: the outcome is refused (``damaged_state_file``) naming it, and every
original's bytes are still in the run or the vault. (Before, ``_checked`` unlinked it silently, as
it does a journal gone since the listing, which reads as empty too: that case stays silent, as
test_recovery_reads_under_lock shows.)"""
from __future__ import annotations

import hashlib
import os

import pytest

from helpers_crash import Killed, kill
from helpers_runs import aged_small_runs
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Recovery
from tb_footprint_plugin.engine import faults, recovery

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _digests(root: str) -> set:
    out = set()
    for dp, _, fs in os.walk(root):
        for f in fs:
            with open(os.path.join(dp, f), "rb") as fh:
                out.add(hashlib.sha256(fh.read()).hexdigest())
            out.add(f.split(".")[0])  # a blob is named by the digest of its bytes (compressed or not)
    return out


def _journal(logdir: str) -> str:
    d = os.path.join(logdir, ".tb-footprint", "journal")
    [name] = [n for n in os.listdir(d) if n.endswith(".jsonl")]
    return os.path.join(d, name)


def _killed_after_swap(logdir: str) -> None:
    faults.arm("reduce.swap", kill)
    with pytest.raises(Killed):
        api.reduce_logdir(logdir, policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",))
    faults.disarm_all()


def _files(logdir: str) -> dict:
    out = {}
    for dp, ds, fs in os.walk(logdir):
        ds[:] = [d for d in ds if not d.startswith(".tb-footprint")]
        for f in fs:
            with open(os.path.join(dp, f), "rb") as fh:
                out[os.path.relpath(os.path.join(dp, f), logdir)] = hashlib.sha256(fh.read()).hexdigest()
    return out


@pytest.mark.parametrize("how", ["truncated", "replaced"])
def test_a_journal_emptied_between_the_two_reads_is_refused_and_left(tmp_path, monkeypatch, how):
    logdir = aged_small_runs(str(tmp_path / "logs"), 1)
    originals = set(_files(logdir).values())
    _killed_after_swap(logdir)
    path = _journal(logdir)
    left = _files(logdir)
    real = recovery.run_lock

    def lock_then_empty(ctx, run):  # read once; emptied while the recovery takes the run's lock
        held = real(ctx, run)
        acquire = held.acquire

        def acquired():
            got = acquire()
            if how == "truncated":
                open(path, "w").close()
            else:
                open(path + ".new", "w").close()
                os.replace(path + ".new", path)
            return got

        held.acquire = acquired
        return held

    monkeypatch.setattr(recovery, "run_lock", lock_then_empty)
    settled = api.recover_logdir(logdir)
    [o] = [o for o in settled if o.run is not None]
    assert (o.action, o.code) == (Recovery.REFUSED, Finding.DAMAGED_FILE), settled
    assert path in o.detail and "not replayed" in o.detail
    assert os.path.exists(path) and os.path.getsize(path) == 0  # left in place, named
    assert _files(logdir) == left  # nothing replayed from the first read
    assert originals <= _digests(logdir), "an original's bytes exist nowhere"

