"""Review R10 F3: JSON that is untrusted input, nested too deeply (200 kB of ``[``, far below any
size cap), made ``json`` raise ``RecursionError`` — not a ``ValueError`` — and readers that read
around a damaged document on ``ValueError`` let it stop the verb, naming no file. One rule now
(``storage.jsondoc.loads``: a ``ValueError``), so each reader's own handling of a damaged
document applies: a bucket's planted manifest is named and read around, its scan cache ignored,
a lease read as held by nobody, a policy file refused naming it, a demo marker refused naming it."""
import os

import boto3
import pytest

from test_shard_emptied_runs_bucket import _logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.demo import MARKER, generate_demo
from tb_footprint_plugin.engine import lease
from tb_footprint_plugin.storage import jsondoc

NESTED = b"[" * 200000


def test_the_one_rule_makes_too_deep_a_value_error():
    with pytest.raises(ValueError):
        jsondoc.loads(NESTED)
    assert jsondoc.loads(b'{"a": [1]}') == {"a": [1]}


def _put(s3_bucket, rel, body):
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    s3.put_object(Bucket=s3_bucket.name, Key=f"logs/.tb-footprint/{rel}", Body=body)


@pytest.fixture
def reduced(s3_bucket, tmp_path):
    url = s3_bucket.upload(_logdir(tmp_path / "logs"), "logs")
    rep = api.reduce_logdir(url, dry_run=False, runs=["tb7"], verify_backends=("python",), quiet_period=0)
    assert [o.status for o in rep.outcomes] == ["verified"], [o.reason for o in rep.outcomes]
    return url


def test_a_planted_manifest_nested_too_deep_is_read_around(s3_bucket, reduced):
    _put(s3_bucket, "manifests/20260101T000000-abcdef.json", NESTED)
    assert api.status(reduced) is not None
    api.history(reduced)
    outs = api.restore(reduced, run="tb7")
    by = sorted((o.status.value, o.reason) for o in outs)
    assert [s for s, _ in by] == ["failed", "restored"], by
    assert "20260101T000000-abcdef.json" in by[0][1], by  # the damaged one named, its backups kept


def test_a_planted_scan_cache_nested_too_deep_is_ignored(s3_bucket, reduced):
    _put(s3_bucket, "scan-cache.json", NESTED)
    assert api.scan(reduced).runs


def test_a_lease_nested_too_deep_is_held_by_nobody(tmp_path):
    p = tmp_path / "lock.json"
    p.write_bytes(NESTED)
    assert lease.read_lease(str(p)) is None


def test_a_policy_file_nested_too_deep_is_refused_naming_it(tmp_path):
    f = tmp_path / "p.json"
    f.write_bytes(NESTED)
    with pytest.raises(api.PolicyError, match="p.json"):
        api.get_policy(str(f))


def test_a_demo_marker_nested_too_deep_is_refused_naming_it(tmp_path):
    target = tmp_path / "demo"
    generate_demo(str(target), scale=0.05)
    (target / MARKER).write_bytes(NESTED)
    with pytest.raises(FileExistsError, match="nothing was changed") as e:
        generate_demo(str(target), scale=0.05, overwrite=True)
    assert MARKER in str(e.value)
