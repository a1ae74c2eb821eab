"""A logdir nested in another keeps its state to itself (review R11 G7, HIGH): the parent's scan
leaves out every state folder at any depth, as it leaves out its own, and says so. In a bucket the
child's vault holds server-side copies keyed like runs (``exp1/.tb-footprint/blobs/<op>/r0/plugins/
profile/...``): the parent's scan listed them as runs, its reduce took them and its purge freed them,
so the child's originals existed nowhere."""
from __future__ import annotations

import os
import time

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.scan.scanner import scan

DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


@pytest.fixture
def prof_logdir(tmp_path):
    root = tmp_path / "logs"
    for r in range(2):
        run = root / f"r{r}"
        with synth.EventWriter(str(run)) as w:
            w.scalar("loss", 0, 1.0)
        plugins = run / "plugins" / "profile" / "2024_01_01_00_00_00"
        plugins.mkdir(parents=True)
        for i in range(3):
            (plugins / f"host{i}.xplane.pb").write_bytes(f"r{r}".encode() * 32 + bytes(3000 + 41 * i))
    old = time.time() - 3600
    for d, _, names in os.walk(root):
        for n in names:
            os.utime(os.path.join(d, n), (old, old))
    return root


def nested_state_words(rel: str) -> str:
    return f"a nested logdir's state at {rel}: left out"


def _user(bucket, prefix):
    return {k: v for k, v in bucket.hashes(prefix).items() if not k.startswith(".tb-footprint/")}


def test_a_parents_reduce_and_purge_leave_a_nested_bucket_logdirs_backups(s3_bucket, prof_logdir):
    s3_bucket.upload(prof_logdir, "runs/exp1")
    child, parent = s3_bucket.url("runs/exp1"), s3_bucket.url("runs")
    before = _user(s3_bucket, "runs/exp1")
    rep = api.reduce_logdir(child, policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED] * 2, [o.reason for o in rep.outcomes]
    fp = api.scan(parent, write_cache=False)
    assert sorted(r.name for r in fp.runs) == ["exp1/r0", "exp1/r1"]
    assert nested_state_words("exp1/.tb-footprint") in fp.warnings
    api.reduce_logdir(parent, policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",))
    api.purge(parent, yes=True)
    outs = api.restore(child)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert _user(s3_bucket, "runs/exp1") == before


def test_a_nested_disk_logdirs_state_is_left_out_a_folder_named_like_one_is_not(tmp_path, prof_logdir):
    parent = prof_logdir.parent / "parent"
    parent.mkdir()
    child = parent / "exp1"
    os.rename(prof_logdir, child)
    rep = api.reduce_logdir(str(child), policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED] * 2, [o.reason for o in rep.outcomes]
    # a user's folder merely named like a state folder (nothing a verb writes in it) stays theirs
    mine = parent / "exp2" / ".tb-footprint"
    with synth.EventWriter(str(mine)) as w:
        w.scalar("loss", 0, 1.0)
    fp = scan(str(parent), use_cache=False, write_cache=False)
    names = sorted(r.name for r in fp.runs)
    assert names == ["exp1/r0", "exp1/r1", "exp2/.tb-footprint"], names
    assert nested_state_words("exp1/.tb-footprint") in fp.warnings
    assert not any(f.path.startswith("exp1/.tb-footprint/") for r in fp.runs for f in r.files)
    # the disk in use still counts the nested state's blocks (what the walk set aside is walked)
    assert any(p.endswith(os.path.join("exp1", ".tb-footprint")) for p in fp.disk.set_aside)
