"""Placing bytes and resuming a begun copy are one rule each, in ``engine.placement`` (review R,
r20: R1, R2, R14).

- R2: a ``copying`` record is journaled once per path and journal, right before a copy's first
  change there: a restore killed within its copy and finished by the next start names each path
  once (before, every attempt added one more record); a folder that does not rename and has no
  journal is refused before anything is done (before, ``put_in_place`` copied with no record, and
  ``retire_tree.put_back`` renamed on a folder declaring no rename); the reduce's own swap places
  each staged file through ``placement.put_in_place`` (before, it called ``copy_over`` itself),
  journaling a new name once and an original's name never (its ``swap`` record names it).
- R14: a retired run's folders whose times are before 1970 (negative ``mtime_ns``) get them back
  exactly from an unretire (before, ``retire_tree._mtime_ns`` dropped them: the folders kept the
  time of the restore).
"""
from __future__ import annotations

import collections
import os

import pytest

from conftest import copy_real, user_files
from helpers_crash import Killed
from test_put_back_strategy import NO_RENAME, _half_then_killed, _reduce, _spy, leftovers, snapshot
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine import journal as journal_mod, placement, retire_tree
from tb_footprint_plugin.engine.context import Context, TransactionError
from tb_footprint_plugin.engine.journal import Rec
from tb_footprint_plugin.engine.swap_strategy import swap_strategy
from tb_footprint_plugin.engine.vault import Vault

pytestmark = pytest.mark.usefixtures("disarm_faults")

RUN = "train"
#: 1969-01-01: before the epoch, a negative ``st_mtime_ns``
BEFORE_1970 = -31536000 * 10**9


def _copying_records(monkeypatch) -> list:
    """Every ``copying`` record a journal file is given from now on (its ``final``)."""
    seen: list = []
    real = journal_mod.Journal.append

    def append(self, record, *a, **kw):
        if record.get("type") == Rec.COPYING:
            seen.append(record["final"])
        return real(self, record, *a, **kw)

    monkeypatch.setattr(journal_mod.Journal, "append", append)
    return seen


def test_a_restores_copy_is_journaled_once_per_path_across_a_kill(tmp_path, monkeypatch):
    """Killed half-way through its copy of an original, the restore is finished by the next
    start, which copies that path again under the record the killed attempt wrote."""
    logdir = copy_real("tf", tmp_path / "logdir")  # an event file rewritten in its place
    before = snapshot(logdir)
    _spy(monkeypatch)
    assert all(o.status == Outcome.VERIFIED for o in _reduce(logdir, "archive"))
    records = _copying_records(monkeypatch)
    real, half = placement.copy_new, []
    monkeypatch.setattr(placement, "copy_new", _half_then_killed(half))
    with pytest.raises(Killed):
        api.restore(str(logdir))
    monkeypatch.setattr(placement, "copy_new", real)
    assert half and records  # the copy was journaled before it began
    assert [r.action for r in api.recover_logdir(str(logdir))] == ["completed"]
    assert all(o.status == Outcome.RESTORED for o in api.restore(str(logdir)))  # any run not come to yet
    twice = {p: n for p, n in collections.Counter(records).items() if n > 1}
    assert not twice, twice  # one record a path, not one an attempt
    assert snapshot(logdir) == before
    assert not leftovers(logdir)


def test_the_reduces_swap_places_through_put_in_place(tmp_path, monkeypatch):
    """Compressed traces under new names: each placed through ``put_in_place`` and journaled once."""
    logdir = copy_real("torch/profiled", tmp_path / "logdir")
    _spy(monkeypatch)
    placed: list = []
    real = placement.put_in_place
    monkeypatch.setattr(placement, "put_in_place", lambda strategy, journal, rec, *a, **kw: (
        placed.append(rec["path"]), real(strategy, journal, rec, *a, **kw))[1])
    from tb_footprint_plugin.engine import swap
    monkeypatch.setattr(swap, "put_in_place", placement.put_in_place)
    records = _copying_records(monkeypatch)
    outs = _reduce(logdir, "lossless")
    assert outs and all(o.status == Outcome.VERIFIED for o in outs), [o.to_dict() for o in outs]
    created = sorted(f for o in outs for f in o.created_files)
    assert created and sorted(placed) == created  # every staged file through the one rule
    assert sorted(records) == created  # each new name journaled once before its copy
    removed = {f for o in outs for f in o.removed_files}
    assert removed and not removed & set(records)


