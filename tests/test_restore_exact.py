"""Issue 29, "Undo exactly": a restore puts back each file's bytes, its mtime (to the nanosecond)
and its mode, and each folder it re-creates with its mode and mtime, on every local restore path:
a reduce that deleted profile sessions (their folders removed), gzip-compressed traces, an
event file rewritten in place, a retirement, with the vault on the same filesystem (the backup
is a hard link of the original) and on another one (a copy). A bucket restore says the store
keeps no mtime.

Before each reduce the originals get unusual modes (0o640, 0o604, 0o750 folders, ...) and old
mtimes with nanoseconds, so a restore that copies with default modes or sets times through a
float would show.
"""
import hashlib
import os
import shutil
import stat
import uuid
from pathlib import Path

import pytest

from conftest import copy_real
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.synth import EventWriter, make_png

PY = ("python",)
#: mtimes well in the past (so no quiet period applies), with nanoseconds a float cannot carry
OLD_NS = 1_500_000_000_123_456_789
FILE_MODES = (0o640, 0o604, 0o600, 0o444)
DIR_MODES = (0o750, 0o705, 0o755)


def _user_paths(root: Path):
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".tb-footprint")]
        for d in dirs:
            yield Path(dirpath) / d, True
        for n in files:
            yield Path(dirpath) / n, False


def dress(root: Path) -> None:
    """Unusual modes and old nanosecond mtimes on every file and folder of the logdir (folders
    last, deepest first: a file's mtime and a mode change leave folder mtimes alone)."""
    entries = sorted(_user_paths(root), key=lambda e: (e[1], -len(e[0].parts), str(e[0])))
    for i, (p, is_dir) in enumerate(entries):
        ns = OLD_NS + i * 1_000_000_007
        if is_dir:
            os.chmod(p, DIR_MODES[i % len(DIR_MODES)])
        else:
            os.chmod(p, FILE_MODES[i % len(FILE_MODES)])
        os.utime(p, ns=(ns, ns))


def snapshot(root: Path) -> dict:
    """rel path -> (sha256 or 'dir', st_mode, st_mtime_ns) of every file and folder."""
    out = {}
    for p, is_dir in _user_paths(root):
        st = os.lstat(p)
        digest = "dir" if is_dir else hashlib.sha256(p.read_bytes()).hexdigest()
        out[str(p.relative_to(root))] = (digest, stat.S_IMODE(st.st_mode), st.st_mtime_ns)
    return out


def assert_exact(root: Path, before: dict, *, dir_mtimes_of=()) -> None:
    """Every file: bytes, mode, mtime_ns as before; every folder: mode as before, and the mtime of
    each folder in ``dir_mtimes_of`` (folders the restore re-created)."""
    now = snapshot(root)
    assert sorted(now) == sorted(before), set(now) ^ set(before)
    for rel, (digest, mode, mtime_ns) in before.items():
        got = now[rel]
        if digest == "dir":
            assert got[1] == mode, f"{rel}: folder mode {oct(got[1])}, was {oct(mode)}"
            if rel in dir_mtimes_of:
                assert got[2] == mtime_ns, f"{rel}: re-created folder mtime {got[2]}, was {mtime_ns}"
        else:
            assert got == (digest, mode, mtime_ns), f"{rel}: {got} != {(digest, mode, mtime_ns)}"


@pytest.fixture(params=["same_fs", "cross_fs"])
def vault(request):
    """None: the default vault inside the logdir (backups are hard links of the originals);
    a folder on /dev/shm (another filesystem: backups are copies)."""
    if request.param == "same_fs":
        yield None
        return
    d = Path("/dev/shm") / f"tbfp-exact-{uuid.uuid4().hex[:8]}"
    d.mkdir(mode=0o700)
    yield str(d)
    shutil.rmtree(d, ignore_errors=True)


def _reduce(logdir: Path, policy, vault):
    rep = api.reduce_logdir(str(logdir), policy=policy, dry_run=False, quiet_period=0, verify_backends=PY,
                            backup_dir=vault)
    acted = [o for o in rep.outcomes if o.status == "verified"]
    assert acted and rep.ok, [o.to_dict() for o in rep.outcomes]
    return acted


def _restore(logdir: Path, vault):
    outs = api.restore(str(logdir), backup_dir=vault)
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    return outs


def _removed_dirs(logdir: Path, vault) -> set:
    return {d["path"] for m in api.operations(str(logdir), backup_dir=vault) if m.get("kind") == "reduce"
            for d in m.get("removed_dirs", [])}


