"""Issue 29, "Undo exactly", on the restore paths ``tests/test_restore_exact.py`` does not take:
a trace slimmed in place (rewrite), a reduce whose backups the compressed vault compacted into
``.zst`` blobs before the restore (folders re-created too), backups offloaded to a bucket (the
remote vault) with folders re-created, a restore that puts late records back beside the original,
and on every object store a restore and a retired run's restore that say the store keeps no mtime.

Each local case dresses the logdir with unusual modes and nanosecond mtimes first
(``test_restore_exact.dress``) and compares bytes, mode and mtime_ns of every file, the mode of
every folder and the mtime of every folder the restore re-created.
"""
import os

from conftest import copy_real
from test_late_records import append_by_path, image_run
from test_restore_exact import PY, _removed_dirs, assert_exact, dress, snapshot
from test_vault_remote import offload_all
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Outcome
from tb_footprint_plugin.engine.context import Context

SLIM = {"name": "slim", "base": "lossless",
        "content": {"trace": {"drop_python_function": True, "drop_memory": True}}}


def _reduce(logdir, policy):
    rep = api.reduce_logdir(str(logdir), policy=policy, dry_run=False, quiet_period=0, verify_backends=PY)
    acted = [o for o in rep.outcomes if o.status == Outcome.VERIFIED]
    assert acted and rep.ok, [o.to_dict() for o in rep.outcomes]
    return acted


def _restore_all(logdir):
    outs = api.restore(str(logdir))
    assert outs and all(o.status == Outcome.RESTORED for o in outs), [o.to_dict() for o in outs]
    return outs


def _blob_forms(logdir):
    """Suffixes of the blobs the default vault holds now ('' plain, '.zst', '.remote')."""
    out = set()
    for d, _s, names in os.walk(Context(str(logdir)).vault.blobs):
        out.update(n[64:] for n in names)
    return out


def test_slimmed_traces_restore_exactly(tmp_path):
    """The trace slim rewrites each PyTorch trace under its own name: restore gives back each
    one's bytes, mode and mtime_ns."""
    logdir = copy_real("torch/profiled", tmp_path / "logdir")
    dress(logdir)
    before = snapshot(logdir)
    acted = _reduce(logdir, SLIM)
    traces = [p for o in acted for p in o.created_files if ".pt.trace.json" in p]
    assert traces, [o.to_dict() for o in acted]
    assert all(snapshot(logdir)[p][0] != before[p][0] for p in traces if p in before)
    _restore_all(logdir)
    assert_exact(logdir, before)


def test_restore_from_compacted_zst_blobs_recreates_folders_exactly(tmp_path, monkeypatch):
    """The default (compressed) vault holds the backups as ``.zst`` by the time of the restore:
    files come back with mode and mtime_ns, re-created folders with mode and mtime. (Small ones
    would be packed since issue #27 item 2, whose round trips test_vault_packs.py runs: here each
    is a ``.zst``.)"""
    from tb_footprint_plugin.engine import vault as vault_mod

    monkeypatch.setattr(vault_mod, "PACK_BELOW", 0)
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    dress(logdir)
    before = snapshot(logdir)
    _reduce(logdir, "archive")
    assert ".zst" in _blob_forms(logdir), _blob_forms(logdir)
    removed = _removed_dirs(logdir, None)
    assert removed
    _restore_all(logdir)
    assert_exact(logdir, before, dir_mtimes_of=removed)


def test_restore_from_offloaded_backups_recreates_folders_exactly(tmp_path, s3_bucket):
    """Backups offloaded to a bucket (nothing but ``.remote`` records left on disk) come back with
    mode and mtime_ns; the folders the reduce removed are re-created with mode and mtime."""
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    dress(logdir)
    before = snapshot(logdir)
    _reduce(logdir, "archive")
    offload_all(logdir, s3_bucket.url("vaults"))
    assert _blob_forms(logdir) == {".remote"}, _blob_forms(logdir)
    removed = _removed_dirs(logdir, None)
    assert removed
    _restore_all(logdir)
    assert_exact(logdir, before, dir_mtimes_of=removed)


def test_restore_with_late_records_gives_the_original_its_mode_and_mtime(tmp_path):
    """Records appended to the reduced file go back beside the original (``.salvaged-001``); the
    original itself comes back with its bytes, mode and mtime_ns."""
    logdir = tmp_path / "logdir"
    path = image_run(logdir / "run")
    dress(logdir)
    before = snapshot(logdir)
    _reduce(logdir, "archive")
    append_by_path(path, 1000)
    (o,) = _restore_all(logdir)
    assert o.code == Finding.LATE_RECORDS_RESTORED
    now = snapshot(logdir)
    salvaged = f"run/{path.name}.salvaged-001"
    assert salvaged in now
    del now[salvaged]
    rel = f"run/{path.name}"
    assert now[rel] == before[rel]
    assert {k: v[:2] for k, v in now.items()} == {k: v[:2] for k, v in before.items()}


def _uploaded(bucket, tmp_path):
    """keras_profiled uploaded as ``logs``: (its URL, a function giving the hashes of its user objects)."""
    url = bucket.upload(copy_real("tf/keras_profiled", tmp_path / "logdir"), "logs")
    return url, lambda: {k: v for k, v in bucket.hashes("logs").items() if not k.startswith(".tb-footprint/")}


