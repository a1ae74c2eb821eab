"""The swap strategy follows the store's capabilities (issue #26): ``engine.swap_strategy`` says,
from a store's declared ``Capabilities``, whether a transaction renames each new file over its
original or copies it over and deletes its source (conditional on versions where the store has
them), whether its backups may be hard links and whether durability needs fsync. The disk's
engine (``transaction.LocalReduce``) and a bucket's (``bucket_rewrite.ObjectReduce``) ask it for
their store instead of knowing which store they are on: a folder whose capabilities say no
rename and no hard link gets the copy + delete swap and copied backups (and a kill inside that
swap is finished by recovery); a bucket store that cannot guard the swap as this engine does is
refused before anything is written."""
from __future__ import annotations

import dataclasses
import os

import pytest

from conftest import copy_real, user_files
from helpers_crash import Killed, kill
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine import faults, placement, run_lock, swap, transaction, vault as vault_mod
from tb_footprint_plugin.engine.swap_strategy import COPY_DELETE, RENAME, SwapStrategy, refusal, swap_strategy
from tb_footprint_plugin.storage import store_object
from tb_footprint_plugin.storage.store_object import BUCKET_CAPABILITIES
from tb_footprint_plugin.storage.store_posix import PosixStore

pytestmark = pytest.mark.usefixtures("disarm_faults")

FOLDER = PosixStore(os.sep).capabilities
#: a folder that neither renames atomically nor links (a store the disk's engine might one day run on)
NO_RENAME = dataclasses.replace(FOLDER, rename_atomic=False, hard_link=False)


# ---------------------------------------------------------------------------------------
# the rule, per capability set
# ---------------------------------------------------------------------------------------
def test_a_folder_renames_links_its_backups_and_fsyncs():
    assert swap_strategy(FOLDER) == SwapStrategy(replace=RENAME, version_check=False, link_backups=True,
                                                 fsync=True)
    assert swap_strategy(FOLDER).renames


def test_a_bucket_copies_then_deletes_under_its_versions():
    s = swap_strategy(BUCKET_CAPABILITIES)
    assert s == SwapStrategy(replace=COPY_DELETE, version_check=True, link_backups=False, fsync=False)
    assert not s.renames


@pytest.mark.parametrize("rename,link,versions,fsync", [
    (r, k, v, f) for r in (True, False) for k in (True, False) for v in (True, False) for f in (True, False)])
def test_each_capability_decides_its_own_part(rename, link, versions, fsync):
    caps = dataclasses.replace(FOLDER, rename_atomic=rename, hard_link=link, versions=versions, fsync=fsync)
    s = swap_strategy(caps)
    assert s.replace == (RENAME if rename else COPY_DELETE)
    assert s.version_check == (not rename and versions)  # a rename needs no version guard of its own
    assert s.link_backups == link
    assert s.fsync == fsync


def test_an_engine_refuses_a_swap_it_does_not_do():
    copy = swap_strategy(BUCKET_CAPABILITIES)
    assert refusal(copy, (COPY_DELETE,), needs_version_check=True) is None
    assert refusal(copy, (RENAME, COPY_DELETE)) is None
    assert "rename" in refusal(swap_strategy(FOLDER), (COPY_DELETE,), where="s3://b")
    unguarded = swap_strategy(dataclasses.replace(BUCKET_CAPABILITIES, versions=False))
    assert refusal(unguarded, (COPY_DELETE,)) is None
    assert "version" in refusal(unguarded, (COPY_DELETE,), needs_version_check=True)


