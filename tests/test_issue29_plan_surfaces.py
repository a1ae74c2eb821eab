"""Issue 29, "Plan = outcome" on the two other surfaces: what the CLI's ``plan --json`` and the
tab's ``/plan`` say each run will weigh is what ``reduce --yes --json`` and the tab's reduce job
leave, to the byte, over every vendored real fixture plus the synthetic cases the rewrite's rules
treat specially (a tag restarting across three files, duplicate steps, wall times going
backwards, empty and truncated files, repeated identical graphs) in one logdir; and the bytes
each run holds on disk afterwards are those numbers. ``tests/test_plan_outcome.py`` holds the
same through the API.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REAL_LOGDIRS, REPO, copy_real
from test_plan_outcome import _age, _events, _graph, _image, _scalar, write_oddities
from test_plugin_routes import App

POLICIES = ["archive", "lossless"]


def _mixed_logdir(root):
    """Every real fixture under its own name, and the synthetic oddities beside them."""
    ld = root / "logdir"
    for name in REAL_LOGDIRS:
        copy_real(name, ld / name)
    syn = ld / "syn"
    for r in ("restart", "graphs"):
        (syn / r).mkdir(parents=True)
    for k in range(3):  # torch.utils.tensorboard: an image tag restarting at step 999 in each file
        _events(syn / "restart" / f"events.out.tfevents.{1795990000 + k}.host.{k}",
                [_image("img", s, 1795990000.0 + k * 2000 + s, seed=s) for s in range(0, 1000, 3)])
    write_oddities(syn)
    _events(syn / "graphs" / "events.out.tfevents.1.h", [_graph(0) for _ in range(7)]
            + [_scalar("loss", s, 1795990000.0 + s) for s in range(20)])
    _age(syn)
    return ld


def _on_disk(ld, run, runs):
    """Bytes of the run's own files now (a nested run's and the state folder's left out)."""
    base = ld / run if run != "." else ld
    total = 0
    for d, dirs, files in os.walk(base):
        rel = os.path.relpath(d, ld)
        dirs[:] = [x for x in dirs if not x.startswith(".tb-footprint")
                   and os.path.normpath(os.path.join(rel, x)) not in runs]
        total += sum(os.lstat(os.path.join(d, f)).st_size for f in files)
    return total


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", *args], capture_output=True, text=True,
                       env=env, cwd=str(REPO), timeout=600)
    return p


@pytest.mark.parametrize("policy", POLICIES)
def test_cli_plan_json_equals_reduce_json_and_the_disk(tmp_path, policy):
    ld = _mixed_logdir(tmp_path)
    p = _cli("plan", str(ld), "--policy", policy, "--json")
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)
    planned = {r["run"]: r for r in plan["runs"]}
    assert len(planned) >= 14 and "syn/restart" in planned, sorted(planned)
    assert any(not r.get("skipped") and r["expected_after_bytes"] < r["bytes_before"] for r in plan["runs"])
    r = _cli("reduce", str(ld), "--policy", policy, "--yes", "--json")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    rep = json.loads(r.stdout)
    got = {o["run"]: o for o in rep["outcomes"]}
    assert sorted(got) == sorted(planned)
    for run, rp in planned.items():
        o = got[run]
        assert o["status"] in ("verified", "skipped"), o
        assert (run, o["bytes_after"]) == (run, rp["expected_after_bytes"]), (rp, o)
        assert (run, _on_disk(ld, run, set(planned))) == (run, rp["expected_after_bytes"])
    assert rep["expected_after_bytes"] == plan["expected_after_bytes"]


@pytest.mark.parametrize("policy", POLICIES)
def test_tab_plan_route_equals_the_reduce_jobs_bytes_and_the_disk(tmp_path, policy):
    ld = _mixed_logdir(tmp_path)
    app = App(ld)
    try:
        r = app.get("/plan", query_string={"policy": policy})
        assert r.status_code == 200, r.get_data(as_text=True)
        planned = {rp["run"]: rp for rp in r.get_json()["runs"]}
        assert "syn/restart" in planned and "torch/profiled" in planned, sorted(planned)
        todo = sorted(n for n, rp in planned.items() if rp["actions"] and not rp.get("skipped"))
        assert todo
        r = app.post("/reduce", {"runs": sorted(planned), "policy": policy})
        assert r.status_code == 202, r.get_data(as_text=True)
        job = app.wait_job(r.get_json()["job"]["id"], timeout=600)
        assert job["state"] == "done", job
        got = {o["run"]: o for o in job["result"]["outcomes"]}
        assert sorted(n for n, o in got.items() if o["status"] == "verified") == todo
        for run, rp in planned.items():
            assert (run, got[run]["bytes_after"]) == (run, rp["expected_after_bytes"]), (rp, got[run])
            assert (run, _on_disk(ld, run, set(planned))) == (run, rp["expected_after_bytes"])
    finally:
        app.close()


