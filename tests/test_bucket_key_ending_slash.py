"""A bucket object whose key ends in '/' and holds bytes (S3, GCS and Azure all take one; only a
0-byte one is a folder marker, review R10 F2) is a name the engine never acts on, and never
misnames. The listing used to strip the '/': 'm/x/' was scanned and planned as 'm/x', a key that
does not exist (or, on S3, another object), and a retirement's copy looked for 'm/x' and skipped
the run "changed or gone since the plan", neither true.

Now the key keeps its own name everywhere (the listing, ``RemoteFS.path`` refuses it rather than
dropping the '/'): the scan counts and names 'm/x/'; a retirement of its run is refused with a
code, naming the key, and nothing moves; a reduction of the run reduces its event file and leaves
the key as it was; its restore gives every key back as it was. On S3, GCS (emulator) and Azurite."""
from __future__ import annotations

import math

import pytest

from test_retire_bucket_folder_markers import _put_raw, _raw_keys
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Failure, Outcome

ODD = "logs/m/x/"
DATA = b"bytes under a key that ends in a slash\n"


def _logdir(bucket, tmp_path) -> str:
    src = tmp_path / "src"
    with synth.EventWriter(str(src / "m")) as w:
        for s in range(60):
            w.scalar("loss", s, math.exp(-s / 15.0))
            w.image("img", s, synth.make_png(8, 8, seed=s), 8, 8)
    url = bucket.upload(src, "logs")
    _put_raw(bucket, ODD, DATA)
    return url


def test_the_scan_names_the_key_as_stored(bucket, tmp_path):
    url = _logdir(bucket, tmp_path)
    (run,) = api.scan(url).runs
    names = {f.path: f.size for f in run.files}
    assert names.get("m/x/") == len(DATA), names
    assert "m/x" not in names, names


@pytest.mark.parametrize("folder", [False, True], ids=["copies", "blob-folder"])
def test_a_retirement_of_its_run_is_refused_naming_the_key_and_nothing_moves(bucket, tmp_path, folder):
    url = _logdir(bucket, tmp_path)
    before = _raw_keys(bucket)
    vault = str(tmp_path / "vault") if folder else None
    (o,) = api.retire(url, api.retire_rule(runs=["m"]), dry_run=False, backup_dir=vault, quiet_period=0).outcomes
    assert o.status in (Outcome.SKIPPED, Outcome.ROLLED_BACK, Outcome.FAILED) and o.code == Failure.REFUSED, \
        (o.status, o.code, o.reason)
    assert "m/x/" in o.reason and "changed or gone" not in o.reason, o.reason
    assert _raw_keys(bucket) == before
    assert not api.unfinished(url)["unfinished_operations"]


def test_beside_the_key_without_the_slash_both_are_named_and_neither_moves(s3_bucket, tmp_path):
    """S3 holds 'm/x' and 'm/x/' as two objects: the listing named both 'm/x', one hiding the other."""
    url = _logdir(s3_bucket, tmp_path)
    _put_raw(s3_bucket, "logs/m/x", b"the other object\n")
    (run,) = api.scan(url).runs
    names = {f.path: f.size for f in run.files}
    assert (names.get("m/x"), names.get("m/x/")) == (len(b"the other object\n"), len(DATA)), names
    before = _raw_keys(s3_bucket)
    (o,) = api.retire(url, api.retire_rule(runs=["m"]), dry_run=False, quiet_period=0).outcomes
    assert o.code == Failure.REFUSED and "m/x/" in o.reason, (o.status, o.code, o.reason)
    assert _raw_keys(s3_bucket) == before


def test_a_reduction_leaves_the_key_and_its_restore_gives_every_key_back(bucket, tmp_path):
    """Guard (passes before too): a reduction acts on the event file alone."""
    url = _logdir(bucket, tmp_path)
    before = _raw_keys(bucket)
    rep = api.reduce_logdir(url, None, policy="archive", dry_run=False, quiet_period=0,
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], [o.reason for o in rep.outcomes]
    now = _raw_keys(bucket)
    assert now[ODD] == before[ODD] and now != before
    (o,) = api.restore(url)
    assert o.status == Outcome.RESTORED, (o.status, o.code, o.reason)
    assert _raw_keys(bucket) == before