# ---------------------------------------------------------------------------------------
# the disk's engine asks it
# ---------------------------------------------------------------------------------------
def _spy_local(monkeypatch, caps=None):
    """Record how the disk's engine swapped and backed up; with ``caps``, the folder declares them
    (to the reduce, and to the recovery that finishes a swap)."""
    seen = {"asked": [], "copied": [], "renamed": [], "link": []}
    real_strategy = transaction.swap_strategy
    monkeypatch.setattr(transaction, "swap_strategy",
                        lambda c: (seen["asked"].append(c), real_strategy(c))[1])
    if caps is not None:
        for mod in (transaction, swap):
            monkeypatch.setattr(mod, "folder_capabilities", lambda: caps)
    real_copy = placement.copy_over  # the reduce's swap copies through ``placement.put_in_place``
    monkeypatch.setattr(placement, "copy_over", lambda tmp, final, *a, **kw: (seen["copied"].append(final),
                                                                              real_copy(tmp, final, *a, **kw))[1])
    real_replace = swap.fsops.replace
    # the swap renames in the folders its walk reached (``src_dir_fd``, ``dst_dir_fd``), passed on
    monkeypatch.setattr(swap.fsops, "replace", lambda src, dst, **kw: (seen["renamed"].append(dst),
                                                                       real_replace(src, dst, **kw))[1])
    real_store = vault_mod.Vault.store
    monkeypatch.setattr(vault_mod.Vault, "store", lambda self, *a, **kw: (seen["link"].append(kw.get("link", True)),
                                                                          real_store(self, *a, **kw))[1])
    return seen


def _reduce(logdir, policy="lossless"):
    rep = api.reduce_logdir(str(logdir), policy=policy, dry_run=False, verify_backends=("python",))
    return [o for o in rep.outcomes if o.op_id]


def test_the_disk_engine_renames_on_a_folder(tmp_path, monkeypatch):
    logdir = copy_real("torch/profiled", tmp_path / "logdir")
    seen = _spy_local(monkeypatch)
    outs = _reduce(logdir)
    assert outs and all(o.status == Outcome.VERIFIED for o in outs), [o.reason for o in outs]
    assert seen["asked"] and set(seen["asked"]) == {run_lock.folder_capabilities()}
    created = [os.path.join(str(logdir), f) for o in outs for f in o.created_files]
    assert created and set(created) <= set(seen["renamed"]) and not seen["copied"]
    assert seen["link"] and all(seen["link"])


#: traces compressed under a new name (the original deleted); an event file rewritten in its place
KINDS = [("torch/profiled", "lossless"), ("tf", "archive")]


@pytest.mark.parametrize("fixture,policy", KINDS, ids=["compressed-new-name", "rewritten-in-place"])
def test_a_folder_without_rename_gets_the_copy_and_delete_swap(tmp_path, monkeypatch, fixture, policy):
    logdir = copy_real(fixture, tmp_path / "logdir")
    before = user_files(logdir)
    seen = _spy_local(monkeypatch, NO_RENAME)
    outs = _reduce(logdir, policy)
    assert outs and all(o.status == Outcome.VERIFIED for o in outs), [o.reason for o in outs]
    assert seen["asked"] and set(seen["asked"]) == {NO_RENAME}
    created = [os.path.join(str(logdir), f) for o in outs for f in o.created_files]
    assert created and sorted(seen["copied"]) == sorted(created)
    assert not set(seen["renamed"]) & set(created)  # no staged file was renamed into place
    assert seen["link"] and not any(seen["link"])  # every backup a copy: the store has no hard links
    for p in created:
        assert os.path.isfile(p) and os.lstat(p).st_nlink == 1
    assert not [n for _, _, fs in os.walk(logdir) for n in fs if n.startswith(".footprint-")]  # sources deleted
    assert all(o.verified for o in api.restore(str(logdir)))
    assert user_files(logdir) == before


def test_a_kill_inside_the_copy_and_delete_swap_is_finished_by_recovery(tmp_path, monkeypatch):
    logdir = copy_real("torch/profiled", tmp_path / "logdir")  # two traces: the kill comes between them
    before = user_files(logdir)
    seen = _spy_local(monkeypatch, NO_RENAME)
    faults.arm("reduce.mid_swap", kill)  # after the first staged file is copied and its source deleted
    with pytest.raises(Killed):
        _reduce(logdir)
    faults.disarm_all()
    assert len(seen["copied"]) == 1
    api.recover_logdir(str(logdir))
    (op,) = [m for m in api.operations(logdir) if m.get("kind") == "reduce"]
    assert op["outcome"] == Outcome.VERIFIED, op
    assert len(set(seen["copied"])) == 2  # the recovery copied the second file in the same way
    assert not [n for _, _, fs in os.walk(logdir) for n in fs if n.startswith(".footprint-")]
    assert all(o.verified for o in api.restore(str(logdir)))
    assert user_files(logdir) == before


