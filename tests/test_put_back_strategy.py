"""A put-back follows the folder's swap strategy too (issue #26 item 2): the original a rollback or a
restore puts back takes its path as the reduce's new files take theirs (``engine.swap_strategy``):
renamed over it where the folder renames atomically (as ever), else copied over it and deleted,
each copy journaled first (``copying``, naming the original's path). A folder declaring no rename
(``folder_capabilities`` monkeypatched, as ``test_swap_strategy.py`` does for the reduce) gets
every original back by copy + delete, with its bytes, mtime and mode, and its folders' times; a
kill within such a copy (in process, or a SIGKILL in a child) leaves the beginning of the original
at its path, which the next start takes for the put-back's own (never for newer bytes to keep):
the original goes back whole, no partial copy or temporary is left, nothing is displaced."""
from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
import subprocess
import sys
import textwrap

import pytest

from conftest import copy_real
from helpers_crash import Killed
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine import faults, placement, restore, swap, transaction
from tb_footprint_plugin.storage.store_posix import PosixStore

pytestmark = pytest.mark.usefixtures("disarm_faults")

FOLDER = PosixStore(os.sep).capabilities
#: a folder that neither renames atomically nor links
NO_RENAME = dataclasses.replace(FOLDER, rename_atomic=False, hard_link=False)
#: traces compressed under a new name (the original deleted); an event file rewritten in its place
KINDS = [("torch/profiled", "lossless"), ("tf", "archive")]
IDS = ["compressed-new-name", "rewritten-in-place"]


def snapshot(root) -> dict:
    """Every file's (sha256, mtime_ns, mode) and every folder's mtime, outside the state folder."""
    out = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(".tb-footprint")]
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", st.st_mtime_ns, stat.S_IMODE(st.st_mode))
            else:
                with open(p, "rb") as f:
                    out[rel] = (hashlib.sha256(f.read()).hexdigest(), st.st_mtime_ns, stat.S_IMODE(st.st_mode))
    return out  # (the logdir's own time changes as the state folder is made in it)


def leftovers(root) -> list:
    return [os.path.join(d, n) for d, ds, fs in os.walk(root) for n in fs + ds if n.startswith(".footprint-")]


def _spy(monkeypatch, caps=NO_RENAME) -> dict:
    """The folder declares ``caps``; records each original put back (its path), each copy over a
    path (``placement.copy_over``) and each rename onto one."""
    seen = {"put_back": [], "copied": [], "renamed": []}
    for mod in (transaction, swap):
        monkeypatch.setattr(mod, "folder_capabilities", lambda: caps)
    real_put_back = swap.put_back
    for mod in (swap, restore):  # a rollback's, a restore's
        monkeypatch.setattr(mod, "put_back", lambda ctx, vault, rec, *a, **kw: (
            seen["put_back"].append(ctx.abs(rec["path"])), real_put_back(ctx, vault, rec, *a, **kw))[1])
    real_copy = placement.copy_over
    monkeypatch.setattr(placement, "copy_over", lambda tmp, final, *a, **kw: (seen["copied"].append(final),
                                                                              real_copy(tmp, final, *a, **kw))[1])
    real_replace, real_rename_new = swap.fsops.replace, swap.fsops.rename_new
    # ``kw``: the folders' descriptors a put-back renames in (``throttle.name_in``)
    monkeypatch.setattr(swap.fsops, "replace", lambda src, dst, **kw: (seen["renamed"].append(dst),
                                                                       real_replace(src, dst, **kw))[1])
    # an original whose path is free is renamed onto it create-only (``swap.put_back``)
    monkeypatch.setattr(swap.fsops, "rename_new", lambda src, dst, **kw: (seen["renamed"].append(dst),
                                                                          real_rename_new(src, dst, **kw))[1])
    # an original put back where a file stands is exchanged with it (``swap._exchange``: a rename
    # both ways); before R28 F3 the swap's own rename onto the same path hid that from this spy
    real_exchange = swap.fsops.exchange
    monkeypatch.setattr(swap.fsops, "exchange", lambda a, b, **kw: (seen["renamed"].append(b),
                                                                    real_exchange(a, b, **kw))[1])
    return seen


