"""The Footprint plugin's HTTP surface, through TensorBoard's own WSGI app and werkzeug's client.

Covers the loader (flags, validation, lazy load), every route and its error paths, the whole
reduce → check → restore → purge flow (the run ends byte-identical to the start), cancel before
the commit point, crash recovery reported at load, read-only / remote modes, and a table-driven
security test: cross-origin, rebinding, token, method and body attacks on every mutating route,
and traversal attempts in run names / op ids on every route, with the tree hashed before and
after to prove nothing changed on disk.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import threading
import time
import sys

import pytest
from werkzeug.test import Client

from tensorboard.backend import application
from tensorboard.plugins import base_plugin

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.loader import FootprintLoader, parse_quiet_period
from tb_footprint_plugin.plugin import plugin as plugin_mod
from tb_footprint_plugin.plugin.plugin import FootprintPlugin
from tb_footprint_plugin.plugin.security import TOKEN_HEADER, Security, split_host

PREFIX = "/data/plugin/footprint"
OLD = 1795000000  # a fixed past instant for mtimes: no run counts as "still being written"


# ---------------------------------------------------------------------------------------
# fixtures and helpers
# ---------------------------------------------------------------------------------------
def _write_run(run_dir, *, seed, sessions=0, steps=60):
    with synth.EventWriter(run_dir) as w:
        for s in range(steps):
            w.scalar("loss", s, math.exp(-s / 15.0) + 0.01 * seed)
            w.scalar("accuracy", s, 1.0 - math.exp(-s / 8.0))
    for i in range(sessions):
        synth.write_profile_session(run_dir, synth.session_name_for(synth.DEFAULT_TIMESTAMP + 60 * i),
                                    n_events=1500 + 500 * i, with_caches=True, seed=seed * 10 + i)


def _age(root):
    for dirpath, dirnames, filenames in os.walk(root):
        for n in filenames + dirnames:
            p = os.path.join(dirpath, n)
            if not os.path.islink(p):
                os.utime(p, (OLD, OLD))


@pytest.fixture
def outside(tmp_path):
    """A directory outside the logdir that symlinks point to: must never change."""
    out = tmp_path / "outside"
    _write_run(str(out), seed=9, sessions=1)
    _age(str(out))
    return out


@pytest.fixture
def logdir(tmp_path, outside):
    root = tmp_path / "logs"
    _write_run(str(root / "big"), seed=1, sessions=2)
    _write_run(str(root / "mid"), seed=2, sessions=1)
    _write_run(str(root / "small"), seed=3, sessions=0)
    # a symlinked "run" pointing outside, and a symlinked session inside a real run
    os.symlink(str(outside), str(root / "linked"))
    os.symlink(str(outside / "plugins" / "profile"), str(root / "big" / "plugins" / "linked_profile"))
    _age(str(root))
    return root


def tree_hash(*roots):
    """sha256 of every file, symlink target and directory under the roots (the scan cache and
    lock files are bookkeeping and left out)."""
    h = hashlib.sha256()
    for root in roots:
        root = str(root)
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, root)
            if rel_dir.split(os.sep)[:2] in (
                [".tb-footprint", "locks"], [".tb-footprint", "tmp"]
            ):
                continue
            h.update(b"D" + rel_dir.encode())
            for n in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
                if n.startswith("scan-cache"):
                    continue
                p = os.path.join(dirpath, n)
                h.update(b"F" + os.path.join(rel_dir, n).encode())
                if os.path.islink(p):
                    h.update(b"L" + os.readlink(p).encode())
                    continue
                st = os.lstat(p)
                h.update(str((st.st_size, st.st_mode)).encode())
                with open(p, "rb") as f:
                    h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def file_shas(root, sub=""):
    out = {}
    base = os.path.join(str(root), sub)
    for dirpath, dirnames, filenames in os.walk(base):
        if ".tb-footprint" in dirpath.split(os.sep):
            continue
        for n in filenames:
            p = os.path.join(dirpath, n)
            if os.path.islink(p):
                out[os.path.relpath(p, base)] = "link:" + os.readlink(p)
                continue
            with open(p, "rb") as f:
                out[os.path.relpath(p, base)] = (hashlib.sha256(f.read()).hexdigest(), os.lstat(p).st_mtime)
    return out


def make_flags(logdir, **kw):
    ns = argparse.Namespace(
        logdir=str(logdir), logdir_spec="", host=None, bind_all=False, path_prefix="",
        samples_per_plugin={}, window_title="",
        footprint_backup_dir=None, footprint_policy="archive", footprint_read_only=False,
        footprint_allow_remote_actions=False, footprint_quiet_period=0.0,
        # werkzeug's test client has no socket, so no peer to identify: these in-process tests
        # accept that (test_peer_* below and tests/test_adversarial.py check the refusal)
        footprint_allow_unidentified_writers=True,
    )
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


class App:
    """The plugin inside TensorBoard's WSGI app, with a werkzeug client."""

    def __init__(self, logdir, **flags):
        self.flags = make_flags(logdir, **flags)
        ctx = base_plugin.TBContext(logdir=self.flags.logdir, flags=self.flags)
        self.plugin = FootprintLoader().load(ctx)
        assert self.plugin is not None
        self.wsgi = application.TensorBoardWSGI([self.plugin])
        self.client = Client(self.wsgi)
        assert self.plugin.recovery.done.wait(60)
        self.plugin.scans.wait_idle(120)

    def get(self, route, **kw):
        return self.client.get(PREFIX + route, **kw)

    def token(self):
        r = self.get("/token")
        assert r.status_code == 200, r.get_data(as_text=True)
        return r.get_json()["token"]

    def headers(self, **extra):
        h = {TOKEN_HEADER: self.token(), "Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"}
        h.update(extra)
        return h

    def post(self, route, body=None, headers=None, **kw):
        return self.client.post(PREFIX + route, data=json.dumps(body if body is not None else {}),
                                content_type="application/json",
                                headers=headers if headers is not None else self.headers(), **kw)

    def wait_job(self, job_id, timeout=180):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.get("/job", query_string={"id": job_id})
            assert r.status_code == 200
            job = r.get_json()["job"]
            if job["state"] not in ("queued", "running"):
                return job
            time.sleep(0.1)
        raise AssertionError(f"job {job_id} did not finish")

    def fresh_scan(self):
        self.plugin.scans.wait_idle(120)
        self.plugin.scans.refresh()
        self.plugin.scans.wait_idle(120)

    def close(self):
        self.plugin.jobs.wait_all(120)
        self.plugin.scans.wait_idle(120)


@pytest.fixture
def app(logdir):
    a = App(logdir)
    yield a
    a.close()


@pytest.fixture(autouse=True)
def _no_faults():
    yield
    faults.disarm_all()


# ---------------------------------------------------------------------------------------
# loader
# ---------------------------------------------------------------------------------------
def _parser():
    p = argparse.ArgumentParser()
    p.add_argument("--logdir", default="")
    FootprintLoader().define_flags(p)
    return p


def test_flags_defaults_and_group():
    p = _parser()
    ns = p.parse_args([])
    assert ns.footprint_backup_dir is None
    assert ns.footprint_policy == "archive"
    assert ns.footprint_read_only is False
    assert ns.footprint_allow_remote_actions is False
    assert parse_quiet_period(ns.footprint_quiet_period) == 600
    assert any(g.title == "footprint" for g in p._action_groups)
    ns = p.parse_args(["--footprint_read_only", "--footprint_allow_remote_actions=false",
                       "--footprint_quiet_period", "10m", "--footprint_policy", "lossless"])
    assert ns.footprint_read_only is True and ns.footprint_allow_remote_actions is False
    FootprintLoader().fix_flags(ns)
    assert ns.footprint_quiet_period == 600.0 and ns.footprint_policy == "lossless"


@pytest.mark.parametrize("argv, message", [
    (["--footprint_backup_dir", "relative/vault"], "absolute"),
    (["--footprint_policy", "shred-everything"], "unknown policy"),
    (["--footprint_policy", "keep-latest=x"], "whole number"),
    (["--footprint_quiet_period", "-5"], "non-negative"),
    (["--footprint_quiet_period", "soon"], "duration"),
    (["--logdir", "/data/logs", "--footprint_backup_dir", "/data"], "contains the logdir"),
])
def test_fix_flags_rejects(argv, message):
    ns = _parser().parse_args(argv)
    with pytest.raises(base_plugin.FlagsError, match=message):
        FootprintLoader().fix_flags(ns)


def test_fix_flags_accepts_absolute_backup_dir(tmp_path):
    ns = _parser().parse_args(["--logdir", str(tmp_path / "logs"), "--footprint_backup_dir", str(tmp_path / "vault"),
                               "--footprint_policy", "keep-latest=3", "--footprint_quiet_period", "0"])
    FootprintLoader().fix_flags(ns)
    assert ns.footprint_backup_dir == str(tmp_path / "vault")
    assert ns.footprint_quiet_period == 0.0


@pytest.mark.parametrize("logdir", ["", "hdfs://namenode/logs", "s3://", "gs:///"])
def test_load_returns_none_without_a_logdir_footprint_reads(logdir):
    """--logdir_spec, a store without bucket verbs, or a URL naming no bucket: no tab. (A bucket
    logdir does get the tab: tests/test_browser.py drives it against the moto S3 server.)"""
    ctx = base_plugin.TBContext(logdir=logdir, flags=make_flags(logdir))
    assert FootprintLoader().load(ctx) is None


