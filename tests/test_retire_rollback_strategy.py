"""A retirement's rollback follows the folder's swap strategy too (issue #26 item 2; r19 report C2:
it still renamed, its journal could carry no ``copying`` record under ``trust``'s rules). On a
folder declaring no atomic rename (``folder_capabilities`` monkeypatched, as
``test_put_back_strategy.py`` does) every file of a retirement that failed after its moves is
copied back from the vault, each copy journaled first (``copying``, its ``final`` inside the run,
which trust now accepts for a retire journal and refuses outside it), never renamed; a writer's
file found at a path meanwhile is set aside as ``<file>.salvaged-NNN`` by the same copy + delete.
A SIGKILL within such a copy (half the bytes written; or every byte and not yet its mode, mtime,
owner) is settled by the next start: the run as before, the writer's file set aside once."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import copy_real, user_files
from test_late_records import ENV
from test_put_back_killed_before_metadata import snapshot
from test_put_back_strategy import NO_RENAME, _half_then_killed, _spy, leftovers
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine import faults, placement, retire_tree, trust
from tb_footprint_plugin.storage.paths import state_dir

pytestmark = pytest.mark.usefixtures("disarm_faults")

RUN = "train"
WRITERS = b"a writer's new file, written while the original was in the vault\n" * 50


def _no_rename(monkeypatch) -> dict:
    seen = _spy(monkeypatch)
    monkeypatch.setattr(retire_tree, "folder_capabilities", lambda: NO_RENAME)
    return seen


def _logdir(tmp_path):
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    files = sorted(p for p in user_files(logdir) if p.startswith(RUN + "/") and os.path.isfile(logdir / p))
    return logdir, files


def _plant(logdir, rel):
    """A writer makes a new file at ``rel`` while the retired one is in the vault."""
    def plant():
        with open(os.path.join(logdir, rel), "xb") as f:
            f.write(WRITERS)
    return plant


def _fail(then=None):
    def fail():
        if then is not None:
            then()
        raise RuntimeError("a failure after the moves")
    return fail


def _journals(logdir) -> list:
    d = os.path.join(state_dir(str(logdir)), "journal")
    return os.listdir(d) if os.path.isdir(d) else []


def test_a_retirement_rolled_back_on_a_folder_without_rename_copies_every_file_back(tmp_path, monkeypatch):
    logdir, files = _logdir(tmp_path)
    before = snapshot(logdir)
    seen = _no_rename(monkeypatch)
    faults.arm("retire.move", _fail())
    (o,) = api.retire(str(logdir), api.retire_rule(runs=[RUN]), dry_run=False).outcomes
    assert o.status == Outcome.ROLLED_BACK, o.to_dict()
    back = {str(logdir / p) for p in files}
    assert back <= set(seen["copied"]) and not back & set(seen["renamed"])  # copied back, none renamed
    assert snapshot(logdir) == before  # bytes, mtime_ns, mode, owner; folders' times and modes
    assert not leftovers(logdir) and not _journals(logdir)


def test_a_writers_file_found_by_a_rollback_is_set_aside_by_copy(tmp_path, monkeypatch):
    logdir, files = _logdir(tmp_path)
    before = snapshot(logdir)
    seen = _no_rename(monkeypatch)
    faults.arm("retire.move", _fail(_plant(logdir, files[0])))
    (o,) = api.retire(str(logdir), api.retire_rule(runs=[RUN]), dry_run=False).outcomes
    assert o.status == Outcome.ROLLED_BACK, o.to_dict()
    aside = str(logdir / files[0]) + ".salvaged-001"
    assert aside in seen["copied"] and aside not in seen["renamed"]
    with open(aside, "rb") as f:
        assert f.read() == WRITERS  # the writer's bytes stay in the run, beside the original
    now = snapshot(logdir)
    assert {k: v for k, v in now.items() if k != files[0] + ".salvaged-001"} == before
    assert not leftovers(logdir) and not _journals(logdir)


CHILD = textwrap.dedent("""
    import dataclasses, os, signal, sys
    from tb_footprint_plugin import api
    from tb_footprint_plugin.engine import faults, placement, retire_tree, swap, transaction
    from tb_footprint_plugin.storage import files
    from tb_footprint_plugin.storage.store_posix import PosixStore

    caps = dataclasses.replace(PosixStore(os.sep).capabilities, rename_atomic=False, hard_link=False)
    for mod in (transaction, swap, retire_tree):
        mod.folder_capabilities = lambda: caps
    logdir, how, marker, plant = sys.argv[1:5]
    state = {"in": []}

    def half_then_sigkill(src, dst, *a, **kw):
        if marker not in os.path.basename(dst):
            return real_copy(src, dst, *a, **kw)
        with open(src, "rb") as fi, open(dst, "xb") as fo:
            data = fi.read()
            fo.write(data[:len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)

    def over(tmp, final, *a, **kw):
        state["in"].append(final)
        try:
            return real_over(tmp, final, *a, **kw)
        finally:
            state["in"].pop()

    def finish(fo, *a, **kw):
        if state["in"] and marker in os.path.basename(state["in"][-1]):
            os.kill(os.getpid(), signal.SIGKILL)  # every byte at the name, nothing else set
        return real_finish(fo, *a, **kw)

    real_copy, real_over, real_finish = placement.copy_new, placement.copy_over, files.finish_new_file

    def fail():
        if plant:
            with open(os.path.join(logdir, plant), "xb") as f:
                f.write(%r)
        if how == "half":
            placement.copy_new = half_then_sigkill
        else:
            placement.copy_over, files.finish_new_file = over, finish
        raise RuntimeError("a failure after the moves")

    faults.arm("retire.move", fail)
    api.retire(logdir, api.retire_rule(runs=["train"]), dry_run=False)
    sys.exit(3)  # not killed
""" % WRITERS)


@pytest.mark.parametrize("how", ["half", "before-metadata"])
@pytest.mark.parametrize("aside", [False, True], ids=["put-back", "set-aside"])
def test_a_sigkill_within_a_retirement_rollbacks_copy_is_settled_by_the_next_start(tmp_path, monkeypatch, how, aside):
    logdir, files = _logdir(tmp_path)
    before = snapshot(logdir)
    marker = ".salvaged-" if aside else ""
    p = subprocess.run([sys.executable, "-c", CHILD, str(logdir), how, marker, files[0] if aside else ""],
                       env=ENV, capture_output=True, text=True, timeout=300)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr[-3000:])
    copying = [ln for j in _journals(logdir)
               for ln in open(os.path.join(state_dir(str(logdir)), "journal", j)) if '"copying"' in ln]
    assert copying  # the copy was journaled before it began
    _no_rename(monkeypatch)  # the next start, on the same folder
    rec = api.recover_logdir(str(logdir))
    assert [r.action for r in rec] == ["rolled_back"], [vars(r) for r in rec]
    now = snapshot(logdir)
    if aside:
        name = files[0] + ".salvaged-001"
        with open(logdir / name, "rb") as f:
            assert f.read() == WRITERS  # set aside once: no partial -001 beside a whole -002
        assert not (logdir / (files[0] + ".salvaged-002")).exists()
        now.pop(name)
    assert now == before
    assert not leftovers(logdir) and not _journals(logdir)


def test_a_retire_journals_copying_record_is_trusted_inside_its_run_only(tmp_path):
    logdir, files = _logdir(tmp_path)
    vault = state_dir(str(logdir))
    op = "20261204T230000Z-000000-abcdef12"
    begin = {"type": "begin", "kind": "retire", "op_id": op, "logdir": str(logdir), "vault": vault, "run": RUN,
             "files": [], "dirs": [], "same_fs": True, "bytes": 0}

    def check(final):
        trust.check_journal(f"{op}.jsonl", op, [begin, {"type": "move"}, {"type": "copying", "final": final}],
                            logdir=str(logdir), vaults=[vault], identity=None)

    check(files[0])  # a rollback's copy onto a file of the run: trusted (before: unknown record type)
    for outside in ("other/x", "../x", "/etc/passwd", None):
        with pytest.raises(trust.Untrusted):
            check(outside)
