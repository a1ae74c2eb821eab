"""A bucket logdir's plan and history say what the logdir and its vault store now, as its reduce's
report does (issue #27 item 4, #28 item 1): the plan from the listing its scan made (no listing
more), the history with the columns a local one has (removed, freed now, freed after purge, the
backup's state) and "stored now" as its header, in the word a bucket's figure is."""
import json
import re
from urllib.parse import parse_qs, urlsplit

import pytest

from helpers_cli import run_cli as cli
from test_objstore import DROP_PROFILES, demo_logdir  # noqa: F401  (a fixture)
from tb_footprint_plugin import api
from tb_footprint_plugin.fmt import human_bytes


def stored(bucket, prefix: str) -> int:
    """Bytes of every object under ``prefix``, as the store lists them (read past the tool)."""
    bucket.fs.invalidate_cache()
    return sum(int(i.get("size") or 0) for i in bucket.fs.find(bucket.key(prefix), detail=True).values()
               if i.get("type") != "directory")


def reduced(bucket, demo_logdir, **kw) -> str:  # noqa: F811
    url = bucket.upload(demo_logdir, "logs")
    rep = api.reduce_logdir(url, policy=DROP_PROFILES, dry_run=False, quiet_period=0, **kw)
    assert rep.ok and any(o.status == "verified" for o in rep.outcomes), [o.to_dict() for o in rep.outcomes]
    return url


def test_a_bucket_plan_says_the_bytes_its_prefix_and_vault_store(bucket, demo_logdir):  # noqa: F811
    url = reduced(bucket, demo_logdir)  # the vault (copies, manifests) is under the logdir's prefix
    before = stored(bucket, "logs")
    p = api.plan(url, "archive", quiet_period=0)
    assert p.disk_in_use_bytes == before, (p.disk_in_use_bytes, before)
    assert p.to_dict()["disk_in_use_bytes"] == before
    assert p.cost["scan"]["list"] == 1  # the scan's one listing, which the figure is summed from


def test_a_vault_in_another_prefix_is_counted_from_the_scans_listing_of_it(bucket, demo_logdir):  # noqa: F811
    vault = bucket.url("vault")
    url = reduced(bucket, demo_logdir, backup_dir=vault)
    assert stored(bucket, "vault") > 0
    want = stored(bucket, "logs") + stored(bucket, "vault")
    p = api.plan(url, "archive", quiet_period=0, backup_dir=vault)
    assert p.disk_in_use_bytes == want, (p.disk_in_use_bytes, want)
    assert p.cost["scan"]["list"] == 2  # the logdir's and the vault's, as the scan made before


@pytest.fixture
def counted(s3_bucket, monkeypatch):
    """The S3 server behind the counting proxy (tests/faulty_proxy.py): the prefix of every
    listing request the code under test sends."""
    from faulty_proxy import FaultyProxy, Rule

    proxy = FaultyProxy(upstream=s3_bucket.server.endpoint).start()
    listed = []

    def record(method, path):
        q = parse_qs(urlsplit(path).query)
        if method == "GET" and ("list-type" in q or "prefix" in q):
            listed.append(q.get("prefix", [""])[0])
        return False  # never a fault: only watching

    proxy.rules.append(Rule(match=record, fault=(500, b""), times=0))
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("S3_ENDPOINT", proxy.endpoint)
    try:
        yield s3_bucket, proxy, listed
    finally:
        proxy.stop()


def test_the_plans_stored_figure_costs_no_listing_more(counted, demo_logdir):  # noqa: F811
    bucket, proxy, listed = counted
    url = reduced(bucket, demo_logdir)
    proxy.reset()
    listed.clear()
    p = api.plan(url, "archive", quiet_period=0)
    assert listed == ["logs/"], listed  # one listing of the logdir's prefix (one page), none of its vault
    assert p.disk_in_use_bytes == stored(bucket, "logs")


def test_bucket_history_has_the_local_columns_and_the_cli_says_stored(s3_bucket, demo_logdir):  # noqa: F811
    url = reduced(s3_bucket, demo_logdir)
    red = [e for e in api.history(url) if e.get("kind") == "reduce"]
    assert red
    for e in red:
        removed = e["before"] - e["after"]
        assert e["removed_from_logdir_bytes"] == removed > 0, e
        # drop-only: every removed object has its whole copy in the vault until purge
        m = api.operation(url, e["op_id"])
        copies = sum(f["size"] for f in m["files"])
        assert e["freed_after_purge_bytes"] == copies and e["freed_now_bytes"] == max(0, removed - copies), e
        assert e["backup"] == "kept"
    out = cli("history", url)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("stored now (logdir + vault): "), out.stdout
    assert lines[0].split(": ", 1)[1].split(";")[0] == human_bytes(stored(s3_bucket, "logs")), lines[0]
    head = next(x for x in lines if x.startswith("TIME"))
    purge_col = head.index("AFTER PURGE") + len("AFTER PURGE")
    for e in red:
        row = next(x for x in lines if e["op_id"] in x)
        assert row[:purge_col].rstrip().endswith(human_bytes(e["freed_after_purge_bytes"])), (row, e)
    plan = cli("plan", url, "--policy", "archive", "--quiet-period", "0")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    said = re.search(r"^stored now \(logdir \+ vault\): (.+)$", plan.stdout, re.M)
    assert said and said.group(1).strip() == human_bytes(stored(s3_bucket, "logs")), plan.stdout
    js = json.loads(cli("plan", url, "--policy", "archive", "--quiet-period", "0", "--json").stdout)
    assert js["disk_in_use_bytes"] == stored(s3_bucket, "logs")
    # after purge the copies are gone: what the logdir lost is freed now, nothing is to come
    assert api.purge(url, yes=True).freed_bytes > 0
    for e in [e for e in api.history(url) if e.get("kind") == "reduce"]:
        assert e["backup"] == "purged" and e["freed_after_purge_bytes"] == 0
        assert e["freed_now_bytes"] == e["removed_from_logdir_bytes"], e


def test_a_vault_in_another_prefix_costs_no_listing_more_either(counted, demo_logdir):  # noqa: F811
    bucket, proxy, listed = counted
    vault = bucket.url("vault")
    url = reduced(bucket, demo_logdir, backup_dir=vault)
    proxy.reset()
    listed.clear()
    p = api.plan(url, "archive", quiet_period=0, backup_dir=vault)
    # the scan's two listings (it lists the vault for its backups' bytes): the whole vault in it
    assert sorted(listed) == ["logs/", "vault/"], listed
    assert p.disk_in_use_bytes == stored(bucket, "logs") + stored(bucket, "vault")


def test_bucket_status_says_freed_now_as_the_history_sums_it(s3_bucket, demo_logdir):  # noqa: F811
    """A bucket's status and the history's header said no "freed now" (None): the per-operation
    figures the history has, summed, as a local status sums its own."""
    url = reduced(s3_bucket, demo_logdir)
    red = [e for e in api.history(url) if e.get("kind") == "reduce"]
    st = api.status(url)
    assert st["freed_now_bytes"] == sum(e["freed_now_bytes"] for e in red)
    assert api.disk_numbers(url)["freed_now_bytes"] == st["freed_now_bytes"]
    out = cli("status", url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"^  stored now \(logdir \+ vault\): ", out.stdout, re.M), out.stdout
    assert "disk in use now" not in out.stdout
