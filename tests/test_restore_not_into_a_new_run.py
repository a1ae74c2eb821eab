"""A restore never merges an old run into a new run of the same name, on every store (review R9 F4,
F7; issue #26 "one rule for every store").

A run reduced (or retired), then deleted by the user and written again under the same name (an
experiment re-run): putting the old run's files back would mix them into the new run, and
TensorBoard would then draw the old and the new run's points of the same tags as one series.
A disk's unretire refused this already ("something stands there now (a new run of the same
name?); move it away first — nothing was changed"); a bucket's unretire put the old objects back
beside the new ones, and a reduction's restore did so on both stores. Now each refuses with those
words (``restore_blocked``; a reduction's restore in words saying what it sees, ``output_gone_words``:
it cannot tell a new run from its own run's untouched files), nothing changed, the backup kept: once the new run is moved away the
restore brings the old run back. A run folder simply deleted (nothing there) still comes back.
"""
import math
import os
import shutil

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine.retire_rules import output_gone_words

WORDS = "something stands there now (a new run of the same name?); move it away first — nothing was changed"


def _write(run, ts, seed, images=True):
    with synth.EventWriter(str(run), timestamp=ts) as w:
        for s in range(40):
            w.scalar("loss", s, math.exp(-s / 10.0) + seed)
            if images:
                w.image("img", s, synth.make_png(8, 8, seed=s + seed), 8, 8)
    for d, dirs, files in os.walk(run):
        for n in dirs + files:
            os.utime(os.path.join(d, n), (ts, ts))


def _tree(root):
    out = {}
    for d, _dirs, files in os.walk(root):
        for n in files:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def _reduce(target):
    rep = api.reduce_logdir(target, None, policy="archive", dry_run=False, quiet_period=0,
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], [o.reason for o in rep.outcomes]
    return rep.outcomes[0].op_id


def _refused_as_a_new_run(o, run):
    assert o.status == Outcome.FAILED and o.code == Failure.RESTORE_BLOCKED, (o.status, o.code, o.reason)
    assert o.reason == f"{run}: {WORDS}", o.reason


def _refused_as_output_gone(o, run, names):
    """A reduction's restore says what it sees (``output_gone_words``): none of its files there,
    one of ``names`` (the new run's) standing; it cannot tell a new run from its own files kept."""
    assert o.status == Outcome.FAILED and o.code == Failure.RESTORE_BLOCKED, (o.status, o.code, o.reason)
    assert o.reason in {output_gone_words(run, n) for n in names}, o.reason


# -- a reduction's restore (F7) ---------------------------------------------------------------

def test_disk_restore_of_a_reduction_refuses_a_new_run_of_that_name(tmp_path):
    logdir = tmp_path / "logs"
    run = logdir / "r"
    _write(run, 1_500_000_000, 0)
    old = _tree(run)
    _reduce(str(logdir))
    shutil.rmtree(run)
    _write(run, 1_600_000_000, 5)  # re-run under the same name
    new = _tree(run)
    (o,) = api.restore(str(logdir))
    _refused_as_output_gone(o, "r", [f"r/{n}" for n in new])
    assert _tree(run) == new, "the old run's originals were merged into the new run"
    assert not api.unfinished(str(logdir))["unfinished_operations"]
    # the backup kept: with the new run moved away the old run comes back, byte for byte
    os.rename(run, tmp_path / "new-r")
    (o,) = api.restore(str(logdir))
    assert o.status == Outcome.RESTORED, o.reason
    assert _tree(run) == old


def test_disk_restore_of_a_deleted_run_brings_it_back(tmp_path):
    logdir = tmp_path / "logs"
    run = logdir / "r"
    _write(run, 1_500_000_000, 0)
    old = _tree(run)
    _reduce(str(logdir))
    shutil.rmtree(run)
    (o,) = api.restore(str(logdir))
    assert o.status == Outcome.RESTORED, o.reason
    assert _tree(run) == old


def test_disk_restore_of_a_run_that_went_on_keeps_merging_its_records(tmp_path):
    """The reduced file still there (the run itself written on, a new event file beside it): its
    own run, restored as before, the new file left as it is."""
    logdir = tmp_path / "logs"
    run = logdir / "r"
    _write(run, 1_500_000_000, 0)
    old = _tree(run)
    _reduce(str(logdir))
    _write(run, 1_600_000_000, 5, images=False)  # the job resumed: a new event file beside the reduced one
    (o,) = api.restore(str(logdir))
    assert o.status == Outcome.RESTORED, o.reason
    now = _tree(run)
    assert {k: v for k, v in now.items() if k in old} == old and len(now) == len(old) + 1


