"""scan, plan and reduce of a bucket prefix nothing is stored under (a mistyped logdir) are refused as
a missing folder is (exit 2, naming the URL), not read as an empty logdir that "reduced 0 runs" (exit 0):
review R21 PD22. Nothing is written there. A prefix that holds a logdir is scanned as before."""
import pytest

from conftest import copy_real
from helpers_cli import run_cli


@pytest.mark.parametrize("verb", [["scan"], ["plan"], ["reduce", "--yes", "--quiet-period", "0"]])
def test_a_mistyped_bucket_prefix_is_refused(tmp_path, s3_bucket, verb):
    _refused(tmp_path, s3_bucket, verb)


@pytest.mark.parametrize("verb", [["plan"]])
def test_on_every_store(tmp_path, bucket, verb):
    """The one look (``RemoteFS.exists``) tells an empty prefix from a logdir on S3, GCS and Azure."""
    _refused(tmp_path, bucket, verb)
    ok = run_cli("plan", bucket.url("there"))
    assert ok.returncode == 0, ok.stdout + ok.stderr


def _refused(tmp_path, s3_bucket, verb):
    copy_real("tf/keras_profiled/train", tmp_path / "ld" / "a")
    url = s3_bucket.upload(tmp_path / "ld", "there")
    typo = url.rstrip("/") + "-missing"
    out = run_cli(verb[0], typo, *verb[1:])
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"logdir {typo}: nothing is stored under this prefix" in out.stderr, out.stderr
    assert not s3_bucket.hashes("there-missing")  # nothing written at the mistyped prefix
    if verb == ["scan"]:
        ok = run_cli("scan", url)
        assert ok.returncode == 0 and " in 1 runs" in ok.stdout, ok.stdout + ok.stderr