def test_loader_module_is_light():
    import subprocess
    import sys

    code = ("import sys; import tb_footprint_plugin.loader; "
            "heavy = [m for m in ('tb_footprint_plugin.scan.scanner', 'tb_footprint_plugin.api', "
            "'tb_footprint_plugin.plugin.plugin', 'tb_footprint_plugin.engine.transaction', 'werkzeug') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# ---------------------------------------------------------------------------------------
# plugin basics
# ---------------------------------------------------------------------------------------
def test_plugin_metadata_and_listing(app):
    p = app.plugin
    assert p.plugin_name == "footprint"
    assert p.data_plugin_names() == ()
    meta = p.frontend_metadata()
    assert meta.es_module_path == "/index.js" and meta.tab_name == "Footprint"
    listing = app.client.get("/data/plugins_listing").get_json()
    assert listing["footprint"]["enabled"] is True
    assert listing["footprint"]["loading_mechanism"] == {"type": "IFRAME", "module_path": PREFIX + "/index.js"}


def test_is_active_never_touches_disk(logdir, monkeypatch):
    ctx = base_plugin.TBContext(logdir=str(logdir), flags=make_flags(logdir))
    p = FootprintPlugin(ctx, start_background=False)

    def boom(*a, **k):
        raise AssertionError("is_active touched the disk")

    monkeypatch.setattr(os, "listdir", boom)
    monkeypatch.setattr(os, "scandir", boom)
    monkeypatch.setattr(os, "stat", boom)
    monkeypatch.setattr(os, "lstat", boom)
    monkeypatch.setattr(os, "walk", boom)
    t0 = time.perf_counter()
    assert p.is_active() is True  # not scanned yet: shown
    assert time.perf_counter() - t0 < 0.01
    assert p.scans._thread is None


def test_is_active_false_for_empty_logdir(tmp_path):
    (tmp_path / "empty").mkdir()
    a = App(tmp_path / "empty")
    try:
        assert a.get("/runs").get_json()["runs"] == []
        assert a.plugin.is_active() is False
    finally:
        a.close()


def test_static_files(app):
    r = app.get("/index.js")
    assert r.status_code == 200
    assert r.mimetype == "text/javascript"
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert "export async function render" in r.get_data(as_text=True)
    for name in ("/model.js", "/views/overview.js", "/views/check.js", "/views/run.js", "/views/jobs.js",
                 "/views/operations.js", "/views/reduce.js", "/views/dialog.js", "/views/common.js"):
        assert app.get(name).status_code == 200, name
    css = app.get("/style.css")
    assert css.status_code == 200 and css.mimetype == "text/css"
    assert app.get("/nope.js").status_code == 404
    gz = app.get("/index.js", headers={"Accept-Encoding": "gzip"})
    assert gz.headers.get("Content-Encoding") == "gzip"


def test_frontend_obeys_tensorboard_csp():
    """No inline handlers, no innerHTML with data, no CDN, relative fetches only."""
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "frontend")
    sources = {}
    for dirpath, _, files in os.walk(root):
        for n in files:
            if n.endswith((".js", ".css")):
                with open(os.path.join(dirpath, n), encoding="utf-8") as f:
                    sources[n] = f.read()
    assert "index.js" in sources and "model.js" in sources
    assert "uPlot.esm.js" in sources  # the vendored chart library is held to the same rules
    for name, text in sources.items():
        assert "innerHTML" not in text, name
        assert "new Function" not in text and "XMLHttpRequest" not in text, name
        if name == "uPlot.esm.js":
            assert "fetch(" not in text, name
            # its comments cite web pages; a comment fetches nothing
            text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
            text = re.sub(r"//[^\n]*https?://[^\n]*", "", text)
        urls = text.replace("http://www.w3.org/2000/svg", "")  # the SVG namespace, not a fetch
        assert "http://" not in urls and "https://" not in urls and "//cdn" not in urls, name
        assert "import(" not in urls or name == "index.js", name
        assert "setAttribute('on" not in text and 'setAttribute("on' not in text, name
        assert "javascript:" not in text, name
        assert "eval(" not in text, name
    assert "fetch('./'" in sources["model.js"]


# ---------------------------------------------------------------------------------------
# read routes
# ---------------------------------------------------------------------------------------
def test_status_and_policies(app, logdir):
    s = app.get("/status").get_json()
    assert s["logdir"] == str(logdir)
    assert s["default_policy"] == "archive"
    assert s["actions"] == {"enabled": True, "reasons": [], "codes": [], "read_only": False, "remote": False}
    assert s["recovery"]["state"] == "done"
    assert s["scan"]["scanned_at"] > 0
    assert s["labels"]["profile_xplane"]
    pols = app.get("/policies").get_json()
    assert pols["default"] == "archive"
    assert {p["name"] for p in pols["policies"]} >= {"lossless", "keep-latest", "archive"}


def test_runs_sorted_by_size_with_scan_time(app):
    r = app.get("/runs")
    assert r.status_code == 200 and r.mimetype == "application/json"
    d = r.get_json()
    names = [x["name"] for x in d["runs"]]
    assert names[:3] == ["big", "mid", "small"]
    sizes = [x["total_bytes"] for x in d["runs"]]
    assert sizes == sorted(sizes, reverse=True)
    assert d["scan"]["scanned_at"] > 0 and d["scan"]["age_s"] >= 0
    assert d["total_bytes"] == sum(sizes)
    assert d["reclaimable_bytes"] > 0
    big = d["runs"][0]
    assert big["removable_bytes"] > 0 and big["categories"]["profile_xplane"] > 0
    assert d["runs"][2]["removable_bytes"] == 0  # scalars only
    cats = {c["name"]: c for c in d["categories"]}
    assert cats["scalars"]["label"] == "scalars"
    s = app.get("/summary", query_string={"policy": "lossless"}).get_json()
    assert "runs" not in s and s["policy"] == "lossless"
    assert 0 < s["reclaimable_bytes"] < d["reclaimable_bytes"]


def test_run_detail(app):
    d = app.get("/run", query_string={"run": "big"}).get_json()
    r = d["run"]
    assert r["name"] == "big"
    assert len(r["sessions"]) == 2
    assert {c["name"] for c in r["categories"]} >= {"scalars", "profile_xplane", "profile_cache"}
    assert r["file_count"] == len(r["files"])
    assert any(f["kind"] == "symlink" for f in r["files"])
    assert d["plan"]["removable_bytes"] > 0
    assert any("scalars: unchanged" in line for line in d["plan"]["fidelity"])
    assert d["plan"]["category_changes"][0]["before"] > 0
    assert d["operations"] == []


def test_plan_all_and_one(app):
    d = app.get("/plan").get_json()
    assert d["dry_run"] is True
    assert [r["run"] for r in d["runs"]][:2] == ["big", "mid"]
    one = app.get("/plan", query_string=[("run", "mid"), ("policy", "keep-latest")]).get_json()
    assert [r["run"] for r in one["runs"]] == ["mid"]
    two = app.get("/plan", query_string=[("run", "mid"), ("run", "big")]).get_json()
    assert {r["run"] for r in two["runs"]} == {"mid", "big"}


def test_empty_history_operations_jobs(app, logdir):
    assert app.get("/history").get_json() == {"entries": [], "total": 0, "total_exact": True}
    # Operations also lists what a restore kept in a file's place (api.status): none yet, and
    # asking writes no state into the logdir
    assert app.get("/operations").get_json() == {"operations": [], "kept_blobs": []}
    assert not os.path.lexists(os.path.join(str(logdir), ".tb-footprint"))
    assert app.get("/jobs").get_json() == {"jobs": []}


@pytest.mark.parametrize("route, query, code", [
    ("/run", {}, 400),
    ("/run", {"run": "nope"}, 404),
    ("/run", {"run": "big", "policy": "shred"}, 400),
    ("/runs", {"policy": "/etc/passwd"}, 400),
    ("/summary", {"policy": "keep-latest=x"}, 400),
    ("/plan", {"run": "nope"}, 404),
    ("/job", {}, 400),
    ("/job", {"id": "abc123"}, 404),
    ("/job", {"id": "not-hex!"}, 400),
    ("/operation", {}, 400),
    ("/operation", {"op": "20260101T000000-abcdef"}, 404),
    ("/runs", {"wait": "soon"}, 400),
])
def test_read_route_errors(app, route, query, code):
    r = app.get(route, query_string=query)
    assert r.status_code == code, r.get_data(as_text=True)
    assert r.mimetype == "application/json"
    assert r.get_json()["error"]


def test_read_routes_refuse_other_methods(app):
    for route in ("/runs", "/run", "/status", "/index.js", "/token"):
        r = app.client.post(PREFIX + route, data="{}", content_type="application/json")
        assert r.status_code == 405, route
        assert "GET" in r.headers["Allow"]