def _s3_reduced(s3_bucket, tmp_path, prefix):
    _write(tmp_path / "src" / "r", 1_500_000_000, 0)
    url = s3_bucket.upload(tmp_path / "src", prefix)
    before = s3_bucket.hashes(prefix)
    _reduce(url)
    return url, before


def _put_new_run(s3_bucket, tmp_path, prefix, run):
    _write(tmp_path / "new" / run, 1_700_000_000, 5)
    names = []
    for f in (tmp_path / "new" / run).iterdir():
        s3_bucket.fs.pipe_file(s3_bucket.key(f"{prefix}/{run}/{f.name}"), f.read_bytes())
        names.append(f"{run}/{f.name}")
    s3_bucket.fs.invalidate_cache()
    return names


def test_bucket_restore_of_a_reduction_refuses_a_new_run_of_that_name(s3_bucket, tmp_path):
    url, before = _s3_reduced(s3_bucket, tmp_path, "logs")
    for k in [k for k in s3_bucket.hashes("logs") if k.startswith("r/")]:
        s3_bucket.fs.rm(s3_bucket.key(f"logs/{k}"))
    new = _put_new_run(s3_bucket, tmp_path, "logs", "r")
    now = s3_bucket.hashes("logs")
    (o,) = api.restore(url, run="r")
    _refused_as_output_gone(o, "r", new)
    assert s3_bucket.hashes("logs") == now, "the old run's originals were merged into the new run"
    # the backup kept: with the new run moved away the old run comes back
    for k in new:
        s3_bucket.fs.rm(s3_bucket.key(f"logs/{k}"))
    s3_bucket.fs.invalidate_cache()
    (o,) = api.restore(url, run="r")
    assert o.status == Outcome.RESTORED, o.reason
    assert {k: v for k, v in s3_bucket.hashes("logs").items() if k.startswith("r/")} == \
        {k: v for k, v in before.items() if k.startswith("r/")}


def test_bucket_restore_of_a_deleted_run_brings_it_back(s3_bucket, tmp_path):
    url, before = _s3_reduced(s3_bucket, tmp_path, "gone")
    for k in [k for k in s3_bucket.hashes("gone") if k.startswith("r/")]:
        s3_bucket.fs.rm(s3_bucket.key(f"gone/{k}"))
    s3_bucket.fs.invalidate_cache()
    (o,) = api.restore(url, run="r")
    assert o.status == Outcome.RESTORED, o.reason
    assert {k: v for k, v in s3_bucket.hashes("gone").items() if k.startswith("r/")} == \
        {k: v for k, v in before.items() if k.startswith("r/")}


# -- a retirement's restore (F4) --------------------------------------------------------------

def test_bucket_unretire_refuses_a_new_run_of_that_name_as_a_disk_does(s3_bucket, tmp_path):
    _write(tmp_path / "src" / "train", 1_600_000_000, 0, images=False)
    # the disk's words first, the same retirement and new run on a folder
    shutil.copytree(tmp_path / "src", tmp_path / "disk")
    rep = api.retire(str(tmp_path / "disk"), api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], [o.reason for o in rep.outcomes]
    _write(tmp_path / "disk" / "train", 1_700_000_000, 5, images=False)
    (disk,) = api.restore(str(tmp_path / "disk"), run="train")
    _refused_as_a_new_run(disk, "train")

    url = s3_bucket.upload(tmp_path / "src", "logs")
    before = s3_bucket.hashes("logs")
    rep = api.retire(url, api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], [o.reason for o in rep.outcomes]
    new = _put_new_run(s3_bucket, tmp_path, "logs", "train")  # written after the retirement
    now = s3_bucket.hashes("logs")
    (o,) = api.restore(url, run="train")
    assert (o.status, o.code, o.reason) == (disk.status, disk.code, disk.reason)
    assert s3_bucket.hashes("logs") == now, "the retired run was put back INTO the new run of its name"
    assert [r["run"] for r in api.retired(url)] == ["train"]
    # still retired, its copies kept: with the new run moved away it comes back
    for k in new:
        s3_bucket.fs.rm(s3_bucket.key(f"logs/{k}"))
    s3_bucket.fs.invalidate_cache()
    (o,) = api.restore(url, run="train")
    assert o.status == Outcome.RESTORED, o.reason
    assert {k: v for k, v in s3_bucket.hashes("logs").items() if k.startswith("train/")} == \
        {k: v for k, v in before.items() if k.startswith("train/")}
