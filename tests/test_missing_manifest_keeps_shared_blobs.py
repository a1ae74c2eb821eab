"""Review R26 F1: runs x and w hold identical bytes (w a copy of x: content-addressed, stored once); w's manifest goes
missing (a disk's operation-log piece, both copies; a bucket's manifest object). Before, status said nothing and
``purge --run x`` deleted the shared backups (named by x's manifest only): w's only copy, its restore then failed.
Now an operation the change log names as a verified reduce, with no purge or restore since, whose manifest no vault
holds is *missing*: a purge (and a restore's release) keeps every backup, and status names the operation and its
run. One case per store combination: a disk vault (a purge, a restore's release); a disk logdir with a remote vault
(``--backup-dir s3://…``, on the real moto server). A bucket logdir with a local blob folder is not covered yet: its
change log has no line of a clean reduce (review R26 F1's bucket half, open)."""
import hashlib
import os
import shutil
import time
from pathlib import Path

from conftest import copy_real
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding

OLD = time.time() - 3600
STATE = ".tb-footprint"


def _files(root: Path) -> dict:
    """rel path -> sha256 of every file outside the state folder."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.relative_to(root).as_posix().startswith(STATE)}


def _runs(root: Path) -> Path:
    """Runs x and w: the same profile run twice (identical bytes, one backup of each content)."""
    src = copy_real("tf/keras_profiled", root / "src")
    logdir = root / "logdir"
    for run in ("x", "w"):
        shutil.copytree(src / "train", logdir / run, copy_function=shutil.copy2)
    for p in [logdir, *logdir.rglob("*")]:
        os.utime(p, (OLD, OLD), follow_symlinks=False)
    shutil.rmtree(src)
    return logdir


def _reduce(logdir, run: str, backup_dir=None) -> str:
    rep = api.reduce_logdir(str(logdir), backup_dir, policy="archive", dry_run=False, runs=[run], quiet_period=0,
                            verify_backends=("python",))
    (o,) = rep.outcomes
    assert o.status == "verified", o.to_dict()
    return o.op_id


def reduce_losing_manifest(logdir: Path, run: str, backup_dir=None, aside: Path = None) -> str:
    """``run`` reduced, then its manifest gone missing: the operation log's pieces the reduce wrote, both
    copies, removed (or moved to ``aside``). Returns its op id."""
    seg = logdir / STATE / "oplog" / "segments"
    twins = logdir / STATE / "oplog" / "twins"
    had = set(os.listdir(seg)) if seg.exists() else set()
    op = _reduce(logdir, run, backup_dir)
    pieces = sorted(set(os.listdir(seg)) - had)
    assert pieces
    for name in pieces:
        for src, dst in ((seg / name, name), (twins / name, name + ".twin")):
            if src.exists():
                os.rename(src, aside / dst) if aside is not None else os.remove(src)
    return op


def _missing(logdir, backup_dir=None) -> list:
    return [p for p in api.status(str(logdir), backup_dir=backup_dir)["problems"]
            if p["code"] == Finding.MANIFEST_MISSING]


def _disk_case(tmp_path: Path, backup_dir=None, verb: str = "purge") -> None:
    logdir = _runs(tmp_path)
    before = _files(logdir)
    _reduce(logdir, "x", backup_dir)
    seg = logdir / STATE / "oplog" / "segments"
    twins = logdir / STATE / "oplog" / "twins"
    had = set(os.listdir(seg))
    op_w = _reduce(logdir, "w", backup_dir)
    assert not _missing(logdir)  # healthy: nothing said
    aside = tmp_path / "aside"
    aside.mkdir()
    pieces = sorted(set(os.listdir(seg)) - had)
    assert pieces
    for name in pieces:  # w's manifest goes missing: its piece of the operation log, both copies
        os.rename(seg / name, aside / name)
        if (twins / name).exists():
            os.rename(twins / name, aside / (name + ".twin"))
    (f,) = _missing(logdir)
    assert op_w in f["detail"] and "of run w" in f["detail"] and "every backup is kept" in f["detail"], f
    if verb == "purge":
        rep = api.purge(str(logdir), run="x", yes=True)
        # said as what it is: a warning (every blob kept, the purge goes on), not state refused
        assert [w["code"] for w in rep.warnings] == [Finding.MANIFEST_MISSING], rep.to_dict()
        assert not [r for r in rep.refused if r["code"] == Finding.MANIFEST_MISSING], rep.to_dict()
    else:  # a restore of x releases its backups: the shared ones are w's only copy
        (o,) = api.restore(str(logdir), run="x")
        assert o.status == "restored", o.to_dict()
    for name in pieces:
        os.rename(aside / name, seg / name)
        if (aside / (name + ".twin")).exists():
            os.rename(aside / (name + ".twin"), twins / name)
    assert not _missing(logdir)
    (o,) = api.restore(str(logdir), run="w")
    assert o.status == "restored", o.to_dict()
    assert {k: v for k, v in _files(logdir).items() if k.startswith("w/")} == \
        {k: v for k, v in before.items() if k.startswith("w/")}


def test_disk_vault_keeps_a_missing_manifests_shared_backups(tmp_path):
    _disk_case(tmp_path)


def test_disk_vault_restores_release_keeps_them(tmp_path):
    _disk_case(tmp_path, verb="restore")


def test_disk_logdir_with_remote_vault_keeps_them(tmp_path, s3_bucket):
    _disk_case(tmp_path, s3_bucket.url("r26f1"))
