"""Review R9 F6 (invariant 1): ``tb-footprint demo DIR --overwrite`` removes only what the previous
demo wrote, by its bytes, never by a name. The marker records each file's size and sha256; a file
that holds anything else now (the user's, listed in a marker planted or edited; a demo file the
user wrote to) refuses the overwrite, named, nothing changed; an old marker without digests removes
nothing; a marker that is not the user's own (a link, writable by others) is never trusted; the
state folder is dropped only when all it records is the demo's (a retired run of the user's is
the only copy of it); the staging folder is removed only when it is the demo's."""
import hashlib
import json
import math
import os

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.demo import MARKER, generate_demo
from tb_footprint_plugin.storage.paths import state_dir

SCALE = 0.02
STAGING = ".footprint-demo-staging"


def tree(root) -> dict:
    """Every file below ``root`` (state folder included): its size, mtime and sha256."""
    out = {}
    for d, _, files in os.walk(root):
        for n in files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns, hashlib.sha256(fh.read()).hexdigest())
    return out


def _user_run(target, name="mine"):
    with synth.EventWriter(str(target / name)) as w:
        for s in range(10):
            w.scalar("loss", s, math.exp(-s))
    for d, dirs, files in os.walk(target / name):
        for n in dirs + files:
            os.utime(os.path.join(d, n), (1_600_000_000, 1_600_000_000))
    (f,) = list((target / name).iterdir())
    return f


def _refused(target, match):
    with pytest.raises(FileExistsError, match=match):
        generate_demo(str(target), scale=SCALE, overwrite=True)


def test_r9_a_listed_user_file_and_a_demo_file_written_to_are_kept(tmp_path):
    target = tmp_path / "demo"
    generate_demo(str(target), scale=SCALE)
    mine = _user_run(target)
    marker = json.loads((target / MARKER).read_text())
    marker["files"].append(f"mine/{mine.name}")  # listed, no digest
    (target / MARKER).write_text(json.dumps(marker))
    demo_file = next(target / f for f in marker["files"] if "tfevents" in f and not f.startswith("mine/"))
    with open(demo_file, "ab") as f:
        f.write(b"records the user added to a demo run\n")
    before = tree(target)
    _refused(target, "hold other bytes now")
    assert tree(target) == before  # nothing removed, nothing written


def test_a_listed_file_with_its_true_digest_in_a_marker_not_ours_is_kept(tmp_path):
    """Anyone who can write a shared logdir's top can plant a marker naming a file they can read,
    with its true digest: a marker writable by others (or a link) is not the demo's."""
    target = tmp_path / "demo"
    generate_demo(str(target), scale=SCALE)
    mine = _user_run(target)
    data = mine.read_bytes()
    marker = json.loads((target / MARKER).read_text())
    rel = f"mine/{mine.name}"
    marker["files"].append(rel)
    marker.setdefault("digests", {})[rel] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (target / MARKER).write_text(json.dumps(marker))
    os.chmod(target / MARKER, 0o666)
    _refused(target, "writable by group or others")
    assert mine.read_bytes() == data
    os.remove(target / MARKER)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(marker))
    os.symlink(elsewhere, target / MARKER)
    _refused(target, "symbolic link")
    assert mine.read_bytes() == data and elsewhere.read_text() == json.dumps(marker)  # not written through


def test_an_old_marker_without_digests_removes_nothing(tmp_path):
    target = tmp_path / "demo"
    generate_demo(str(target), scale=SCALE)
    marker = json.loads((target / MARKER).read_text())
    marker.pop("digests", None)
    marker["version"] = 1
    (target / MARKER).write_text(json.dumps(marker))
    before = tree(target)
    _refused(target, "records no file digests")
    assert tree(target) == before


def test_a_retired_run_of_the_user_survives_the_overwrite(tmp_path):
    """A retirement's manifest lists no file: the vault holds the user's run, its only copy."""
    target = tmp_path / "demo"
    generate_demo(str(target), scale=SCALE)
    _user_run(target)
    rep = api.retire(str(target), api.retire_rule(runs=["mine"]), dry_run=False)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED]
    generate_demo(str(target), scale=SCALE, overwrite=True)
    assert [r["run"] for r in api.retired(str(target))] == ["mine"]


def test_a_reduced_demo_is_replaced_whole_and_its_state_dropped(tmp_path):
    """The demo's own reduction (files rewritten or compressed under new names) is the demo's:
    the overwrite removes what the reduction wrote too, and the tree is a fresh demo's."""
    fresh = tmp_path / "fresh"
    generate_demo(str(fresh), scale=SCALE)
    target = tmp_path / "demo"
    generate_demo(str(target), scale=SCALE)
    rep = api.reduce_logdir(str(target), policy="lossless", dry_run=False, runs=["resnet_torch", "jax_profile"],
                            verify_backends=("python",), quiet_period=0)
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    assert set(tree(target)) - set(tree(fresh)) - {f for f in tree(target) if f.startswith(".tb-footprint")}, \
        "the reduction wrote no file under a new name"
    generate_demo(str(target), scale=SCALE, overwrite=True)
    assert not os.path.exists(state_dir(str(target)))
    assert tree(target) == tree(fresh)


def test_a_staging_folder_not_the_demos_is_never_removed(tmp_path):
    target = tmp_path / "demo"
    (target / STAGING).mkdir(parents=True)
    (target / STAGING / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a staging folder this demo made"):
        generate_demo(str(target), scale=SCALE)
    assert (target / STAGING / "notes.txt").read_text() == "mine"
    os.remove(target / STAGING / "notes.txt")
    os.rmdir(target / STAGING)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, target / STAGING)
    with pytest.raises(FileExistsError, match="symbolic link"):
        generate_demo(str(target), scale=SCALE)
    assert os.listdir(outside) == []