def _reduce(logdir, policy):
    rep = api.reduce_logdir(str(logdir), policy=policy, dry_run=False, verify_backends=("python",))
    return [o for o in rep.outcomes if o.op_id]


def _half_then_killed(seen: list):
    """A ``copy_new`` that writes the first half of its source at its destination and is killed."""
    def copy(src, dst, *a, **kw):
        with open(src, "rb") as fi, open(dst, "xb") as fo:
            data = fi.read()
            fo.write(data[:len(data) // 2])
        seen.append((dst, len(data)))
        raise Killed()
    return copy


def _fail_after_the_swap(then=None):
    """``reduce.swap``'s action: a failure once every original was replaced (rolled back in
    process from the backups); ``then`` runs first."""
    def fail():
        if then is not None:
            then()
        raise RuntimeError("a failure after the swap")
    return fail


# ---------------------------------------------------------------------------------------
# the put-back of a rollback and of a restore asks the strategy
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("fixture,policy", KINDS, ids=IDS)
def test_a_rollback_on_a_folder_without_rename_copies_each_original_back(tmp_path, monkeypatch, fixture, policy):
    logdir = copy_real(fixture, tmp_path / "logdir")
    before = snapshot(logdir)
    seen = _spy(monkeypatch)
    faults.arm("reduce.swap", _fail_after_the_swap())
    outs = _reduce(logdir, policy)
    assert outs and all(o.status == Outcome.ROLLED_BACK for o in outs), [o.to_dict() for o in outs]
    originals = set(seen["put_back"])
    assert originals
    assert originals <= set(seen["copied"])  # each original copied back over its path ...
    assert not originals & set(seen["renamed"])  # ... never renamed onto it
    assert snapshot(logdir) == before  # bytes, mtime, mode; the folders' times
    assert not leftovers(logdir)


@pytest.mark.parametrize("fixture,policy", KINDS, ids=IDS)
def test_a_restore_on_a_folder_without_rename_copies_each_original_back(tmp_path, monkeypatch, fixture, policy):
    logdir = copy_real(fixture, tmp_path / "logdir")
    before = snapshot(logdir)
    seen = _spy(monkeypatch)
    outs = _reduce(logdir, policy)
    assert outs and all(o.status == Outcome.VERIFIED for o in outs), [o.to_dict() for o in outs]
    assert snapshot(logdir) != before
    seen["copied"].clear()
    seen["renamed"].clear()
    restored = api.restore(str(logdir))
    assert restored and all(o.status == Outcome.RESTORED for o in restored), [o.to_dict() for o in restored]
    originals = {os.path.join(str(logdir), p) for o in restored for p in o.created_files}
    assert originals and set(seen["put_back"]) == originals
    assert originals <= set(seen["copied"]) and not originals & set(seen["renamed"])
    assert snapshot(logdir) == before
    assert not leftovers(logdir)


def test_a_folder_that_renames_still_renames_each_original_back(tmp_path, monkeypatch):
    """Today's path: a rollback's and a restore's originals renamed into place, none copied."""
    logdir = copy_real("tf", tmp_path / "logdir")
    before = snapshot(logdir)
    seen = _spy(monkeypatch, FOLDER)
    faults.arm("reduce.swap", _fail_after_the_swap())
    assert all(o.status == Outcome.ROLLED_BACK for o in _reduce(logdir, "archive"))
    faults.disarm_all()
    assert all(o.status == Outcome.VERIFIED for o in _reduce(logdir, "archive"))
    assert all(o.status == Outcome.RESTORED for o in api.restore(str(logdir)))
    originals = set(seen["put_back"])
    assert originals and originals <= set(seen["renamed"]) and not seen["copied"]
    assert snapshot(logdir) == before


# ---------------------------------------------------------------------------------------
# a kill within a copying put-back is settled by the next start
# ---------------------------------------------------------------------------------------
def _reduce_manifests(logdir) -> list:
    ops = [m for m in api.operations(logdir) if m.get("kind") == "reduce"]
    assert ops
    return ops


@pytest.mark.parametrize("fixture,policy", KINDS, ids=IDS)
def test_a_rollback_killed_within_a_put_back_copy_is_finished_by_recovery(tmp_path, monkeypatch, fixture, policy):
    logdir = copy_real(fixture, tmp_path / "logdir")
    before = snapshot(logdir)
    _spy(monkeypatch)
    real, half = placement.copy_new, []
    # the reduce's own swap copies whole; the rollback's first put-back is killed half-way
    faults.arm("reduce.swap", _fail_after_the_swap(lambda: monkeypatch.setattr(placement, "copy_new",
                                                                                _half_then_killed(half))))
    with pytest.raises(Killed):
        _reduce(logdir, policy)
    faults.disarm_all()
    monkeypatch.setattr(placement, "copy_new", real)
    ((partial, size),) = half
    assert 0 < os.path.getsize(partial) < size  # the beginning of an original stands at its path
    api.recover_logdir(str(logdir))
    for op in _reduce_manifests(logdir):
        assert op["outcome"] == Outcome.ROLLED_BACK, op
        assert not op.get("displaced"), op["displaced"]  # the partial copy was the put-back's own: not kept
    assert snapshot(logdir) == before
    assert not leftovers(logdir)
    assert not api.unfinished(str(logdir))["unfinished_operations"]


@pytest.mark.parametrize("fixture,policy", KINDS, ids=IDS)
def test_a_restore_killed_within_a_put_back_copy_is_finished_by_recovery(tmp_path, monkeypatch, fixture, policy):
    logdir = copy_real(fixture, tmp_path / "logdir")
    before = snapshot(logdir)
    _spy(monkeypatch)
    outs = _reduce(logdir, policy)
    assert outs and all(o.status == Outcome.VERIFIED for o in outs), [o.to_dict() for o in outs]
    real, half = placement.copy_new, []
    monkeypatch.setattr(placement, "copy_new", _half_then_killed(half))
    with pytest.raises(Killed):
        api.restore(str(logdir))
    monkeypatch.setattr(placement, "copy_new", real)
    ((partial, size),) = half
    assert 0 < os.path.getsize(partial) < size
    rec = api.recover_logdir(str(logdir))
    assert [r.action for r in rec] == ["completed"], [r.to_dict() for r in rec]
    (r,) = [m for m in api.operations(logdir) if m.get("kind") == "restore"]
    assert not r.get("displaced"), r["displaced"]  # nothing found in an original's place to keep
    assert [m["run"] for m in _reduce_manifests(logdir) if m.get("restored_by")] == [r["run"]]
    assert not leftovers(logdir)
    # the runs the killed command had not come to yet
    assert all(o.status == Outcome.RESTORED for o in api.restore(str(logdir)))
    assert snapshot(logdir) == before
    assert not leftovers(logdir)


CHILD = textwrap.dedent("""
    import dataclasses, os, signal, sys
    from tb_footprint_plugin import api
    from tb_footprint_plugin.engine import faults, placement, swap, transaction
    from tb_footprint_plugin.storage.store_posix import PosixStore

    caps = dataclasses.replace(PosixStore(os.sep).capabilities, rename_atomic=False, hard_link=False)
    for mod in (transaction, swap):
        mod.folder_capabilities = lambda: caps

    def half_then_sigkill(src, dst, *a, **kw):
        with open(src, "rb") as fi, open(dst, "xb") as fo:
            data = fi.read()
            fo.write(data[:len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)

    logdir, what = sys.argv[1], sys.argv[2]
    if what == "restore":
        placement.copy_new = half_then_sigkill
        api.restore(logdir)
    else:
        def fail():
            placement.copy_new = half_then_sigkill
            raise RuntimeError("a failure after the swap")
        faults.arm("reduce.swap", fail)
        api.reduce_logdir(logdir, policy=what, dry_run=False, verify_backends=("python",))
    sys.exit(3)  # not killed
""")


@pytest.mark.parametrize("what", ["rollback", "restore"])
def test_a_sigkill_within_a_put_back_copy_is_settled_by_the_next_start(tmp_path, monkeypatch, what):
    """A real kill: nothing of the put-back's cleanup runs (its temporary stays beside the partial
    copy); the next start puts the original back whole and removes both."""
    logdir = copy_real("tf", tmp_path / "logdir")
    before = snapshot(logdir)
    if what == "restore":
        _spy(monkeypatch)
        assert all(o.status == Outcome.VERIFIED for o in _reduce(logdir, "archive"))
        monkeypatch.undo()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    p = subprocess.run([sys.executable, "-c", CHILD, str(logdir), "restore" if what == "restore" else "archive"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == -9, (p.returncode, p.stderr[-3000:])
    assert leftovers(logdir)  # the put-back's verified temporary, beside the partial copy
    _spy(monkeypatch)  # the next start on the same folder
    rec = api.recover_logdir(str(logdir))
    assert [r.action for r in rec] == ["rolled_back" if what == "rollback" else "completed"], \
        [r.to_dict() for r in rec]
    ops = api.operations(logdir)
    assert not any(m.get("displaced") for m in ops), ops
    if what == "rollback":
        assert all(m["outcome"] == Outcome.ROLLED_BACK for m in _reduce_manifests(logdir))
    else:
        assert not leftovers(logdir)
        assert all(o.status == Outcome.RESTORED for o in api.restore(str(logdir)))  # the runs not come to
    assert snapshot(logdir) == before
    assert not leftovers(logdir)


def test_a_streamed_remote_backup_is_copied_into_place_on_a_folder_without_rename(tmp_path, s3_bucket, monkeypatch):
    """A big remote backup a restore's check streamed into a verified temporary beside its target
    (``restore_staged.Prepared``) takes its place by copy + delete too, with its mode and time."""
    from test_restore_remote_one_download import incompressible
    from test_vault_remote import make_logdir, offload_all, reduce_local
    from tb_footprint_plugin.engine import remote_vault, restore_staged
    from tb_footprint_plugin.engine.context import Context

    logdir = make_logdir(tmp_path)
    incompressible(logdir, "a", "one.xplane.pb", 600 << 10)
    incompressible(logdir, "a", "two.xplane.pb", 700 << 10)
    before = snapshot(logdir)
    reduce_local(logdir)
    vault = offload_all(logdir, s3_bucket.url("v"))
    monkeypatch.setattr(remote_vault, "STAGE_BYTES", 256 << 10)  # both checked by streaming
    remote_vault._stores.clear()
    (m,) = [m for m in vault.manifests() if m.get("kind") == "reduce" and m["run"] == "a"]
    big = {str(logdir / f["path"]) for f in m["files"] if f["size"] > 256 << 10}
    assert len(big) >= 2
    seen = _spy(monkeypatch)
    streamed = []
    real_put = restore_staged.Prepared.put
    monkeypatch.setattr(restore_staged.Prepared, "put", lambda self, sha, dest, *a, **kw: (
        streamed.append(dest) if self.holds(sha) else None, real_put(self, sha, dest, *a, **kw))[1])
    out = restore.restore_op(Context(str(logdir)), m)
    assert out.status == Outcome.RESTORED, out.to_dict()
    assert big <= set(streamed)  # put from the verified temporaries ...
    assert big <= set(seen["copied"]) and not big & set(seen["renamed"])  # ... by copy + delete
    after = snapshot(logdir)
    run_a = [k for k in before if k.startswith("a/")]
    assert run_a and {k: after.get(k) for k in run_a} == {k: before[k] for k in run_a}  # bytes, mtime, mode
    assert not leftovers(logdir)
