"""A reduction's restore refused because none of the files the reduction left is there while
files it never had stand at the run's path says what it sees, on every store (review R9's note
under F9): it cannot tell a run whose reduced files the user deleted, its untouched files kept,
from a new run of the same name, so it still refuses (``restore_blocked``, nothing changed, the
backup kept; ``retire_rules.new_run_refusal``), but its words (``output_gone_words``) no longer
call the run's own files "a new run": they name the first such file and the way to restore anyway
(move what stands there away, restore, put the run's files back), which is followed here on a
folder and on a bucket (moto) to the run as it was before the reduction."""
from __future__ import annotations

import math
import os
import shutil

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine.retire_rules import output_gone_words

NOTES = b"lr: 0.1, batch: 32\n"


def _write(run) -> None:
    with synth.EventWriter(str(run), timestamp=1_500_000_000) as w:
        for s in range(40):
            w.scalar("loss", s, math.exp(-s / 10.0))
            w.image("img", s, synth.make_png(8, 8, seed=s), 8, 8)
    (run / "notes.txt").write_bytes(NOTES)  # a file no reduction touches
    for d, dirs, files in os.walk(run):
        for n in dirs + files:
            os.utime(os.path.join(d, n), (1_500_000_000, 1_500_000_000))


def _tree(root) -> dict:
    out = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x != ".tb-footprint"]
        for n in files:
            with open(os.path.join(d, n), "rb") as f:
                out[os.path.relpath(os.path.join(d, n), root)] = f.read()
    return out


def _reduce(target, files) -> list:
    """The reduction's output: the names of the run it left changed or new (``files()``: the
    run's names and contents, before and after)."""
    before = files()
    rep = api.reduce_logdir(target, None, policy="archive", dry_run=False, quiet_period=0,
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], [o.reason for o in rep.outcomes]
    output = sorted(k for k, v in files().items() if k.startswith("r/") and before.get(k) != v)
    assert output and "r/notes.txt" not in output, output
    return output


def _refused(o) -> None:
    assert (o.status, o.code) == (Outcome.FAILED, Failure.RESTORE_BLOCKED), o.to_dict()
    assert o.reason == output_gone_words("r", "r/notes.txt"), o.reason


def test_disk_says_the_output_is_gone_and_names_the_runs_file(tmp_path):
    logdir = tmp_path / "logs"
    _write(logdir / "r")
    old = _tree(logdir)
    for p in _reduce(str(logdir), lambda: _tree(logdir)):
        os.unlink(logdir / p)  # the user deletes the reduced file; notes.txt stays
    now = _tree(logdir)
    (o,) = api.restore(str(logdir))
    _refused(o)
    assert _tree(logdir) == now and not api.unfinished(str(logdir))["unfinished_operations"]
    # the way the words give: what stands there moved away, restored, the run's files put back
    os.rename(logdir / "r", tmp_path / "aside")
    (o,) = api.restore(str(logdir))
    assert o.status == Outcome.RESTORED, o.reason
    shutil.move(str(tmp_path / "aside" / "notes.txt"), str(logdir / "r" / "notes.txt"))
    assert _tree(logdir) == old


def test_bucket_says_the_output_is_gone_and_names_the_runs_file(s3_bucket, tmp_path):
    _write(tmp_path / "src" / "r")
    url = s3_bucket.upload(tmp_path / "src", "logs")
    before = s3_bucket.hashes("logs")
    for p in _reduce(url, lambda: s3_bucket.hashes("logs")):
        s3_bucket.fs.rm(s3_bucket.key(f"logs/{p}"))
    s3_bucket.fs.invalidate_cache()
    now = s3_bucket.hashes("logs")
    (o,) = api.restore(url, run="r")
    _refused(o)
    assert s3_bucket.hashes("logs") == now
    # the way the words give: notes.txt moved away, restored, moved back
    s3_bucket.fs.mv(s3_bucket.key("logs/r/notes.txt"), s3_bucket.key("aside/notes.txt"))
    s3_bucket.fs.invalidate_cache()
    (o,) = api.restore(url, run="r")
    assert o.status == Outcome.RESTORED, o.reason
    s3_bucket.fs.mv(s3_bucket.key("aside/notes.txt"), s3_bucket.key("logs/r/notes.txt"))
    s3_bucket.fs.invalidate_cache()
    assert {k: v for k, v in s3_bucket.hashes("logs").items() if k.startswith("r/")} == \
        {k: v for k, v in before.items() if k.startswith("r/")}