def test_bucket_restore_on_every_store_says_it_keeps_no_mtime(bucket, tmp_path):
    url, user = _uploaded(bucket, tmp_path)
    before = user()
    rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0, verify_backends=PY)
    assert any(o.status == Outcome.VERIFIED for o in rep.outcomes), [o.to_dict() for o in rep.outcomes]
    assert user() != before
    outs = api.restore(url)
    assert outs and all(o.status == Outcome.RESTORED for o in outs), [o.to_dict() for o in outs]
    assert user() == before
    for o in outs:
        assert o.code == Finding.MTIME_NOT_KEPT and "modification times" in o.reason, o.to_dict()


def test_bucket_retired_run_restore_says_it_keeps_no_mtime(bucket, tmp_path):
    url, user = _uploaded(bucket, tmp_path)
    before = user()
    rep = api.retire(url, api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], [o.to_dict() for o in rep.outcomes]
    assert user() != before
    (o,) = api.restore(url, run="train")
    assert o.status == Outcome.RESTORED, o.to_dict()
    assert user() == before
    assert o.code == Finding.MTIME_NOT_KEPT and "modification times" in o.reason, o.to_dict()


# --- the folders a reduce changed and kept: their mtimes come back too ---------------------------
def _three_runs(tmp_path):
    ld = tmp_path / "logdir"
    for name, src in (("a", "tf/summary_mix"), ("b", "torch/profiled"), ("c", "tf/keras_profiled")):
        copy_real(src, ld / name)
    dress(ld)
    return ld


def _all_dirs(before):
    return {rel for rel, (d, _m, _t) in before.items() if d == "dir"}


def test_restore_gives_every_folder_of_the_run_its_mtime(tmp_path):
    """A reduce stages, renames and deletes inside a run's folders, which moves their mtimes: after
    the restore ``ls -l`` shows each folder (the run's own included) with its mtime as before."""
    ld = _three_runs(tmp_path)
    before = snapshot(ld)
    acted = _reduce(ld, "archive")
    assert {o.run for o in acted} >= {"a", "b", "c/train"}
    assert any(snapshot(ld).get(r, (0, 0, 0))[2] != before[r][2] for r in ("a", "b", "c/train"))
    _restore_all(ld)
    assert_exact(ld, before, dir_mtimes_of=_all_dirs(before))


def test_a_rolled_back_reduce_gives_every_folder_its_mtime(tmp_path):
    from tb_footprint_plugin.engine import faults

    ld = _three_runs(tmp_path)
    before = snapshot(ld)
    faults.arm("reduce.swap", "raise")  # every original replaced or removed, no commit yet
    try:
        rep = api.reduce_logdir(str(ld), policy="archive", dry_run=False, quiet_period=0, verify_backends=PY)
    finally:
        faults.disarm_all()
    assert {o.status for o in rep.outcomes if o.run in ("a", "b", "c/train")} == {Outcome.ROLLED_BACK}, \
        [o.to_dict() for o in rep.outcomes]
    assert_exact(ld, before, dir_mtimes_of=_all_dirs(before))


def test_a_folder_written_to_since_the_reduce_keeps_its_newer_mtime(tmp_path):
    ld = _three_runs(tmp_path)
    before = snapshot(ld)
    _reduce(ld, "archive")
    (ld / "b" / "notes.txt").write_text("written after the reduce\n")
    _restore_all(ld)
    now = snapshot(ld)
    assert now["b"][2] != before["b"][2]  # the folder did change: its time says so
    del now["b/notes.txt"]
    assert now["a"] == before["a"] and now["c/train"] == before["c/train"]


def _grouped(tmp_path):
    """Runs inside a group folder (grp/train, grp/validation): retiring one changes grp."""
    ld = tmp_path / "logdir"
    copy_real("tf/keras_profiled", ld / "grp")
    dress(ld)
    return ld


def test_a_retired_runs_restore_gives_its_parent_folder_its_mtime(tmp_path):
    ld = _grouped(tmp_path)
    before = snapshot(ld)
    rep = api.retire(str(ld), api.retire_rule(runs=["grp/train"]), dry_run=False, quiet_period=0)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], [o.to_dict() for o in rep.outcomes]
    assert not (ld / "grp" / "train").exists() and snapshot(ld)["grp"][2] != before["grp"][2]
    (o,) = api.restore(str(ld), run="grp/train")
    assert o.status == Outcome.RESTORED, o.to_dict()
    assert_exact(ld, before, dir_mtimes_of=_all_dirs(before))


def test_a_rolled_back_retire_gives_its_parent_folder_its_mtime(tmp_path):
    from tb_footprint_plugin.engine import faults

    ld = _grouped(tmp_path)
    before = snapshot(ld)
    faults.arm("retire.delete", "raise")  # the run is gone from the logdir, nothing recorded yet
    try:
        rep = api.retire(str(ld), api.retire_rule(runs=["grp/train"]), dry_run=False, quiet_period=0)
    finally:
        faults.disarm_all()
    assert [o.status for o in rep.outcomes] == [Outcome.ROLLED_BACK], [o.to_dict() for o in rep.outcomes]
    assert_exact(ld, before, dir_mtimes_of=_all_dirs(before))


def test_after_a_restore_older_than_and_the_quiet_period_see_the_run_as_it_was(tmp_path):
    """The selectors that read times (``--older-than``, the quiet period) treat a restored run as
    before its reduce: old, not being written — the same plan, run for run, as before the reduce."""
    ld = _three_runs(tmp_path)  # dressed: every time in 2017

    def shown():
        p = api.plan(str(ld), "archive", older_than=30 * 86400)  # default quiet period
        return [(rp.run, rp.code, rp.expected_after_bytes) for rp in p.runs]

    before = shown()
    assert {r for r, code, _ in before if code is None} >= {"a", "b", "c/train"}, before
    _reduce(ld, "archive")
    _restore_all(ld)
    assert shown() == before
