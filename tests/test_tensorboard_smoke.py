"""A real ``tensorboard`` process with the installed plugin, on a copy of the demo logs.

Needs the package installed (``pip install -e .``) so TensorBoard finds the ``footprint`` entry
point. Reads ``/data/plugins_listing``, the plugin's JSON routes, its ES modules (following
every import), and checks the security layer over real HTTP.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import subprocess
import time
import urllib.parse

import pytest

PREFIX = "/data/plugin/footprint"


def _has_entry_point() -> bool:
    return any(e.name == "footprint" for e in importlib.metadata.entry_points(group="tensorboard_plugins"))


pytestmark = pytest.mark.skipif(
    not _has_entry_point(),
    reason="the 'footprint' TensorBoard entry point is not installed: run `pip install -e .` first",
)


from conftest import copy_real  # noqa: E402
from tbproc import TensorBoard, free_port, make_demo, tensorboard_cmd  # noqa: E402

def shas(root):
    out = {}
    for dirpath, dirnames, filenames in os.walk(str(root)):
        dirnames[:] = [d for d in dirnames if d != ".tb-footprint"]
        for n in filenames:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, str(root))] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return make_demo(tmp_path_factory.mktemp("smoke") / "demo_logs")


@pytest.fixture(scope="module")
def tb(demo):
    t = TensorBoard(demo)
    yield t
    t.stop()


def test_plugins_listing(tb):
    listing = tb.json("/data/plugins_listing")
    fp = listing["footprint"]
    assert fp["enabled"] is True
    assert fp["tab_name"] == "Footprint"
    assert fp["loading_mechanism"] == {"type": "IFRAME", "module_path": PREFIX + "/index.js"}


def test_plugin_entry_and_every_module(tb):
    status, headers, body = tb.request("GET", "/data/plugin_entry.html?name=footprint")
    assert status == 200 and b'import("./index.js")' in body
    assert "script-src" in headers["Content-Security-Policy"]
    seen, todo = set(), ["index.js"]
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        seen.add(rel)
        status, headers, body = tb.request("GET", f"{PREFIX}/{rel}")
        assert status == 200, rel
        assert headers["Content-Type"].startswith("text/javascript"), (rel, headers["Content-Type"])
        assert headers["X-Content-Type-Options"] == "nosniff"
        text = body.decode("utf-8")
        base = os.path.dirname(rel)
        for spec in re.findall(r"""^import\s[^'"]*['"](\.[^'"]+)['"]""", text, re.M):
            todo.append(os.path.normpath(os.path.join(base, spec)))
    assert {"index.js", "model.js", "views/overview.js", "views/check.js"} <= seen
    status, headers, _ = tb.request("GET", f"{PREFIX}/style.css")
    assert status == 200 and headers["Content-Type"].startswith("text/css")


def test_json_routes(tb, demo):
    status = tb.json(PREFIX + "/status")
    assert status["logdir"] == str(demo)
    assert status["actions"]["enabled"] is True
    runs = tb.json(PREFIX + "/runs?wait=60")
    sizes = [r["total_bytes"] for r in runs["runs"]]
    assert sizes and sizes == sorted(sizes, reverse=True)
    assert runs["scan"]["scanned_at"] > 0
    assert runs["reclaimable_bytes"] > 0
    assert tb.json(PREFIX + "/summary")["total_bytes"] == runs["total_bytes"]
    top = runs["runs"][0]["name"]
    detail = tb.json(PREFIX + "/run?" + urllib.parse.urlencode({"run": top}))
    assert detail["run"]["name"] == top and detail["run"]["categories"]
    plan = tb.json(PREFIX + "/plan?" + urllib.parse.urlencode({"run": top, "policy": "lossless"}))
    assert plan["dry_run"] is True and plan["runs"][0]["run"] == top
    assert {p["name"] for p in tb.json(PREFIX + "/policies")["policies"]} >= {"archive", "lossless"}
    assert tb.json(PREFIX + "/history") == {"entries": [], "total": 0, "total_exact": True}
    assert tb.json(PREFIX + "/operations") == {"operations": [], "kept_blobs": []}
    assert tb.json(PREFIX + "/jobs") == {"jobs": []}
    token = tb.json(PREFIX + "/token")
    assert token["header"] == "X-Footprint-Token" and len(token["token"]) >= 32


def test_security_over_real_http(tb, demo):
    before = shas(demo)
    token = tb.json(PREFIX + "/token")["token"]
    body = json.dumps({"runs": [tb.json(PREFIX + "/runs")["runs"][0]["name"]]})
    cases = [
        ({"Content-Type": "application/json"}, 403),  # no token
        ({"Content-Type": "application/json", "X-Footprint-Token": token, "Origin": "http://evil.example"}, 403),
        ({"Content-Type": "application/json", "X-Footprint-Token": token, "Host": "evil.example:6006",
          "Origin": "http://evil.example:6006"}, 403),
        ({"Content-Type": "application/x-www-form-urlencoded", "X-Footprint-Token": token}, 415),
        ({"Content-Type": "application/json", "X-Footprint-Token": token, "Sec-Fetch-Site": "cross-site"}, 403),
    ]
    for headers, code in cases:
        status, _, resp = tb.request("POST", PREFIX + "/reduce", body=body, headers=headers)
        assert status == code, (headers, status, resp)
    status, _, _ = tb.request("GET", PREFIX + "/reduce", headers={"X-Footprint-Token": token})
    assert status == 405
    status, _, _ = tb.request("GET", PREFIX + "/run?run=" + urllib.parse.quote("../../etc"))
    assert status == 404
    assert shas(demo) == before


def test_reduce_and_restore_over_real_http(tb, demo):
    before = shas(demo)
    runs = tb.json(PREFIX + "/runs")["runs"]
    target = next(r["name"] for r in runs if r["removable_bytes"] > 0)
    token = tb.json(PREFIX + "/token")["token"]
    headers = {"Content-Type": "application/json", "X-Footprint-Token": token,
               "Origin": tb.base, "Sec-Fetch-Site": "same-origin"}

    def run_job(route, payload):
        status, _, resp = tb.request("POST", PREFIX + route, body=json.dumps(payload), headers=headers)
        assert status == 202, resp
        job_id = json.loads(resp)["job"]["id"]
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            job = tb.json(PREFIX + "/job?id=" + job_id)["job"]
            if job["state"] not in ("queued", "running"):
                return job
            time.sleep(0.2)
        raise AssertionError("job did not finish\n" + tb.log())

    job = run_job("/reduce", {"runs": [target]})
    assert job["state"] == "done", job
    (o,) = job["result"]["outcomes"]
    assert o["status"] == "verified", o
    op = tb.json(PREFIX + "/operations")["operations"][0]
    assert op["restorable"] is True
    check = tb.json(PREFIX + "/operation?op=" + op["op_id"])
    assert check["verification"]["ok"] is True
    job = run_job("/restore", {"op": op["op_id"]})
    assert job["result"]["outcomes"][0]["status"] == "restored", job
    assert shas(demo) == before


def test_bad_flags_stop_tensorboard_with_a_message(tmp_path):
    for flag, value, message in (("--footprint_backup_dir", "relative/dir", "absolute"),
                                 ("--footprint_policy", "nope", "unknown policy"),
                                 ("--footprint_quiet_period", "-1", "non-negative")):
        out = subprocess.run(tensorboard_cmd() + ["--logdir", str(tmp_path), "--port", str(free_port()), flag, value],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode != 0
        assert message in out.stderr + out.stdout, out.stderr[-2000:]


def test_helpfull_lists_the_footprint_group():
    out = subprocess.run(tensorboard_cmd() + ["--helpfull"], capture_output=True, text=True, timeout=120)
    assert "footprint:" in out.stdout
    for flag in ("--footprint_backup_dir", "--footprint_policy", "--footprint_read_only",
                 "--footprint_allow_remote_actions", "--footprint_quiet_period"):
        assert flag in out.stdout


def test_read_only_mode(demo):
    t = TensorBoard(demo, "--footprint_read_only")
    try:
        tok = t.json(PREFIX + "/token")
        assert tok["actions"]["enabled"] is False
        assert any("--footprint_read_only" in r for r in tok["actions"]["reasons"])
        assert t.json(PREFIX + "/runs?wait=60")["runs"]  # everything is still shown
        status, _, body = t.request("POST", PREFIX + "/reduce", body=json.dumps({"runs": ["x"]}),
                                    headers={"Content-Type": "application/json", "X-Footprint-Token": tok["token"]})
        assert status == 403 and b"write actions are off" in body
    finally:
        t.stop()


def test_opening_a_logdir_in_tensorboard_writes_nothing_into_it(tmp_path):
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    before = sorted(str(p.relative_to(logdir)) for p in logdir.rglob("*"))
    t = TensorBoard(logdir)
    try:
        runs = t.json(PREFIX + "/runs?wait=60")
        assert {r["name"] for r in runs["runs"]} >= {"train", "validation"}
        t.json(PREFIX + "/run?run=train")
    finally:
        t.stop()
    assert sorted(str(p.relative_to(logdir)) for p in logdir.rglob("*")) == before