def test_policies_text_says_lossless_drops_repeated_graphs():
    """``lossless`` rewrites event files to drop byte-identical repeated graphs: ``policies``
    says so, in its text and in the list of what it does, on the CLI and in the tab's JSON."""
    p = _cli("policies")
    assert p.returncode == 0, p.stderr
    block = p.stdout.split("\nkeep-latest")[0]
    assert block.startswith("lossless") and "repeated graphs" in block, block
    assert any(line.strip().startswith("rewrite") and "repeated graphs" in line for line in block.splitlines()), block
    js = {d["name"]: d for d in json.loads(_cli("policies", "--json").stdout)}
    assert js["lossless"]["content"].get("dedupe_graphs") is True
    assert "repeated graphs" in js["lossless"]["description"]


def test_no_policy_text_claims_the_opt_in_graph_attribute_drop():
    """``strip_large_graph_attrs`` is opt-in: a built-in policy without it does not say it drops
    graph attribute values (archive's text said so while its reduce kept them)."""
    for d in json.loads(_cli("policies", "--json").stdout):
        says = "too large" in d["description"] or "attribute values" in d["description"]
        assert says == bool(d["content"].get("strip_large_graph_attrs")), d


def test_fidelity_lines_put_the_loss_first_local_and_on_a_bucket(tmp_path, s3_bucket):
    """"images: 20 of 500 records kept (the default dashboard's view)": what stays first, then the
    rule, at most LINE_MAX characters, what explains it in the parallel details — from the
    rewrite's own selection (local) and from the estimate a bucket plan makes alike."""
    import re

    from tb_footprint_plugin import api
    from tb_footprint_plugin.plan.content import LINE_MAX

    logdir = copy_real("tf/summary_mix", tmp_path / "logdir")
    url = s3_bucket.upload(logdir, "logs")
    caps = {"name": "caps", "base": "archive", "content": {"keep_per_tag": {"images": 5}}}
    for where in (str(logdir), url):
        for policy, rule in (("archive", r"\(the default dashboard's view\)"), (caps, r"\(at most 5 (records )?per tag\)")):
            (rp,) = [r for r in api.plan(where, policy, quiet_period=0).runs if r.run == "."]
            assert len(rp.fidelity) == len(rp.fidelity_details), rp.fidelity
            assert all(len(line) <= LINE_MAX for line in rp.fidelity), rp.fidelity
            assert not any(line.endswith("…") for line in rp.fidelity), rp.fidelity  # none cut short
            assert any(re.match(r"images: ≈?[\d,]+ of [\d,]+ records kept " + rule + "$", line)
                       for line in rp.fidelity), (where, rp.fidelity)


@pytest.mark.parametrize("policy", POLICIES)
def test_bucket_plan_equals_reduce_to_the_byte(tmp_path, s3_bucket, policy):
    """On an object store the event files' rewrite is planned by its own selection too (the run's
    event files streamed into scratch, as the reduce stages them): nothing estimated, and each
    run's bytes after are what the reduce leaves — the fixtures and the synthetic oddities."""
    from tb_footprint_plugin import api

    ld = _mixed_logdir(tmp_path)
    url = s3_bucket.upload(ld, "logs")
    plan = api.plan(url, policy, quiet_period=0)
    assert "syn/restart" in {rp.run for rp in plan.runs}
    assert [a.path for rp in plan.runs for a in rp.actions if a.estimated] == []
    rep = api.reduce_logdir(url, policy=policy, dry_run=False, quiet_period=0, verify_backends=("python",))
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    got = {o.run: o for o in rep.outcomes}
    for rp in plan.runs:
        o = got[rp.run]
        assert o.status in ("verified", "skipped"), o.to_dict()
        assert (rp.run, o.bytes_after) == (rp.run, rp.expected_after_bytes), (rp.to_dict(), o.to_dict())
    assert sum(o.bytes_after for o in rep.outcomes) == plan.expected_after_bytes