def test_missing_logdir_and_first_scan(tmp_path, monkeypatch):
    a = App(tmp_path / "not-there-yet")
    try:
        r = a.get("/runs")
        assert r.status_code == 503
        assert "does not exist" in r.get_json()["error"]
        assert a.get("/status").get_json()["recovery"]["state"] == "skipped"
    finally:
        a.close()

    gate = threading.Event()
    (tmp_path / "slow").mkdir()
    ctx = base_plugin.TBContext(logdir=str(tmp_path / "slow"), flags=make_flags(tmp_path / "slow"))
    p = FootprintPlugin(ctx, start_background=False)
    real = p.scans._scan_fn

    def slow_scan(*a, **k):
        gate.wait(30)
        from tb_footprint_plugin.scan.scanner import scan

        return scan(*a, **k)

    p.scans._scan_fn = slow_scan
    p.recovery.done.set()
    c = Client(application.TensorBoardWSGI([p]))
    r = c.get(PREFIX + "/runs?wait=0.2")
    assert r.status_code == 503 and r.get_json()["scan"]["refreshing"] is True
    gate.set()
    p.scans.wait_idle(30)
    assert c.get(PREFIX + "/runs").status_code == 200
    assert real is None


def test_internal_error_is_json(app, monkeypatch):
    from tb_footprint_plugin import api

    def broken(*a, **k):
        raise RuntimeError("library exploded")

    monkeypatch.setattr(api, "plan", broken)
    r = app.get("/run", query_string={"run": "big"})
    assert r.status_code == 500
    assert "library exploded" in r.get_json()["error"]


# ---------------------------------------------------------------------------------------
# the whole flow: reduce → check → restore → purge
# ---------------------------------------------------------------------------------------
def test_reduce_check_restore_purge(app, logdir, outside):
    start = file_shas(logdir, "big")
    outside_before = tree_hash(outside)
    before_runs = app.get("/runs").get_json()
    big = before_runs["runs"][0]

    r = app.post("/reduce", {"runs": ["big"], "policy": "archive"})
    assert r.status_code == 202, r.get_data(as_text=True)
    job = r.get_json()["job"]
    assert job["kind"] == "reduce" and job["runs"] == ["big"]
    # one job per run at a time
    busy = app.post("/reduce", {"runs": ["big"]})
    if busy.status_code != 409:  # the first job may already be over on a fast machine
        assert busy.status_code == 202
        app.wait_job(busy.get_json()["job"]["id"])
    job = app.wait_job(job["id"])
    assert job["state"] == "done", job
    (o,) = [x for x in job["result"]["outcomes"] if x["status"] == "verified"]
    assert o["run"] == "big"
    assert o["saved_bytes"] == big["removable_bytes"]
    assert o["verification"]["ok"] is True
    # only its profile data went: its event file is proven the same bytes by sha256, no reader
    # is started, so no before/after series is drawn (docs/FAILSAFE.md, verification)
    assert o["verification"]["mode"] == "unchanged" and "scalar_series" not in o["verification"]
    assert any(c["name"] == "event files" and "unchanged (sha256)" in c["detail"] for c in o["verification"]["checks"])
    assert any(c["name"] == "profile_xplane" and c["after"] == 0 for c in o["category_changes"])
    assert any("Profile" in line for line in o["dashboards"])
    assert not os.path.exists(logdir / "big" / "plugins" / "profile")
    assert os.path.islink(logdir / "big" / "plugins" / "linked_profile")
    assert tree_hash(outside) == outside_before

    app.fresh_scan()
    after = app.get("/runs").get_json()
    big_after = next(x for x in after["runs"] if x["name"] == "big")
    assert big_after["total_bytes"] == big["total_bytes"] - o["saved_bytes"]
    assert 0 < after["vault_bytes"] <= o["saved_bytes"]  # identical files share one blob

    ops = app.get("/operations").get_json()["operations"]
    (op,) = ops
    assert op["restorable"] is True and op["verified"] is True and op["outcome"] == "verified"
    assert app.get("/operations", query_string={"run": "mid"}).get_json()["operations"] == []
    detail = app.get("/operation", query_string={"op": op["op_id"]}).get_json()
    assert detail["verification"]["mode"] == "unchanged"
    assert [f["sha256"] for f in detail["verification"]["unchanged"]] == [
        start[n][0] for n in sorted(start) if "tfevents" in n and "/" not in n]
    assert detail["category_changes"][-1]["name"] == "_unchanged"
    assert any(c["name"] == "event files" and c["ok"] for c in detail["verification"]["checks"])
    assert app.get("/run", query_string={"run": "big"}).get_json()["operations"][0]["op_id"] == op["op_id"]
    hist = app.get("/history").get_json()["entries"]
    assert hist[0]["kind"] == "reduce" and hist[0]["run"] == "big"

    r = app.post("/restore", {"op": op["op_id"]})
    assert r.status_code == 202, r.get_data(as_text=True)
    job = app.wait_job(r.get_json()["job"]["id"])
    assert job["state"] == "done", job
    assert job["result"]["outcomes"][0]["status"] == "restored"
    assert any("listed again" in line for line in job["result"]["outcomes"][0]["dashboards"])
    assert file_shas(logdir, "big") == start  # byte for byte, mtimes too
    assert tree_hash(outside) == outside_before

    again = app.post("/restore", {"op": op["op_id"]})
    assert again.status_code == 409 and "already restored" in again.get_json()["error"]
    assert app.post("/restore", {"run": "big"}).status_code == 404

    ops = app.get("/operations").get_json()["operations"]
    assert {o["kind"] for o in ops} == {"reduce", "restore"}
    reduce_op = next(o for o in ops if o["kind"] == "reduce")
    assert reduce_op["restorable"] is False and reduce_op["restore_note"] == "restored"

    preview = app.post("/purge", {"confirm": False})
    assert preview.status_code == 200
    pv = preview.get_json()["preview"]
    # the verified restore dropped the vault's now redundant copy (issue 13): nothing left to purge
    assert pv["dry_run"] is True and pv["ops"] == []
    assert pv["originals_lost"] == 0  # the run was restored: its originals are back in place
    wrong = app.post("/purge", {"confirm": True, "originals_lost": 3})
    assert wrong.status_code == 409 and wrong.get_json()["originals_lost"] == 0
    assert app.post("/purge", {"confirm": False}).get_json()["preview"]["ops"] == pv["ops"]
    app.fresh_scan()
    assert app.get("/runs").get_json()["vault_bytes"] == 0
    r = app.post("/purge", {"confirm": True})
    assert r.status_code == 202
    job = app.wait_job(r.get_json()["job"]["id"])
    assert job["state"] == "done" and job["result"]["dry_run"] is False
    assert app.post("/purge", {"confirm": False}).get_json()["preview"]["ops"] == []
    assert file_shas(logdir, "big") == start


def test_reduce_all_shown_and_restore_by_run(app, logdir):
    start = file_shas(logdir)
    r = app.post("/reduce", {"runs": ["big", "mid", "small"]})
    assert r.status_code == 202
    job = app.wait_job(r.get_json()["job"]["id"])
    statuses = {o["run"]: o["status"] for o in job["result"]["outcomes"]}
    assert statuses["big"] == "verified" and statuses["mid"] == "verified"
    assert statuses["small"] == "skipped"
    assert job["fraction"] == 1.0
    for run in ("big", "mid"):
        r = app.post("/restore", {"run": run})
        assert r.status_code == 202
        assert app.wait_job(r.get_json()["job"]["id"])["result"]["ok"] is True
    assert file_shas(logdir) == start


def test_cancel_before_commit_point_rolls_back(app, logdir):
    start = file_shas(logdir)
    reached, go = threading.Event(), threading.Event()

    def pause():
        reached.set()
        go.wait(30)

    faults.arm("reduce.backup", pause)
    r = app.post("/reduce", {"runs": ["big"]})
    assert r.status_code == 202
    job_id = r.get_json()["job"]["id"]
    assert reached.wait(60)
    assert app.get("/jobs").get_json()["jobs"][0]["state"] == "running"
    c = app.post("/cancel", {"job": job_id})
    assert c.status_code == 200, c.get_data(as_text=True)
    assert c.get_json()["job"]["cancel_requested"] is True
    go.set()
    job = app.wait_job(job_id)
    assert job["state"] == "cancelled", job
    (o,) = job["result"]["outcomes"]
    assert o["status"] == "rolled_back" and "cancel" in o["reason"]
    # the job marks the outcome its Cancel stopped (the tab shows it muted, not as a failure);
    # the engine's status and code stay as they were
    assert o["code"] == "interrupted" and o["cancelled"] is True, o
    # every user file byte-identical (and same mtime); the vault only recorded the rollback
    assert file_shas(logdir) == start
    ops = app.get("/operations").get_json()["operations"]
    assert ops[0]["outcome"] == "rolled_back" and ops[0]["restorable"] is False
    # and cancelling a finished job is refused
    assert app.post("/cancel", {"job": job_id}).status_code == 409


def test_cancel_while_queued_changes_nothing(app, logdir):
    before = file_shas(logdir)
    hold = threading.Event()
    app.plugin.jobs._before_start = lambda: hold.wait(30)
    r = app.post("/reduce", {"runs": ["mid"]})
    job_id = r.get_json()["job"]["id"]
    # a second job on the same run is refused while the first one waits
    busy = app.post("/reduce", {"runs": ["small", "mid"]})
    assert busy.status_code == 409 and busy.get_json()["job"] == job_id
    # a purge waits for every job
    assert app.post("/purge", {"confirm": True}).status_code == 409
    assert app.post("/purge", {"confirm": False}).status_code == 409
    assert app.post("/cancel", {"job": job_id}).status_code == 200
    hold.set()
    job = app.wait_job(job_id)
    assert job["state"] == "cancelled"
    assert job["result"]["outcomes"][0]["status"] == "skipped"
    assert file_shas(logdir) == before
    assert app.get("/operations").get_json()["operations"] == []