def test_a_kill_between_the_copy_and_the_delete_is_finished_by_recovery(tmp_path, monkeypatch):
    """Killed once the staged bytes stand at the original's name, before the staged file is
    deleted: both hold the new bytes; recovery only deletes the staged file."""
    logdir = copy_real("tf", tmp_path / "logdir")  # an event file rewritten in its place
    before = user_files(logdir)
    _spy_local(monkeypatch, NO_RENAME)
    real, made = placement.copy_new, []

    def copied_then_killed(src, dst, *a, **kw):
        made.append((src, real(src, dst, *a, **kw)))
        raise Killed()

    monkeypatch.setattr(placement, "copy_new", copied_then_killed)
    with pytest.raises(Killed):
        _reduce(logdir, "archive")
    ((tmp, _),) = made
    assert os.path.exists(tmp)  # the staged file is still there, whole
    monkeypatch.setattr(placement, "copy_new", lambda *a, **kw: (made.append(a), real(*a, **kw))[1])
    api.recover_logdir(str(logdir))
    assert not os.path.exists(tmp) and len(made) == 1  # deleted, and not copied again
    ops = [m for m in api.operations(logdir) if m.get("kind") == "reduce"]
    assert ops and all(m["outcome"] == Outcome.VERIFIED for m in ops), ops
    assert all(o.verified for o in api.restore(str(logdir)))
    assert user_files(logdir) == before


