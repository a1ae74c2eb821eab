"""Every put-back follows the folder's swap strategy (issue #26 item 2), the late records a restore
sets beside an original and a retired run's files too: on a folder declaring no rename
(``folder_capabilities`` monkeypatched, as ``test_put_back_strategy.py`` does), the
``<file>.salvaged-NNN`` file of records a writer appended after the reduction takes its name by a
copy journaled first (``copying``), never by a rename; a kill within that copy (in process, or a
SIGKILL in a child) leaves the beginning of the records under that name, which the next start
takes for the put-back's own: the run ends with the records once. An unretire on such a folder
copies every file back, with its bytes, mtime and mode; a kill within one of its copies is
finished by the next start."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import copy_real, user_files
from helpers_crash import Killed
from test_late_records import ENV, append_by_path, image_run, scalar_steps
from test_put_back_strategy import NO_RENAME, _half_then_killed, _spy, leftovers as _leftovers
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine import faults, placement, retire_tree, salvage
from tb_footprint_plugin.scan.tfrecord import RecordReader

pytestmark = pytest.mark.usefixtures("disarm_faults")

PY = ("python",)
COPY_NEW = placement.copy_new


def _no_rename(monkeypatch) -> dict:
    """The folder declares no rename, to the salvage and the retired run's put-back too
    (``test_put_back_strategy._spy``: each copy into a path and each rename onto one recorded)."""
    seen = _spy(monkeypatch)
    for mod in (salvage, retire_tree):
        monkeypatch.setattr(mod, "folder_capabilities", lambda: NO_RENAME)
    return seen


def _killed_within_a_copy(monkeypatch, marker: str, call) -> None:
    """``call()`` on a folder declaring no rename, killed half-way through its first copy to a
    name holding ``marker``: the beginning of the bytes stands under that name."""
    _no_rename(monkeypatch)
    half = []
    monkeypatch.setattr(placement, "copy_new", _half_then_killed_at(marker, half))
    with pytest.raises(Killed):
        call()
    monkeypatch.setattr(placement, "copy_new", COPY_NEW)
    ((partial, size),) = half
    assert 0 < os.path.getsize(partial) < size
    assert not os.path.basename(partial).startswith(".footprint-")  # at the path, not a temporary


def _reduced_with_late_records(tmp_path):
    """A run whose event file archive rewrote, then a resumed job appended 3 records to it."""
    logdir = tmp_path / "logdir"
    run = logdir / "run"
    path = image_run(run)
    original, mtime_ns, mode = path.read_bytes(), path.stat().st_mtime_ns, path.stat().st_mode
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY)
    assert rep.ok and rep.outcomes[0].status == Outcome.VERIFIED, [o.to_dict() for o in rep.outcomes]
    append_by_path(path, 1000)
    return logdir, run, path, (original, mtime_ns, mode)


def _restored_once(run, path, was) -> None:
    """The original byte for byte (mtime, mode), the 3 late records beside it once, nothing else."""
    original, mtime_ns, mode = was
    assert path.read_bytes() == original
    assert path.stat().st_mtime_ns == mtime_ns and path.stat().st_mode == mode
    salvaged = run / (path.name + ".salvaged-001")
    assert sorted(os.listdir(run)) == [path.name, salvaged.name]
    assert len(list(RecordReader(str(salvaged)))) == 3
    assert scalar_steps(run)["late"] == [1000, 1001, 1002]


def _half_then_killed_at(marker: str, seen: list):
    """A ``copy_new`` killed half-way through a copy to a destination naming ``marker``
    (``test_put_back_strategy._half_then_killed``); the others copy whole."""
    killed = _half_then_killed(seen)
    return lambda src, dst, *a, **kw: (killed if marker in os.path.basename(dst) else COPY_NEW)(src, dst, *a, **kw)


# ---------------------------------------------------------------------------------------
# the late records a restore sets beside an original
# ---------------------------------------------------------------------------------------
def test_a_restore_on_a_folder_without_rename_copies_the_late_records_into_their_file(tmp_path, monkeypatch):
    logdir, run, path, was = _reduced_with_late_records(tmp_path)
    seen = _no_rename(monkeypatch)
    (o,) = api.restore(str(logdir))
    assert o.status == Outcome.RESTORED, o.to_dict()
    salvaged = str(run / (path.name + ".salvaged-001"))
    assert salvaged in seen["copied"] and salvaged not in seen["renamed"]  # copied to its name, never renamed
    assert str(path) in seen["copied"] and not [r for r in seen["renamed"] if r.startswith(str(run) + os.sep)]
    _restored_once(run, path, was)
    assert not _leftovers(logdir)


def test_a_restore_killed_within_the_late_records_copy_is_finished_with_them_once(tmp_path, monkeypatch):
    logdir, run, path, was = _reduced_with_late_records(tmp_path)
    _killed_within_a_copy(monkeypatch, ".salvaged-", lambda: api.restore(str(logdir)))
    rec = api.recover_logdir(str(logdir))
    assert [r.action for r in rec] == ["completed"], [vars(r) for r in rec]
    _restored_once(run, path, was)
    (kb,) = api.status(str(logdir))["kept_blobs"]
    assert kb["late_records_file"] == f"run/{path.name}.salvaged-001" and kb["late_records"] == 3
    assert not _leftovers(logdir)
    assert not api.unfinished(str(logdir))["unfinished_operations"]


CHILD = textwrap.dedent("""
    import dataclasses, os, signal, sys
    from tb_footprint_plugin import api
    from tb_footprint_plugin.engine import placement, retire_tree, salvage, swap, transaction
    from tb_footprint_plugin.storage.store_posix import PosixStore

    caps = dataclasses.replace(PosixStore(os.sep).capabilities, rename_atomic=False, hard_link=False)
    for mod in (transaction, swap, salvage, retire_tree):
        mod.folder_capabilities = lambda: caps
    real = placement.copy_new

    def half_then_sigkill(src, dst, *a, **kw):
        if ".salvaged-" not in os.path.basename(dst):
            return real(src, dst, *a, **kw)
        with open(src, "rb") as fi, open(dst, "xb") as fo:
            data = fi.read()
            fo.write(data[:len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)

    placement.copy_new = half_then_sigkill
    api.restore(sys.argv[1])
    sys.exit(3)  # not killed
""")


def test_a_sigkill_within_the_late_records_copy_is_settled_by_the_next_start(tmp_path, monkeypatch):
    logdir, run, path, was = _reduced_with_late_records(tmp_path)
    p = subprocess.run([sys.executable, "-c", CHILD, str(logdir)], env=ENV, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr[-3000:])
    partial = run / (path.name + ".salvaged-001")
    cut = partial.stat().st_size  # the beginning of the records under their name
    _no_rename(monkeypatch)  # the next start on the same folder
    rec = api.recover_logdir(str(logdir))
    assert [r.action for r in rec] == ["completed"], [vars(r) for r in rec]
    _restored_once(run, path, was)
    assert 0 < cut < partial.stat().st_size
    assert not _leftovers(logdir)


# ---------------------------------------------------------------------------------------
# a retired run's files put back
# ---------------------------------------------------------------------------------------
def _stat_of(logdir, run) -> dict:
    """Every file's and folder's (mtime_ns, mode) under ``run``."""
    out = {}
    for d, ds, fs in os.walk(logdir / run):
        for n in ds + fs:
            st = os.lstat(os.path.join(d, n))
            out[os.path.relpath(os.path.join(d, n), logdir)] = (st.st_mtime_ns, st.st_mode)
    return out


def test_an_unretire_on_a_folder_without_rename_copies_every_file_back(tmp_path, monkeypatch):
    logdir, run = copy_real("tf/keras_profiled", tmp_path / "logdir"), "train"
    before, times = user_files(logdir), _stat_of(logdir, run)
    rep = api.retire(str(logdir), api.retire_rule(runs=[run]), dry_run=False)
    assert rep.ok, rep.to_dict()
    seen = _no_rename(monkeypatch)
    outs = api.restore(str(logdir), op=rep.outcomes[0].op_id)
    assert [o.status for o in outs] == [Outcome.RESTORED], [o.to_dict() for o in outs]
    files = {str(logdir / p) for p in before if p.startswith(run + "/") and os.path.isfile(logdir / p)}
    assert files and files <= set(seen["copied"]) and not files & set(seen["renamed"])
    assert user_files(logdir) == before  # bytes
    assert _stat_of(logdir, run) == times  # mtime and mode, files and folders
    assert not _leftovers(logdir)


def test_an_unretire_killed_within_a_copy_is_finished_by_the_next_start(tmp_path, monkeypatch):
    logdir, run = copy_real("tf/keras_profiled", tmp_path / "logdir"), "train"
    before, times = user_files(logdir), _stat_of(logdir, run)
    rep = api.retire(str(logdir), api.retire_rule(runs=[run]), dry_run=False)
    assert rep.ok, rep.to_dict()
    # the copy from the vault into the checked temporary is whole; the one onto the path is cut
    _killed_within_a_copy(monkeypatch, "", lambda: api.restore(str(logdir), op=rep.outcomes[0].op_id))
    rec = api.recover_logdir(str(logdir))
    assert [r.action for r in rec] == ["completed"], [vars(r) for r in rec]
    assert user_files(logdir) == before
    assert _stat_of(logdir, run) == times
    assert not _leftovers(logdir)
    assert not api.unfinished(str(logdir))["unfinished_operations"]


# ---------------------------------------------------------------------------------------
# the records a start salvages from a grown backup
# ---------------------------------------------------------------------------------------
def _grown_backup(tmp_path):
    """A reduction whose hard-linked backup a writer that kept the original open appended 3
    records to (``salvage_one``'s case)."""
    logdir = tmp_path / "logdir"
    path = image_run(logdir / "run")
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY,
                            vault_format="hardlink")
    assert rep.ok and rep.outcomes[0].status == Outcome.VERIFIED, [o.to_dict() for o in rep.outcomes]
    (m,) = [m for m in api.operations(str(logdir)) if m.get("kind") == "reduce"]
    (f,) = [f for f in m["files"] if f["path"] == f"run/{path.name}"]
    append_by_path(os.path.join(m["vault"], f["blob"]), 2000)
    return logdir, path


def _salvaged_once(path) -> None:
    (salvaged,) = [p for p in path.parent.iterdir() if ".salvaged-" in p.name]
    assert salvaged.name == path.name + ".salvaged-001"
    assert len(list(RecordReader(str(salvaged)))) == 3
    assert scalar_steps(path.parent)["late"] == [2000, 2001, 2002]


def test_a_start_on_a_folder_without_rename_copies_the_salvaged_records_into_their_file(tmp_path, monkeypatch):
    logdir, path = _grown_backup(tmp_path)
    seen = _no_rename(monkeypatch)
    api.recover_logdir(str(logdir))
    salvaged = str(path) + ".salvaged-001"
    assert salvaged in seen["copied"] and salvaged not in seen["renamed"]
    _salvaged_once(path)
    assert not _leftovers(logdir)


def test_a_start_killed_within_the_salvage_copy_salvages_the_records_once(tmp_path, monkeypatch):
    logdir, path = _grown_backup(tmp_path)
    _killed_within_a_copy(monkeypatch, ".salvaged-", lambda: api.recover_logdir(str(logdir)))
    api.recover_logdir(str(logdir))  # the salvage undone (its partial copy removed), then done again
    _salvaged_once(path)
    assert not _leftovers(logdir)
    assert not api.unfinished(str(logdir))["unfinished_operations"]


def test_a_rollback_killed_within_the_late_records_copy_is_finished_with_them_once(tmp_path, monkeypatch):
    """A reduce fails after its swap, once a writer appended 3 records to the reduced file: the
    rollback sets them beside the original, and is killed within that copy; the next start rolls
    back again, the records once."""
    logdir = tmp_path / "logdir"
    run = logdir / "run"
    path = image_run(run)
    was = (path.read_bytes(), path.stat().st_mtime_ns, path.stat().st_mode)

    def fail():
        append_by_path(path, 1000)
        raise RuntimeError("a failure after the swap")

    faults.arm("reduce.swap", fail)
    _killed_within_a_copy(monkeypatch, ".salvaged-", lambda: api.reduce_logdir(
        str(logdir), policy="archive", dry_run=False, verify_backends=PY))
    faults.disarm_all()
    rec = api.recover_logdir(str(logdir))
    assert [r.action for r in rec] == ["rolled_back"], [vars(r) for r in rec]
    _restored_once(run, path, was)
    (m,) = [m for m in api.operations(str(logdir)) if m.get("kind") == "reduce"]
    assert m["outcome"] == Outcome.ROLLED_BACK
    (d,) = m["displaced"]  # the reduced file with the records, kept in the vault
    assert d["late_records"]["file"] == f"run/{path.name}.salvaged-001" and d["late_records"]["records"] == 3
    assert not _leftovers(logdir)