def test_a_restore_is_cancellable_until_its_first_original_goes_back(app, logdir):
    """Before its put-back a restore can be called off with nothing changed (the job ends
    ``cancelled``, the run still reduced, its backup still restorable); once the originals go back
    it is finished, never undone, and the tab no longer offers a cancel."""
    r = app.post("/reduce", {"runs": ["mid"]})
    app.wait_job(r.get_json()["job"]["id"])
    reduced = file_shas(logdir)
    op = app.get("/operations").get_json()["operations"][0]["op_id"]
    reached, go = threading.Event(), threading.Event()

    def pause():
        reached.set()
        go.wait(30)

    faults.arm("restore.journal", pause)  # the lock taken and the begin record written: no original back yet
    r = app.post("/restore", {"op": op})
    jid = r.get_json()["job"]["id"]
    assert r.get_json()["job"]["cancellable"] is True
    assert reached.wait(60)
    c = app.post("/cancel", {"job": jid})
    assert c.status_code == 200, c.get_data(as_text=True)
    go.set()
    job = app.wait_job(jid)
    assert job["state"] == "cancelled", job
    (o,) = job["result"]["outcomes"]
    assert o["code"] == "interrupted" and "nothing was changed" in o["reason"] and o["cancelled"] is True, o
    assert file_shas(logdir) == reduced
    faults.disarm_all()

    # past the first put-back: not cancellable, and a cancel is refused with why
    reached.clear()
    go.clear()
    faults.arm("restore.file", pause)
    r = app.post("/restore", {"op": op})
    jid = r.get_json()["job"]["id"]
    assert reached.wait(60)
    job = app.get("/job", query_string={"id": jid}).get_json()["job"]
    assert job["cancellable"] is False and job["per_run"]["mid"]["step"] == "restore", job
    c = app.post("/cancel", {"job": jid})
    assert c.status_code == 409 and "never undone" in c.get_json()["error"]
    go.set()
    job = app.wait_job(jid)
    assert job["state"] == "done" and job["result"]["outcomes"][0]["status"] == "restored", job
    assert "cancelled" not in job["result"]["outcomes"][0], job  # a cancel refused stopped nothing


def test_a_purge_is_cancellable_until_its_intent(app, logdir, monkeypatch):
    """The tab's purge, held at a step before its intent, can be called off with nothing
    deleted (the job ends ``cancelled``, the backup kept with code ``interrupted``, still listed
    by a preview); held past its intent (``purge.intent``) it finishes: the job says
    ``cancellable: false`` and a cancel is refused (409) with why."""
    from tb_footprint_plugin.engine.txn import Purge

    start = file_shas(logdir)
    r = app.post("/reduce", {"runs": ["mid"]})
    assert app.wait_job(r.get_json()["job"]["id"])["state"] == "done"
    pv = app.post("/purge", {"confirm": False}).get_json()["preview"]
    assert [o["run"] for o in pv["ops"]] == ["mid"], pv
    reached, go = threading.Event(), threading.Event()

    def pause(*_a):
        reached.set()
        go.wait(30)

    monkeypatch.setattr(Purge, "journal", pause)  # the driver's first step: nothing recorded yet
    r = app.post("/purge", {"confirm": True})
    jid = r.get_json()["job"]["id"]
    assert r.get_json()["job"]["cancellable"] is True, r.get_json()
    assert reached.wait(60)
    c = app.post("/cancel", {"job": jid})
    assert c.status_code == 200, c.get_data(as_text=True)
    go.set()
    job = app.wait_job(jid)
    assert job["state"] == "cancelled", job
    assert job["result"]["ops"] == [] and job["result"]["freed_bytes"] == 0, job
    (k,) = job["result"]["kept"]
    assert k["run"] == "mid" and k["code"] == "interrupted" and "nothing of this backup was deleted" in k["detail"]
    assert app.post("/purge", {"confirm": False}).get_json()["preview"]["ops"] == pv["ops"]
    monkeypatch.undo()
    # nothing of the backup went: the run restores byte for byte (and is reduced again below)
    r = app.post("/restore", {"op": pv["ops"][0]["op_id"]})
    assert app.wait_job(r.get_json()["job"]["id"])["state"] == "done"
    assert file_shas(logdir) == start
    r = app.post("/reduce", {"runs": ["mid"]})
    assert app.wait_job(r.get_json()["job"]["id"])["state"] == "done"

    # past its intent: not cancellable, a cancel refused with why, the purge finishes
    reached.clear()
    go.clear()
    faults.arm("purge.intent", pause)
    try:
        r = app.post("/purge", {"confirm": True})
        jid = r.get_json()["job"]["id"]
        assert reached.wait(60)
        job = app.get("/job", query_string={"id": jid}).get_json()["job"]
        assert job["cancellable"] is False and job["step"] == "purge", job
        c = app.post("/cancel", {"job": jid})
        assert c.status_code == 409 and "recorded its intent" in c.get_json()["error"], c.get_json()
        go.set()
        job = app.wait_job(jid)
    finally:
        go.set()
        faults.disarm_all()
    assert job["state"] == "done" and [o["run"] for o in job["result"]["ops"]] == ["mid"], job
    assert app.post("/purge", {"confirm": False}).get_json()["preview"]["ops"] == []


@pytest.mark.parametrize("route, body, code, text", [
    ("/reduce", {}, 400, "runs"),
    ("/reduce", {"runs": []}, 400, "runs"),
    ("/reduce", {"runs": "nope"}, 404, "no run"),
    ("/reduce", {"runs": ["big"], "policy": "shred"}, 400, "unknown policy"),
    ("/reduce", {"runs": ["big"], "policy": 7}, 400, "policy"),
    ("/reduce", {"runs": ["(unattributed)"]}, 404, "no run"),
    # custom rules: the library's checks, as for the CLI's --delete/--keep/--keep-latest/--keep-per-tag
    ("/reduce", {"runs": ["big"], "custom": "delete everything"}, 400, "custom must be an object"),
    ("/reduce", {"runs": ["big"], "custom": {"shred": True}}, 400, "custom must be an object"),
    ("/reduce", {"runs": ["big"], "custom": {"delete": ["hparams"]}}, 400, "can never be selected"),
    ("/reduce", {"runs": ["big"], "custom": {"delete": ["nope"]}}, 400, "unknown file category 'nope'"),
    ("/reduce", {"runs": ["big"], "custom": {"delete": "checkpoints"}}, 400, "must be a list"),
    ("/reduce", {"runs": ["big"], "custom": {"keep_latest": -1}}, 400, "keep_latest"),
    ("/reduce", {"runs": ["big"], "custom": {"keep_per_tag": {"images": "all"}}}, 400, "keep_per_tag"),
    ("/restore", {}, 400, "op"),
    ("/restore", {"op": "20260101T000000-abcdef"}, 404, "no operation"),
    ("/restore", {"run": "big"}, 404, "nothing to restore"),
    ("/restore", {"run": 5}, 400, "string"),
    ("/purge", {"older_than_s": -1}, 400, "older_than_s"),
    ("/purge", {"older_than_s": "1d"}, 400, "older_than_s"),
    ("/purge", {"confirm": "yes"}, 400, "confirm"),
    ("/purge", {"run": "big"}, 404, "no operation"),
    ("/cancel", {}, 400, "job id"),
    ("/cancel", {"job": "abc"}, 404, "no job"),
])
def test_write_route_errors(app, logdir, route, body, code, text):
    before = tree_hash(logdir)
    r = app.post(route, body)
    assert r.status_code == code, r.get_data(as_text=True)
    assert text in r.get_json()["error"]
    assert tree_hash(logdir) == before
    assert app.plugin.jobs.list() == []


def test_rescan(app, logdir):
    gen = app.get("/runs").get_json()["scan"]["generation"]
    (logdir / "fresh").mkdir()
    _write_run(str(logdir / "fresh"), seed=5, steps=5)
    r = app.post("/rescan", {})
    assert r.status_code == 202
    app.plugin.scans.wait_idle(60)
    d = app.get("/runs").get_json()
    assert d["scan"]["generation"] > gen
    fresh = next(x for x in d["runs"] if x["name"] == "fresh")
    assert fresh["removable_bytes"] == 0


def test_quiet_period_leaves_active_runs_alone(logdir):
    now = time.time()
    os.utime(logdir / "big" / os.listdir(logdir / "big")[0], (now, now))
    a = App(logdir, footprint_quiet_period=600.0)
    try:
        d = a.get("/runs").get_json()
        big = next(x for x in d["runs"] if x["name"] == "big")
        assert big["removable_bytes"] == 0 and big["skipped"].startswith("active")
        assert d["active_runs"] == 1
    finally:
        a.close()


# ---------------------------------------------------------------------------------------
# recovery at load
# ---------------------------------------------------------------------------------------
class _Crash(BaseException):
    """Stands in for a power cut: not an Exception, so nothing in the transaction catches it."""