def test_reduce_that_deleted_profile_sessions_restores_exactly(tmp_path, vault):
    """archive deletes the profile session and removes its folders: restore gives back every
    file with its mtime and mode, and re-creates each folder with its mode and mtime."""
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    dress(logdir)
    before = snapshot(logdir)
    acted = _reduce(logdir, "archive", vault)
    assert any(o.removed_files for o in acted)
    removed = _removed_dirs(logdir, vault)
    assert removed, "the reduce was meant to remove the session's folders"
    assert not any((logdir / d).exists() for d in removed)
    _restore(logdir, vault)
    assert_exact(logdir, before, dir_mtimes_of=removed)


def test_gzip_compressed_traces_restore_exactly(tmp_path, vault):
    logdir = copy_real("torch/profiled", tmp_path / "logdir")
    dress(logdir)
    before = snapshot(logdir)
    acted = _reduce(logdir, "lossless", vault)
    assert any(p.endswith(".gz") for o in acted for p in o.created_files), [o.to_dict() for o in acted]
    _restore(logdir, vault)
    assert_exact(logdir, before)


def test_event_file_rewritten_in_place_restores_exactly(tmp_path, vault):
    logdir = tmp_path / "logdir"
    with EventWriter(str(logdir / "run")) as w:
        for s in range(30):
            w.scalar("loss", s, 1.0 / (s + 1))
            w.image("img", s, make_png(32, 32, seed=s), 32, 32)
        path = Path(w.path)
    dress(logdir)
    before = snapshot(logdir)
    acted = _reduce(logdir, "archive", vault)
    assert str(path.relative_to(logdir)) in acted[0].created_files  # rewritten under its own name
    assert path.stat().st_mtime_ns != before[str(path.relative_to(logdir))][2]
    _restore(logdir, vault)
    assert_exact(logdir, before)


def test_retired_run_restores_exactly(tmp_path, vault):
    """Every file back with its mtime and mode, every folder of the run re-created with its mode
    and its mtime (renamed back on one filesystem, copied back across two)."""
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    dress(logdir)
    before = snapshot(logdir)
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, backup_dir=vault, quiet_period=0)
    assert [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]
    assert not (logdir / "train").exists()
    _restore(logdir, vault)
    run_dirs = {rel for rel, (d, _m, _t) in before.items() if d == "dir" and (rel + "/").startswith("train/")}
    assert "train/plugins/profile" in run_dirs
    assert_exact(logdir, before, dir_mtimes_of=run_dirs)


def test_older_records_with_a_float_mtime_still_restore(tmp_path):
    """Manifests written before mtime_ns was recorded carry only the float ``mtime``: restore
    still sets it (to the microsecond a float holds) and the mode."""
    import json

    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    dress(logdir)
    before = snapshot(logdir)
    _reduce(logdir, "archive", None)
    from tb_footprint_plugin.engine.vault import Vault

    vault = Vault(str(Path(logdir) / ".tb-footprint"))
    for m in vault.manifests():  # as an older version recorded them: no mtime_ns
        for f in m.get("files", []):
            f.pop("mtime_ns", None)
        for d in m.get("removed_dirs", []):
            d.pop("mtime_ns", None)
        vault.write_manifest(m)
    _restore(logdir, None)
    now = snapshot(logdir)
    for rel, (digest, mode, mtime_ns) in before.items():
        if digest != "dir":
            assert now[rel][:2] == (digest, mode) and abs(now[rel][2] - mtime_ns) < 1000, rel


def test_bucket_restore_says_the_store_keeps_no_mtime(s3_bucket, tmp_path):
    """Bytes come back exactly; the store has no mtime or mode to give back, and the report says so
    (with a code)."""
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    url = s3_bucket.upload(logdir, "logs")

    def hashes():
        return {k: v for k, v in s3_bucket.hashes("logs").items() if not k.startswith(".tb-footprint/")}

    before = hashes()
    policy = {"name": "drop-profiles", "rules": {c: "delete" for c in (
        "profile_cache", "profile_secondary", "profile_xplane", "profile_other")}}
    rep = api.reduce_logdir(url, policy=policy, dry_run=False, quiet_period=0)
    assert any(o.status == "verified" for o in rep.outcomes), [o.to_dict() for o in rep.outcomes]
    assert hashes() != before
    outs = api.restore(url)
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    assert hashes() == before
    for o in outs:
        assert o.code == Finding.MTIME_NOT_KEPT
        assert "keeps no file modification times" in o.reason and "byte for byte" in o.reason
