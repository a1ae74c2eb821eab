"""Review R24 F5 (HIGH) as real sequences: the blobs status calls "kept, never purged" (orphans of a
missing manifest) were swept once the index object listing them was removed — as status said it
may be — because a sweep took every data object no index row listed, past the grace, for a killed
add's leftover. Now a sweep deletes only what a pending note proves a killed write's leftover
(``BlobStore``): both sequences end with the run's originals back byte for byte.

- a bucket logdir's local blob folder (``--backup-dir``), on moto: x's manifest gone from the
  bucket (a ``sync --delete``; a copy kept aside, as bucket versioning would), x's index object
  removed, the packs past the grace, ``purge`` of y; x's manifest put back; ``restore`` x.
- a disk vault's packs: x's operation-log segment (both copies) moved away (a tidy by hand), x's
  pack index object removed, the pack past the grace, ``reduce`` of z (its batch end sweeps);
  the segment put back; ``restore`` x."""
import glob
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tb_footprint_plugin import api, codes
from test_pack_index_rebuilt_bucket import GARBAGE, demo_logdir  # noqa: F401
from test_unlisted_packs_kept import _manifest_key, _ops, _under, _user, two_reduces  # noqa: F401
from test_unlisted_packs_kept_disk import _age, _data_objects

pytestmark = pytest.mark.usefixtures("disarm_faults")
REPO = Path(__file__).resolve().parents[1]


def test_bucket_orphans_kept_after_their_index_object_is_removed(two_reduces, s3_bucket):
    url, folder, before, prefix, y, y_index = two_reduces
    ops = _ops(url, folder)
    key = _manifest_key(s3_bucket, prefix, ops[y]["op_id"])
    aside = s3_bucket.fs.cat_file(key)
    s3_bucket.fs.rm(key)  # a sync --delete, a lifecycle rule
    s3_bucket.fs.invalidate_cache()
    said = [p for p in api.status(url, backup_dir=folder)["problems"] if p["code"] == codes.Finding.ORPHAN_BLOBS]
    assert said and "never purged" in said[0]["detail"], api.status(url, backup_dir=folder)["problems"]
    for p in y_index:  # garbled (bit rot), then removed
        with open(p, "wb") as f:
            f.write(GARBAGE)
        os.unlink(p)
    _age(folder)
    held = _data_objects(folder)
    x = sorted(r for r in ops if r != y)[0]
    rep = api.purge(url, yes=True, backup_dir=folder, op=ops[x]["op_id"])
    assert [o["run"] for o in rep.ops] == [x], rep.to_dict()
    assert set(_data_objects(folder)) & set(held), "every data object of the folder swept"
    s3_bucket.fs.pipe_file(key, aside)  # the manifest put back
    s3_bucket.fs.invalidate_cache()
    res = api.restore(url, run=y, backup_dir=folder)
    assert [o.status for o in res] == [codes.Outcome.RESTORED], [o.to_dict() for o in res]
    assert _under(_user(s3_bucket, prefix), y) == _under(before, y)


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", *args], cwd="/", env=env,
                       capture_output=True, text=True, timeout=600)
    return p


def test_disk_orphans_kept_after_their_pack_index_object_is_removed(tmp_path, monkeypatch):
    from test_restore_exact import assert_exact, snapshot
    from tb_footprint_plugin import demo
    from tb_footprint_plugin.storage.paths import state_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tmp_path / "demo"
    demo.generate_demo(str(root), scale=0.05)
    for p in root.glob(".footprint-demo*"):
        p.unlink()
    plan = api.reduce_logdir(str(root), policy="archive", dry_run=True, quiet_period=0)
    runs = sorted({o.run for o in plan.outcomes if o.status == codes.Outcome.DRY_RUN})
    assert len(runs) >= 3, plan.to_dict()
    x, y, z = runs[0], runs[1], runs[2]
    before = snapshot(root)
    sd = Path(state_dir(str(root)))

    def reduce(run):
        p = _cli("reduce", str(root), "--run", run, "--yes", "--quiet-period", "0")
        assert p.returncode == 0 and "✓" in p.stdout, (p.stdout, p.stderr)

    reduce(x)
    x_index = sorted(glob.glob(str(sd / "packs" / "index" / "*.json")))
    x_packs = _data_objects(str(sd / "packs"))
    segs = sorted(os.listdir(sd / "oplog" / "segments"))
    assert x_index and x_packs and segs
    reduce(y)
    aside = tmp_path / "aside"
    aside.mkdir()
    for name in segs:  # x's operation-log piece, both copies, moved away (a tidy by hand)
        for sub in ("segments", "twins"):
            if (sd / "oplog" / sub / name).exists():
                (aside / sub).mkdir(exist_ok=True)
                shutil.move(str(sd / "oplog" / sub / name), str(aside / sub / name))
    said = [p for p in api.status(str(root))["problems"] if p["code"] == codes.Finding.ORPHAN_BLOBS]
    assert said and "never purged" in said[0]["detail"], api.status(str(root))["problems"]
    for p in x_index:  # garbled, then removed
        with open(p, "wb") as f:
            f.write(GARBAGE)
        os.unlink(p)
    _age(str(sd / "packs"))
    reduce(z)  # its batch end sweeps the packs
    assert set(x_packs) <= set(_data_objects(str(sd / "packs"))), "x's pack swept"
    for sub in ("segments", "twins"):  # the piece put back
        for p in (aside / sub).glob("*") if (aside / sub).exists() else ():
            shutil.move(str(p), str(sd / "oplog" / sub / p.name))
    p = _cli("restore", str(root), "--all", "--yes")
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert_exact(root, before)