def _killed_within_the_first_copy(monkeypatch):
    """Kill the process halfway through the swap's first copy (its first half written at the
    original's name); returns the (staged file, name) pairs it was copying."""
    real, made = placement.copy_new, []

    def half_then_killed(src, dst, *a, **kw):
        with open(src, "rb") as fi, open(dst, "xb") as fo:
            data = fi.read()
            fo.write(data[:len(data) // 2])
        made.append((src, dst))
        raise Killed()

    monkeypatch.setattr(placement, "copy_new", half_then_killed)
    return made, real


@pytest.mark.parametrize("fixture,policy", KINDS, ids=["compressed-new-name", "rewritten-in-place"])
def test_a_kill_within_a_copy_is_finished_by_recovery(tmp_path, monkeypatch, fixture, policy):
    """The half-written copy is the beginning of the staged bytes, which are still whole beside it:
    recovery takes it for the swap's own, copies again and the run is reduced and verified."""
    logdir = copy_real(fixture, tmp_path / "logdir")
    before = user_files(logdir)
    _spy_local(monkeypatch, NO_RENAME)
    made, real = _killed_within_the_first_copy(monkeypatch)
    with pytest.raises(Killed):
        _reduce(logdir, policy)
    monkeypatch.setattr(placement, "copy_new", real)
    ((tmp, final),) = made
    assert os.path.getsize(final) < os.path.getsize(tmp)
    api.recover_logdir(str(logdir))
    ops = [m for m in api.operations(logdir) if m.get("kind") == "reduce"]
    assert ops and all(m["outcome"] == Outcome.VERIFIED for m in ops), ops
    assert not os.path.exists(tmp) and os.path.isfile(final)
    assert all(o.verified for o in api.restore(str(logdir)))
    assert user_files(logdir) == before


def test_a_partial_copy_under_a_new_name_goes_with_a_rollback(tmp_path, monkeypatch):
    """Killed within the copy of the first compressed trace, then the second trace changed before
    the next start: recovery rolls the run back (the change is kept, as ever) and the half-written
    compressed copy is not left beside the originals."""
    logdir = copy_real("torch/profiled", tmp_path / "logdir")
    _spy_local(monkeypatch, NO_RENAME)
    made, real = _killed_within_the_first_copy(monkeypatch)
    with pytest.raises(Killed):
        _reduce(logdir)
    monkeypatch.setattr(placement, "copy_new", real)
    ((_, final),) = made
    assert os.path.isfile(final)
    (other,) = [os.path.join(logdir, n) for n in os.listdir(logdir)
                if n.endswith(".pt.trace.json") and n + ".gz" != os.path.basename(final)]
    with open(other, "ab") as f:
        f.write(b" ")  # written after the crash: the swap is not finished over it
    api.recover_logdir(str(logdir))
    ops = [m for m in api.operations(logdir) if m.get("kind") == "reduce"]
    assert ops and all(m["outcome"] == Outcome.ROLLED_BACK for m in ops), ops
    assert not [n for n in os.listdir(logdir) if n.endswith(".gz") or n.startswith(".footprint-")]


# ---------------------------------------------------------------------------------------
# a bucket's engine asks it
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rewrite_logdir(tmp_path_factory):
    from test_objstore import _write_rewrite_logdir

    return _write_rewrite_logdir(tmp_path_factory.mktemp("swap") / "logs")


def _bucket_reduce(url):
    (o,) = api.reduce_logdir(url, policy="lossless", dry_run=False, quiet_period=0, runs=["torch/resnet"],
                             verify_backends=("python",)).outcomes
    return o


def test_the_bucket_engine_copies_and_deletes_as_its_store_declares(s3_bucket, rewrite_logdir, monkeypatch):
    from tb_footprint_plugin.engine import bucket_rewrite

    url = s3_bucket.upload(rewrite_logdir, "asks")
    asked = []
    real = bucket_rewrite.swap_strategy
    monkeypatch.setattr(bucket_rewrite, "swap_strategy", lambda c: (asked.append(c), real(c))[1])
    o = _bucket_reduce(url)
    assert o.status == Outcome.VERIFIED, o.reason
    assert asked == [BUCKET_CAPABILITIES]


@pytest.mark.parametrize("change", [{"rename_atomic": True}, {"versions": False}], ids=["renames", "no-versions"])
def test_a_bucket_store_it_cannot_swap_on_is_refused_before_anything_is_written(s3_bucket, rewrite_logdir,
                                                                                 monkeypatch, change):
    prefix = "refused-" + next(iter(change))
    url = s3_bucket.upload(rewrite_logdir, prefix)
    before = s3_bucket.hashes(prefix)
    monkeypatch.setattr(store_object, "BUCKET_CAPABILITIES", dataclasses.replace(BUCKET_CAPABILITIES, **change))
    o = _bucket_reduce(url)
    assert (o.status, o.code) == (Outcome.FAILED, Failure.REFUSED), o.reason
    assert "nothing was changed" in o.reason and not o.op_id
    after = s3_bucket.hashes(prefix)
    # the plan's scan cached its listing; no journal, lock, backup, upload or manifest was written
    assert set(after) - set(before) == {".tb-footprint/scan-cache.json"}
    assert {k: v for k, v in after.items() if k in before} == before


def _new_names(logdir):
    return [os.path.join(d, n) for d, _, fs in os.walk(logdir) for n in fs if n.endswith(".gz")]


@pytest.mark.parametrize("caps", [FOLDER, NO_RENAME], ids=["rename", "copy-delete"])
@pytest.mark.parametrize("then_fail", [False, True], ids=["swap", "rollback-before-swap"])
def test_a_file_someone_makes_at_a_new_name_is_never_taken_for_a_partial_copy(tmp_path, monkeypatch, caps, then_fail):
    """Review R17 F2: on a folder whose swap copies, any file at a new name shorter than the staged
    bytes and starting like them (an empty one too) was taken for the swap's own partial copy: the
    swap overwrote it and a rollback that never swapped deleted it. Only a swap that was begun can
    have left one: a first swap refuses the name ("appeared meanwhile"), as a renaming folder does,
    and a rollback before the swap leaves it."""
    logdir = copy_real("torch/profiled", tmp_path / "logdir")
    assert not _new_names(logdir)
    _spy_local(monkeypatch, caps)
    planted = []

    def someone_makes_files():
        # the staged files exist now; an empty file appears at each new (final) name
        for d, ds, fs in os.walk(logdir):
            ds[:] = [x for x in ds if not x.startswith(".tb-footprint")]
            for n in fs:
                if n.endswith(".json"):
                    p = os.path.join(d, n + ".gz")
                    if not os.path.exists(p):
                        open(p, "xb").close()
                        planted.append(p)
        if then_fail:
            raise RuntimeError("a failure after verify: rolled back")

    faults.arm("reduce.verify", someone_makes_files)
    try:
        _reduce(logdir)
    finally:
        faults.disarm_all()
    assert planted
    assert [p for p in planted if os.path.exists(p) and os.path.getsize(p) == 0] == planted