def test_the_reduces_in_place_rewrite_journals_no_copying_record(tmp_path, monkeypatch):
    """An event file rewritten under its own name: the ``swap`` record names that path already."""
    logdir = copy_real("tf", tmp_path / "logdir")
    _spy(monkeypatch)
    records = _copying_records(monkeypatch)
    outs = _reduce(logdir, "archive")
    assert outs and all(o.status == Outcome.VERIFIED for o in outs)
    assert not records


def test_put_in_place_without_a_journal_on_a_copying_folder_is_refused():
    with pytest.raises(TransactionError) as e:
        placement.put_in_place(swap_strategy(NO_RENAME), None, {"path": "run/events.out", "sha256": "0" * 64,
                                                                "size": 1})
    assert e.value.code == Failure.REFUSED and "run/events.out" in str(e.value)


def test_an_unretire_put_back_without_a_journal_on_a_copying_folder_is_refused_before_anything(tmp_path):
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    (o,) = api.retire(str(logdir), api.retire_rule(runs=[RUN]), dry_run=False).outcomes
    assert o.status == Outcome.VERIFIED, o.to_dict()
    ctx = Context(str(logdir))
    (m,) = retire_tree.retirements(ctx)
    f = m["tree"][0]
    stored = retire_tree.stored_file(Vault(m["vault"]), m["op_id"], 0)
    assert os.path.isfile(stored) and not os.path.lexists(ctx.abs(f["path"]))
    os.makedirs(os.path.dirname(ctx.abs(f["path"])), exist_ok=True)
    with pytest.raises(TransactionError) as e:
        retire_tree.put_back(ctx, Vault(m["vault"]), m["op_id"], 0, dict(f), m["same_fs"],
                             strategy=swap_strategy(NO_RENAME), journal=None)
    assert e.value.code == Failure.REFUSED and f["path"] in str(e.value)
    assert os.path.isfile(stored) and not os.path.lexists(ctx.abs(f["path"]))  # nothing moved or copied


def test_a_retired_runs_times_before_1970_come_back_exactly(tmp_path):
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    top = logdir / RUN
    for d, dirs, files in os.walk(top, topdown=False):
        for n in files:
            os.utime(os.path.join(d, n), ns=(BEFORE_1970, BEFORE_1970))
        os.utime(d, ns=(BEFORE_1970, BEFORE_1970))
    folders = [os.path.relpath(d, logdir) for d, _, _ in os.walk(top)]
    assert len(folders) > 1
    before = snapshot(logdir)
    files = sorted(user_files(logdir))
    (o,) = api.retire(str(logdir), api.retire_rule(runs=[RUN]), dry_run=False).outcomes
    assert o.status == Outcome.VERIFIED, o.to_dict()
    assert not top.exists()
    assert all(r.status == Outcome.RESTORED for r in api.restore(str(logdir), run=RUN))
    after = snapshot(logdir)
    assert {p: after[p] for p in folders} == {p: before[p] for p in folders}  # each folder's time, exactly
    assert all(after[p][1] == BEFORE_1970 for p in folders)
    assert after == before and sorted(user_files(logdir)) == files


def test_a_writers_file_set_aside_by_a_copy_killed_before_its_metadata_gets_its_own(tmp_path, monkeypatch):
    """The set-aside's copy killed after its last byte (0600, the kill's time): the next start
    gives the copy the writer's file's mode and mtime (``resume_copy``), then the file goes. A
    guard (passes before too): ``test_retire_rollback_strategy`` checks the bytes only, so it
    stayed green with the finishing switched off."""
    import signal
    import subprocess
    import sys

    from test_late_records import ENV
    from test_retire_rollback_strategy import CHILD, WRITERS

    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    rel = sorted(p for p in user_files(logdir) if p.startswith(RUN + "/") and os.path.isfile(logdir / p))[0]
    p = subprocess.run([sys.executable, "-c", CHILD, str(logdir), "before-metadata", ".salvaged-", rel],
                       env=ENV, capture_output=True, text=True, timeout=300)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr[-3000:])
    writers, aside = logdir / rel, logdir / (rel + ".salvaged-001")
    was = os.lstat(writers)
    assert os.lstat(aside).st_mode & 0o777 == 0o600 and was.st_mode & 0o777 != 0o600  # the window
    _spy(monkeypatch)
    monkeypatch.setattr(retire_tree, "folder_capabilities", lambda: NO_RENAME)
    assert [r.action for r in api.recover_logdir(str(logdir))] == ["rolled_back"]
    got = os.lstat(aside)
    assert aside.read_bytes() == WRITERS
    assert (got.st_mode, got.st_mtime_ns, got.st_uid, got.st_gid) == (was.st_mode, was.st_mtime_ns, was.st_uid, was.st_gid)
    assert not (logdir / (rel + ".salvaged-002")).exists()