def test_crash_recovery_runs_at_load_and_is_reported(logdir):
    from tb_footprint_plugin import api

    start = file_shas(logdir, "big")

    def crash():
        raise _Crash()

    faults.arm("reduce.backup", crash)
    with pytest.raises(_Crash):
        api.reduce_logdir(str(logdir), policy="archive", dry_run=False, runs=["big"], quiet_period=0)
    faults.disarm_all()
    assert os.listdir(logdir / ".tb-footprint" / "journal")  # an unfinished operation

    ro = App(logdir, footprint_read_only=True)
    try:
        rec = ro.get("/status").get_json()["recovery"]
        assert rec["state"] == "skipped" and "unfinished" in rec["detail"] and len(rec["outcomes"]) == 1
    finally:
        ro.close()

    a = App(logdir)
    try:
        rec = a.get("/status").get_json()["recovery"]
        assert rec["state"] == "done"
        (o,) = rec["outcomes"]
        assert o["run"] == "big" and o["action"] == "rolled_back"
        assert file_shas(logdir, "big") == start
        assert not os.listdir(logdir / ".tb-footprint" / "journal")
    finally:
        a.close()


# ---------------------------------------------------------------------------------------
# when write actions are off
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("flags, enabled, reason", [
    ({}, True, None),
    ({"footprint_read_only": True}, False, "--footprint_read_only"),
    ({"bind_all": True}, False, "--bind_all"),
    ({"bind_all": True, "footprint_allow_remote_actions": True}, True, None),
    ({"host": "0.0.0.0"}, False, "--host 0.0.0.0"),
    ({"host": ""}, False, "--host"),
    ({"host": "0.0.0.0", "footprint_allow_remote_actions": True}, True, None),
    ({"host": "127.0.0.1"}, True, None),
    ({"host": "localhost"}, True, None),
    ({"host": "::1"}, True, None),
])
def test_actions_enabled_by_bind_address(logdir, flags, enabled, reason):
    a = App(logdir, **flags)
    try:
        tok = a.get("/token").get_json()
        assert tok["actions"]["enabled"] is enabled
        if reason:
            assert any(reason in x for x in tok["actions"]["reasons"])
        # everything is still shown
        assert a.get("/runs").status_code == 200
        assert a.get("/run", query_string={"run": "big"}).status_code == 200
        if not enabled:
            before = tree_hash(logdir)
            r = a.post("/reduce", {"runs": ["big"]})
            assert r.status_code == 403 and "write actions are off" in r.get_json()["error"]
            assert a.post("/purge", {"confirm": True}).status_code == 403
            assert a.post("/restore", {"run": "big"}).status_code == 403
            # a rescan changes nothing in the logdir: still allowed (same-origin, with the token)
            assert a.post("/rescan", {}).status_code == 202
            a.plugin.scans.wait_idle(60)
            assert tree_hash(logdir) == before
    finally:
        a.close()


def test_non_local_logdir_is_never_writable(logdir):
    s = Security(make_flags("gs://bucket/x"), "gs://bucket/x", local_logdir=False)
    assert not s.actions_enabled and "not on a local disk" in s.reasons[0]


@pytest.mark.parametrize("host, expected", [
    ("localhost", ("localhost", None)), ("LOCALHOST:6006", ("localhost", "6006")),
    ("[::1]:6006", ("::1", "6006")), ("127.0.0.1:1", ("127.0.0.1", "1")), ("evil.example.", ("evil.example", None)),
    ("[::1", ("", None)),
])
def test_split_host(host, expected):
    assert split_host(host) == expected


# ---------------------------------------------------------------------------------------
# security table: every attack on every mutating route changes nothing
# ---------------------------------------------------------------------------------------
MUTATING = [
    ("/reduce", {"runs": ["big"]}),
    ("/restore", {"run": "big"}),
    ("/purge", {"confirm": True}),
    ("/cancel", {"job": "abcdef"}),
    ("/rescan", {}),
]


def _attacks(token):
    good = {TOKEN_HEADER: token, "Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"}

    def h(**kw):
        d = dict(good)
        for k, v in kw.items():
            k = k.replace("_", "-")
            if v is None:
                d.pop(k, None)
            else:
                d[k] = v
        return d

    j = "application/json"
    return [
        # (name, method, headers, body bytes, content type, status, reason fragment)
        ("missing token", "POST", h(**{TOKEN_HEADER.replace("-", "_"): None}), None, j, 403, "token"),
        ("wrong token", "POST", h(**{TOKEN_HEADER.replace("-", "_"): "x" * 43}), None, j, 403, "token"),
        ("token of another process", "POST", h(**{TOKEN_HEADER.replace("-", "_"): token[::-1]}), None, j, 403, "token"),
        ("cross-origin Origin", "POST", h(Origin="http://evil.example"), None, j, 403, "cross-origin"),
        ("Origin on another port", "POST", h(Origin="http://localhost:9999"), None, j, 403, "cross-origin"),
        ("opaque null Origin", "POST", h(Origin="null"), None, j, 403, "null"),
        ("Sec-Fetch-Site cross-site", "POST", h(Sec_Fetch_Site="cross-site"), None, j, 403, "Sec-Fetch-Site"),
        ("Sec-Fetch-Site same-site", "POST", h(Sec_Fetch_Site="same-site"), None, j, 403, "Sec-Fetch-Site"),
        ("Sec-Fetch-Site none", "POST", h(Sec_Fetch_Site="none"), None, j, 403, "Sec-Fetch-Site"),
        ("DNS rebinding: foreign Host, matching Origin", "POST",
         h(Host="evil.example:6006", Origin="http://evil.example:6006"), None, j, 403, "Host"),
        ("foreign Host, no Origin", "POST", h(Host="evil.example", Origin=None), None, j, 403, "Host"),
        ("foreign IP Host on loopback server", "POST", h(Host="10.1.2.3:6006", Origin=None), None, j, 403, "Host"),
        ("empty Host", "POST", h(Host="", Origin=None), None, j, 403, "Host"),
        ("GET on a mutating route", "GET", h(), None, None, 405, "POST only"),
        ("PUT on a mutating route", "PUT", h(), None, j, 405, "POST only"),
        ("DELETE on a mutating route", "DELETE", h(), None, j, 405, "POST only"),
        ("form-encoded body", "POST", h(), b"runs=big&confirm=true&job=abcdef", "application/x-www-form-urlencoded",
         415, "JSON"),
        ("multipart body", "POST", h(), b"--x\r\n\r\n--x--", "multipart/form-data; boundary=x", 415, "JSON"),
        ("text/plain JSON (simple CORS request)", "POST", h(), None, "text/plain", 415, "JSON"),
        ("no content type", "POST", h(), None, None, 415, "JSON"),
        ("JSON array body", "POST", h(), b'["big"]', j, 400, "object"),
        ("invalid JSON", "POST", h(), b"{runs:", j, 400, "not valid JSON"),
        ("body too large", "POST", h(), b'{"pad": "' + b"x" * (1100 * 1024) + b'"}', j, 413, "too large"),
        ("browser cross-site form post", "POST",
         {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, b"runs=big",
         "application/x-www-form-urlencoded", 403, "cross-origin"),
    ]


def test_security_table(app, logdir, outside):
    before = (tree_hash(logdir), tree_hash(outside))
    token = app.token()
    seen = []
    for route, body in MUTATING:
        for name, method, headers, raw, ctype, status, reason in _attacks(token):
            data = raw if raw is not None else json.dumps(body).encode()
            kw = {"headers": headers, "data": data if method != "GET" else None}
            if ctype:
                kw["content_type"] = ctype
            r = app.client.open(PREFIX + route, method=method, **kw)
            seen.append((route, name, r.status_code))
            assert r.status_code == status, (route, name, r.status_code, r.get_data(as_text=True))
            assert reason in r.get_json()["error"], (route, name, r.get_json())
    assert len(seen) == len(MUTATING) * len(_attacks(token))
    app.plugin.jobs.wait_all(60)
    assert app.plugin.jobs.list() == []
    assert (tree_hash(logdir), tree_hash(outside)) == before


def test_token_route_refuses_foreign_host_and_cross_site(app):
    assert app.get("/token", headers={"Host": "evil.example"}).status_code == 403
    assert app.get("/token", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
    assert app.get("/token", headers={"Origin": "http://evil.example"}).status_code == 403
    ok = app.get("/token", headers={"Host": "127.0.0.1:6006", "Sec-Fetch-Site": "same-origin"})
    assert ok.status_code == 200 and len(ok.get_json()["token"]) >= 32
    # reads a browser marks as coming from another site are refused too
    assert app.get("/runs", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
    assert app.get("/runs", headers={"Sec-Fetch-Site": "same-site"}).status_code == 403
    assert app.get("/index.js", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
    # reads answer no foreign Host either: a rebinding page would read paths, names and history
    for route in ("/runs", "/status", "/history", "/operations", "/index.js"):
        r = app.get(route, headers={"Host": "proxy.internal:8888", "Sec-Fetch-Site": "same-origin"})
        assert r.status_code == 403 and r.get_json()["reason_code"] == "foreign_host", route


def test_token_is_per_process(logdir):
    a, b = App(logdir), App(logdir)
    try:
        assert a.token() != b.token()
        r = a.post("/rescan", {}, headers={TOKEN_HEADER: b.token()})
        assert r.status_code == 403
    finally:
        a.close()
        b.close()


def test_bind_all_with_remote_actions_accepts_hostname_and_ip(logdir):
    import socket

    a = App(logdir, bind_all=True, footprint_allow_remote_actions=True)
    try:
        tok = a.token()
        for host in (socket.gethostname(), "192.0.2.7:6006", "[2001:db8::1]:6006"):
            r = a.post("/rescan", {}, headers={TOKEN_HEADER: tok, "Host": host})
            assert r.status_code == 202, (host, r.get_data(as_text=True))
        r = a.post("/rescan", {}, headers={TOKEN_HEADER: tok, "Host": "evil.example"})
        assert r.status_code == 403
    finally:
        a.close()


TRAVERSALS = [
    "../", "..", "../outside", "../../etc/passwd", "..%2f", "%2e%2e%2f", "%2e%2e/%2e%2e/etc/passwd",
    "%252e%252e%252f", "/etc", "/etc/passwd", "/", "\\", "..\\..\\outside", "big\\..\\..\\outside",
    "big/../small", "big/../../outside", "./big", "big/", "big/.", "big//", "linked", "linked/",
    "linked/plugins/profile", "big/plugins/linked_profile", "", ".", "\x00big", "big\x00", "big\n",
    "ｂｉｇ", "~", "~/.ssh", "big/plugins/profile",
]


def test_traversal_in_run_names_everywhere(app, logdir, outside):
    """Every traversal attempt, in every place a request names a run, an operation or a job."""
    abs_variants = [str(logdir / "big"), str(outside), str(logdir), str(logdir / "linked")]
    before = (tree_hash(logdir), tree_hash(outside))
    headers = app.headers()
    for p in TRAVERSALS + abs_variants:
        for route, param in (("/run", "run"), ("/plan", "run"), ("/operation", "op"), ("/job", "id"),
                             ("/runs", "policy"), ("/summary", "policy")):
            if param == "policy" and p == "":
                continue  # an empty policy means the default one
            r = app.get(route, query_string={param: p})
            assert r.status_code in (400, 404), (route, p, r.status_code, r.get_data(as_text=True))
        r = app.get("/operations", query_string={"run": p})
        assert r.status_code == 200 and r.get_json()["operations"] == []
        for route, body in (
            ("/reduce", {"runs": [p]}), ("/reduce", {"run": p}), ("/reduce", {"runs": ["big"], "policy": p or "x"}),
            ("/restore", {"op": p}), ("/restore", {"run": p}),
            ("/purge", {"run": p, "confirm": True}), ("/purge", {"op": p, "confirm": True}),
            ("/cancel", {"job": p}),
        ):
            r = app.post(route, body, headers=headers)
            assert r.status_code in (400, 404), (route, body, r.status_code, r.get_data(as_text=True))
    for body in ({"runs": [1]}, {"runs": {"big": 1}}, {"runs": None}, {"runs": [["big"]]}, {"op": ["x"]}):
        for route in ("/reduce", "/restore"):
            r = app.post(route, body, headers=headers)
            assert r.status_code in (400, 404), (route, body)
    # raw, still-encoded paths on the static routes
    for path in ("/../../../etc/passwd", "/views/../../plugin/plugin.py", "/views/..%2f..%2fsetup.py",
                 "/%2e%2e/%2e%2e/etc/passwd", "/views/%2e%2e/index.js", "/views/", "/views/..",
                 "/index.js/../../x", "/static/../index.js"):
        r = app.client.get(PREFIX + path)
        assert r.status_code == 404, (path, r.status_code)
    app.plugin.jobs.wait_all(60)
    assert app.plugin.jobs.list() == []
    assert (tree_hash(logdir), tree_hash(outside)) == before


def test_backup_dir_elsewhere(logdir, tmp_path):
    vault = tmp_path / "vault"
    start = file_shas(logdir)
    a = App(logdir, footprint_backup_dir=str(vault))
    try:
        assert a.get("/status").get_json()["backup_dir"] == str(vault)
        r = a.post("/reduce", {"runs": ["mid"]})
        job = a.wait_job(r.get_json()["job"]["id"])
        assert job["result"]["outcomes"][0]["status"] == "verified"
        blobs = [f for _, _, fs in os.walk(vault) for f in fs]
        assert blobs, "backups go to --footprint_backup_dir"
        assert not os.path.isdir(logdir / ".tb-footprint" / "blobs") or not os.listdir(logdir / ".tb-footprint" / "blobs")
        a.fresh_scan()
        assert a.get("/runs").get_json()["vault_bytes"] > 0
        op = a.get("/operations").get_json()["operations"][0]
        r = a.post("/restore", {"op": op["op_id"]})
        assert a.wait_job(r.get_json()["job"]["id"])["result"]["ok"] is True
        assert file_shas(logdir) == start
    finally:
        a.close()


def test_restore_newest_first(app, logdir):
    """Two reductions of one run (keep-latest, then archive): only the newer one is restorable first."""
    start = file_shas(logdir, "big")
    for policy in ("keep-latest", "archive"):
        r = app.post("/reduce", {"runs": ["big"], "policy": policy})
        job = app.wait_job(r.get_json()["job"]["id"])
        assert job["result"]["outcomes"][0]["status"] == "verified", job
        app.fresh_scan()
    ops = app.get("/operations", query_string={"run": "big"}).get_json()["operations"]
    newer, older = ops
    assert newer["policy"] == "archive" and newer["restorable"] is True
    assert older["restorable"] is False and newer["op_id"] in older["restore_note"]
    r = app.post("/restore", {"op": older["op_id"]})
    assert r.status_code == 409 and "restore it first" in r.get_json()["error"]
    for op in (newer, older):
        r = app.post("/restore", {"op": op["op_id"]})
        assert r.status_code == 202
        assert app.wait_job(r.get_json()["job"]["id"])["result"]["ok"] is True
    assert file_shas(logdir, "big") == start


# ---------------------------------------------------------------------------------------
# who is on the other end, framing, bodies
# ---------------------------------------------------------------------------------------
def _as_peer(monkeypatch, uid, code="identified"):
    from tb_footprint_plugin.plugin import peer as peer_mod

    monkeypatch.setattr(peer_mod, "identify", lambda environ, *a, **k: peer_mod.Peer(uid, code, "127.0.0.1:50000"))


def test_peer_of_another_user_gets_no_token_and_changes_nothing(logdir, outside, monkeypatch):
    owner = os.geteuid()
    _as_peer(monkeypatch, owner + 4242)
    a = App(logdir, footprint_allow_unidentified_writers=False)
    try:
        before = (tree_hash(logdir), tree_hash(outside))
        r = a.get("/token")
        assert r.status_code == 403 and r.get_json()["reason_code"] == "peer_not_owner"
        assert "token" not in r.get_json()
        # even holding the real token (stolen, say), every write is refused
        headers = {TOKEN_HEADER: a.plugin.security.token, "Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"}
        for route, body in MUTATING:
            r = a.post(route, body, headers=headers)
            assert r.status_code == 403, (route, r.get_json())
            assert r.get_json()["reason_code"] == "peer_not_owner"
        # reading is still allowed (TensorBoard itself serves every local user)
        assert a.get("/runs").status_code == 200
        a.plugin.jobs.wait_all(30)
        assert a.plugin.jobs.list() == []
        assert (tree_hash(logdir), tree_hash(outside)) == before
    finally:
        a.close()


@pytest.mark.parametrize("uid_of, status", [("owner", 200), ("root", 200)])
def test_peer_owner_and_root_get_the_token(logdir, monkeypatch, uid_of, status):
    _as_peer(monkeypatch, os.geteuid() if uid_of == "owner" else 0)
    a = App(logdir, footprint_allow_unidentified_writers=False)
    try:
        assert a.get("/token").status_code == status
        assert a.post("/rescan", {}).status_code == 202
    finally:
        a.close()


def test_unidentified_peer_needs_the_flag(logdir, monkeypatch):
    _as_peer(monkeypatch, None, "not_found")
    a = App(logdir, footprint_allow_unidentified_writers=False)
    try:
        r = a.get("/token")
        assert r.status_code == 403 and r.get_json()["reason_code"] == "peer_unidentified"
        assert "--footprint_allow_unidentified_writers" in r.get_json()["error"]
    finally:
        a.close()
    b = App(logdir, footprint_allow_unidentified_writers=True)
    try:
        assert b.get("/token").status_code == 200
    finally:
        b.close()


def test_remote_actions_accept_clients_of_other_machines_only(logdir, monkeypatch):
    from tb_footprint_plugin.plugin import peer as peer_mod

    monkeypatch.setattr(peer_mod, "identify", lambda environ, *a, **k: peer_mod.Peer(None, "not_found", "192.0.2.7:50000"))
    a = App(logdir, bind_all=True, footprint_allow_remote_actions=True, footprint_allow_unidentified_writers=False)
    try:
        assert a.get("/token").status_code == 200
        # a loopback client that cannot be found is not "another machine"
        monkeypatch.setattr(peer_mod, "identify", lambda environ, *a, **k: peer_mod.Peer(None, "not_found", "127.0.0.1:5"))
        assert a.get("/token").status_code == 403
    finally:
        a.close()


def test_every_answer_forbids_foreign_framing(app):
    answers = [app.get("/status"), app.get("/index.js"), app.get("/style.css"), app.get("/run", query_string={"run": "nope"}),
               app.get("/runs", headers={"Host": "evil.example"}), app.post("/reduce", {"runs": ["nope"]}),
               app.client.open(PREFIX + "/purge", method="PUT")]
    for r in answers:
        assert r.headers.get("X-Frame-Options") == "SAMEORIGIN", (r.status_code, dict(r.headers))
        assert "frame-ancestors 'self'" in r.headers.get_all("Content-Security-Policy"), dict(r.headers)


def test_nested_and_chunked_bodies(app, logdir):
    import io

    before = tree_hash(logdir)
    deep = b"[" * 200000 + b"]" * 200000
    r = app.client.post(
        PREFIX + "/rescan", data=b'{"a": ' + deep + b"}", content_type="application/json", headers=app.headers())
    assert r.status_code in (400, 413), r.get_data(as_text=True)
    deep_small = b'{"a": ' + b"[" * 50000 + b"]" * 50000 + b"}"  # 100 KB: under the size limit
    r = app.client.post(PREFIX + "/rescan", data=deep_small, content_type="application/json", headers=app.headers())
    assert r.status_code == 400 and "nested" in r.get_json()["error"]
    # a chunked body (no Content-Length) over the limit: 413, not cut and called bad JSON
    big = b'{"pad": "' + b"x" * (1100 * 1024) + b'"}'
    for body, status in ((big, 413), (b'{"runs": ["nope"]}', 404)):
        r = app.client.open(PREFIX + "/reduce", method="POST", input_stream=io.BytesIO(body),
                            content_type="application/json", headers=app.headers(),
                            environ_overrides={"wsgi.input_terminated": True, "CONTENT_LENGTH": "",
                                               "HTTP_TRANSFER_ENCODING": "chunked"})
        assert r.status_code == status, r.get_data(as_text=True)[:300]
    assert tree_hash(logdir) == before


def test_purge_names_the_originals_it_loses_and_holds_to_the_confirmed_number(app, logdir, outside):
    r = app.post("/reduce", {"runs": ["big"], "policy": "archive"})
    assert app.wait_job(r.get_json()["job"]["id"])["state"] == "done"
    op = next(o for o in app.get("/operations").get_json()["operations"] if o["kind"] == "reduce")
    pv = app.post("/purge", {"confirm": False}).get_json()["preview"]
    assert pv["originals_lost"] == op["files"] > 0
    assert pv["ops"][0]["originals"] == op["files"]
    before = (tree_hash(logdir), tree_hash(outside))
    for bad in (pv["originals_lost"] - 1, pv["originals_lost"] + 1, -1, True, "3"):
        r = app.post("/purge", {"confirm": True, "originals_lost": bad})
        assert r.status_code in (400, 409), (bad, r.get_json())
    app.plugin.jobs.wait_all(30)
    assert (tree_hash(logdir), tree_hash(outside)) == before
    r = app.post("/purge", {"confirm": True, "originals_lost": pv["originals_lost"]})
    assert r.status_code == 202
    job = app.wait_job(r.get_json()["job"]["id"])
    assert job["state"] == "done" and job["result"]["originals_lost"] == pv["originals_lost"]


def test_default_policy_file_drives_the_overview_run_detail_and_dry_run(logdir, tmp_path):
    """TensorBoard started with ``--footprint_policy <file>`` whose policy carries a built-in's
    name: the tab sends the file's path as its key; the overview, the run detail (the plan shown
    in the detail page) and the dry run are that file's plan, each payload says which key it
    answers (``policy_key``, the path) next to the policy's own name, and the built-in of the
    same name keeps its own numbers (nothing is shared by name)."""
    from tb_footprint_plugin import api

    pol = tmp_path / "team-policy.json"
    pol.write_text(json.dumps({"name": "archive", "rules": {"profile_cache": "delete"}}))
    a = App(logdir, footprint_policy=str(pol))
    try:
        policies = a.get("/policies").get_json()
        assert policies["default"] == str(pol) and str(pol) in [p["name"] for p in policies["policies"]]
        want = api.plan(str(logdir), str(pol), quiet_period=0)
        builtin = api.plan(str(logdir), "archive", quiet_period=0)
        assert want.removable_bytes != builtin.removable_bytes > 0
        for q in ({"policy": str(pol)}, {}):  # named by the tab, or TensorBoard's default
            runs = a.get("/runs", query_string=q).get_json()
            assert runs["policy_key"] == str(pol) and runs["reclaimable_bytes"] == want.removable_bytes
            detail = a.get("/run", query_string=dict(q, run="big")).get_json()
            assert detail["policy_key"] == str(pol) and detail["policy"] == "archive"
            assert detail["plan"]["removable_bytes"] == want.run("big").removable_bytes > 0
            dry = a.get("/plan", query_string=dict(q, run="big")).get_json()
            assert dry["policy_key"] == str(pol) and dry["dry_run"]
            assert [r["removable_bytes"] for r in dry["runs"]] == [want.run("big").removable_bytes]
        other = a.get("/runs", query_string={"policy": "archive"}).get_json()
        assert other["policy_key"] == "archive" and other["reclaimable_bytes"] == builtin.removable_bytes
        assert a.get("/runs", query_string={"policy": str(pol)}).get_json()["reclaimable_bytes"] == \
            want.removable_bytes  # not the built-in's memoized overview
    finally:
        a.close()


def test_reduce_route_takes_custom_rules_and_shows_the_cli_numbers(app, logdir):
    """The tab's custom rules are the CLI's: keeping the xplane under archive keeps it; the job's
    answer is ``api.reduce_summary`` — the function the CLI's --json prints."""
    r = app.post("/reduce", {"runs": ["big"], "policy": "archive", "custom": {"keep": ["profile_xplane"]}})
    assert r.status_code == 202, r.get_data(as_text=True)
    job = app.wait_job(r.get_json()["job"]["id"])
    assert job["state"] == "done", job
    (o,) = [x for x in job["result"]["outcomes"] if x["run"] == "big"]
    assert o["status"] == "verified", o
    assert not any(c["name"] == "profile_xplane" and c["after"] == 0 for c in o["category_changes"])
    assert any(p.endswith(".xplane.pb") for p in file_shas(logdir, "big"))
    res = job["result"]
    assert res["plan"]["policy"]["name"] == "custom(archive)"
    for key in ("removed_from_logdir_bytes", "freed_on_disk_after_purge_bytes", "committed_any"):
        assert key in res
    assert res["removed_from_logdir_bytes"] == o["saved_bytes"] > 0
    assert "removed_files" not in res  # the tab does not need every path


# ---------------------------------------------------------------------------------------
# the tab at many runs (#28.4): one page sorted, filtered and paged here; bounded aggregates
# ---------------------------------------------------------------------------------------
def _many(root, n):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
    import tab as bench_tab

    bench_tab.generate(str(root), n)
    return bench_tab


@pytest.fixture
def many(tmp_path):
    return tmp_path / "many", _many(tmp_path / "many", 250)


def test_runs_are_paged_sorted_and_filtered_on_the_server(many):
    root, bench_tab = many
    a = App(root)
    try:
        d = a.get("/runs").get_json()
        assert (d["total"], d["run_count"], d["offset"], d["limit"], d["sort"], d["order"], d["q"]) == \
            (250, 250, 0, 100, "size", "desc", "")
        assert len(d["runs"]) == 100
        keys = [(-r["total_bytes"], r["name"]) for r in d["runs"]]
        assert keys == sorted(keys)  # by size, ties by name
        assert d["max_run_bytes"] == d["runs"][0]["total_bytes"]
        everything = []
        for offset in (0, 100, 200):
            page = a.get("/runs", query_string={"offset": offset}).get_json()["runs"]
            everything += [r["name"] for r in page]
        assert len(everything) == 250 and len(set(everything)) == 250  # pages neither overlap nor skip
        by_name = a.get("/runs", query_string={"sort": "name", "limit": 7}).get_json()
        assert by_name["order"] == "asc" and [r["name"] for r in by_name["runs"]] == \
            [bench_tab.run_name(i) for i in range(7)]
        last = a.get("/runs", query_string={"sort": "name", "order": "desc", "limit": 1}).get_json()["runs"]
        assert last[0]["name"] == bench_tab.run_name(249)
        reclaim = a.get("/runs", query_string={"sort": "reclaimable"}).get_json()["runs"]
        assert [r["removable_bytes"] for r in reclaim] == sorted((r["removable_bytes"] for r in reclaim), reverse=True)
        # the filter: case-insensitive, its total and sums beside the page
        f = a.get("/runs", query_string={"q": "GROUP_0001/"}).get_json()
        assert f["total"] == 100 and {r["name"].split("/")[0] for r in f["runs"]} == {"group_0001"}
        assert f["matched"]["runs"] == 100 and f["matched"]["total_bytes"] == sum(r["total_bytes"] for r in f["runs"])
        assert f["run_count"] == 250 and f["total_bytes"] == d["total_bytes"]  # the logdir's totals stay
        assert a.get("/runs", query_string={"q": "nothing-like-this"}).get_json()["total"] == 0
        for bad in ({"sort": "colour"}, {"order": "up"}, {"limit": "0"}, {"limit": "501"}, {"offset": "-1"},
                    {"offset": "x"}, {"q": "x" * 501}):
            r = a.get("/runs", query_string=bad)
            assert r.status_code == 400, (bad, r.get_data(as_text=True))
        # the map: folders of runs once they are more than 150 runs, each with its bytes per category
        m = d["map"]
        assert m["level"] == "group" and {t["name"] for t in m["tiles"]} == {"group_0000", "group_0001", "group_0002"}
        assert sum(t["total_bytes"] for t in m["tiles"]) == d["total_bytes"]
        assert all(sum(t["categories"].values()) == t["total_bytes"] for t in m["tiles"])
        s = a.get("/summary").get_json()
        assert "runs" not in s and s["map"] == m
    finally:
        a.close()


def test_runs_and_summary_payloads_do_not_grow_with_the_number_of_runs(tmp_path, monkeypatch):
    from tb_footprint_plugin.plugin import read_routes

    # the map holds at most MAP_TILES rectangles: made small here, both logdirs reach it (as
    # 20,000 runs in folders of 100 reach 150), so only growth with the runs would show
    monkeypatch.setattr(read_routes, "MAP_TILES", 2)
    sizes = {}
    for n in (160, 1600):
        root = tmp_path / f"n{n}"
        _many(root, n)
        a = App(root)
        try:
            sizes[n] = (len(a.get("/runs").get_data()), len(a.get("/summary").get_data()))
            assert a.get("/runs").get_json()["run_count"] == n
        finally:
            a.close()
    (runs_small, summary_small), (runs_big, summary_big) = sizes[160], sizes[1600]
    assert runs_big <= 1.05 * runs_small, sizes
    assert summary_big <= 1.05 * summary_small, sizes


def test_a_rescan_of_an_unchanged_logdir_keeps_the_overview(many):
    root, _ = many
    a = App(root)
    try:
        policy = a.plugin.routes._policy(None)
        first = a.plugin.routes.runs_index(a.plugin.scans.peek(), policy)
        a.fresh_scan()
        fp = a.plugin.scans.peek()
        assert a.plugin.routes.runs_index(fp, policy) is first  # no second plan of the same logdir
        _write_run(str(root / "fresh"), seed=4, steps=5)
        _age(str(root))
        a.fresh_scan()
        d = a.get("/runs", query_string={"q": "fresh"}).get_json()
        assert d["total"] == 1 and d["run_count"] == 251
    finally:
        a.close()


def test_reduce_all_matching_sends_a_selector_not_names(app, logdir):
    # the dry run of every matching run: totals and a bounded list of plans
    p = app.get("/plan", query_string={"q": "i"}).get_json()
    names = {r["name"] for r in app.get("/runs", query_string={"q": "i"}).get_json()["runs"]} - {api.UNATTRIBUTED}
    assert names >= {"big", "mid"} and "small" not in names
    assert p["matched_runs"] == len(names) and p["todo_runs"] == 2 and {r["run"] for r in p["runs"]} == {"big", "mid"}
    assert p["removable_bytes"] == sum(r["removable_bytes"] for r in p["runs"])
    small = app.get("/plan", query_string={"q": "small"}).get_json()
    nothing = app.post("/reduce", {"match": {"q": "small"}, "digest": small["digest"]})
    assert nothing.status_code == 409, nothing.get_data(as_text=True)  # scalars only: nothing to reduce
    assert app.post("/reduce", {"match": {"q": 3}, "digest": small["digest"]}).status_code == 400
    assert app.post("/reduce", {"match": {"glob": "*"}, "digest": small["digest"]}).status_code == 400
    assert app.post("/reduce", {"match": {"q": "MID"}}).status_code == 400  # no digest: nothing confirmed
    mid = app.get("/plan", query_string={"q": "MID"}).get_json()
    r = app.post("/reduce", {"match": {"q": "MID"}, "digest": mid["digest"]})
    assert r.status_code == 202, r.get_data(as_text=True)
    job = app.wait_job(r.get_json()["job"]["id"])
    assert job["runs"] == ["mid"] and job["state"] == "done"
    assert [o["status"] for o in job["result"]["outcomes"]] == ["verified"]


def test_reduce_all_matching_refuses_a_run_that_appeared_after_the_plan(app, logdir):
    # the dialog showed big and mid; a new matching run lands before the click: nothing is reduced
    p = app.get("/plan", query_string={"q": "i"}).get_json()
    assert p["todo_runs"] == 2 and {r["run"] for r in p["runs"]} == {"big", "mid"}
    _write_run(str(logdir / "mini"), seed=4, sessions=1)
    _age(str(logdir / "mini"))
    app.fresh_scan()
    before = tree_hash(logdir)
    r = app.post("/reduce", {"match": {"q": "i"}, "digest": p["digest"]})
    assert r.status_code == 409, r.get_data(as_text=True)
    body = r.get_json()
    assert body["reason_code"] == api.Skip.NOT_IN_PLAN and body["todo_runs"] == 3
    app.plugin.jobs.wait_all(60)
    assert tree_hash(logdir) == before and app.get("/jobs").get_json()["jobs"] == []
    # the new plan names the new run; its digest acts on exactly its to-do list
    p2 = app.get("/plan", query_string={"q": "i"}).get_json()
    assert p2["todo_runs"] == 3 and p2["digest"] != p["digest"]
    r = app.post("/reduce", {"match": {"q": "i"}, "digest": p2["digest"]})
    assert r.status_code == 202, r.get_data(as_text=True)
    job = app.wait_job(r.get_json()["job"]["id"])
    assert sorted(job["runs"]) == ["big", "mid", "mini"] and job["state"] == "done"
    assert sorted(o["run"] for o in job["result"]["outcomes"] if o["status"] == "verified") == ["big", "mid", "mini"]


def test_reduce_all_matching_never_acts_on_a_run_the_dialog_left_alone(logdir):
    # mid is being written when the plan is shown ("left alone"), then goes quiet before the click
    now = time.time()
    for n in os.listdir(logdir / "mid"):
        os.utime(logdir / "mid" / n, (now, now))
    # big's symlinked session was made just now too (_age leaves links alone): age the link itself
    os.utime(logdir / "big" / "plugins" / "linked_profile", (OLD, OLD), follow_symlinks=False)
    a = App(logdir, footprint_quiet_period=600.0)
    try:
        p = a.get("/plan", query_string={"q": ""}).get_json()
        assert {r["run"] for r in p["runs"]} == {"big"}, json.dumps(p)[:1500]
        assert "mid" in {s["run"] for s in p["skipped"]}
        _age(str(logdir / "mid"))
        a.fresh_scan()
        mid = file_shas(logdir, "mid")
        r = a.post("/reduce", {"match": {"q": ""}, "digest": p["digest"]})
        assert r.status_code == 409, r.get_data(as_text=True)
        a.plugin.jobs.wait_all(60)
        assert file_shas(logdir, "mid") == mid and a.get("/jobs").get_json()["jobs"] == []
    finally:
        a.close()


def test_a_job_over_100000_runs_polls_a_bounded_payload(app):
    # the tab polls /job every 700 ms: a count, the first names and the runs in progress, never 100,000 names
    from tb_footprint_plugin.plugin.jobs import MOVING_LISTED, RUNS_SAMPLE, Job

    names = [f"sweep/trial_{i:06d}" for i in range(100_000)]
    go = threading.Event()
    job = Job("reduce", names, {"policy": "archive"}, cancel_token=api.CancelToken())

    def work(j):
        for i, n in enumerate(names[:30]):
            j.report(n, "backup", 0.5)
            if i < 20:
                j.finish_run(n, "verified")
        go.wait(60)
        return {"outcomes": [], "committed_any": False}

    # this thread's CPU time, not the wall clock: under a loaded CI (load ~17 on 2 cores) the wall
    # took 2.9 s for 0.13 s of CPU; a sum over all runs per report would take hours of either
    t0 = time.thread_time()
    for n in names:  # a report costs the same whatever the number of runs (no sum over all of them)
        job.report(n, "queued", 0.0)
    assert time.thread_time() - t0 < 5.0
    app.plugin.jobs.submit(job, work)
    try:
        deadline = time.monotonic() + 30
        while job.to_dict()["runs_done"] < 20 and time.monotonic() < deadline:
            time.sleep(0.02)
        r = app.get("/job", query_string={"id": job.id})
        assert r.status_code == 200
        assert len(r.get_data()) < 12_000, len(r.get_data())
        d = r.get_json()["job"]
        assert d["run_count"] == 100_000 and d["runs_truncated"] is True and d["runs"] == names[:RUNS_SAMPLE]
        assert d["runs_done"] == 20 and abs(d["fraction"] - (20 + 10 * 0.5) / 100_000) < 1e-4
        moving = [n for n, p in d["per_run"].items() if p["step"] == "backup"]
        assert moving == names[20:30] and len(d["per_run"]) <= RUNS_SAMPLE + MOVING_LISTED
        assert d["cancellable"] is True  # every unfinished run is before its commit point
        job.report(names[25], "swap", 0.8)
        assert job.to_dict()["cancellable"] is False
        status = app.get("/status").get_json()
        assert len(json.dumps(status)) < 20_000
    finally:
        go.set()
        app.plugin.jobs.wait_all(60)
