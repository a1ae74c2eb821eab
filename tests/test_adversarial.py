"""Attacks on a REAL TensorBoard process with the Footprint tab, replayed as a hostile party would.

Each test hashes the whole tree — the logdir (vault included) and a directory beside it that
attacks aim at — before and after, and asserts that nothing changed, besides the refusal the
attack must get:

* another local Unix user (created here with ``useradd``; the client runs as that user via
  ``setpriv``) talking to TensorBoard over 127.0.0.1 — and over a dual-stack socket, where it
  shows up as ``::ffff:127.0.0.1`` — gets no token and is refused on every write route, even
  holding the owner's token; the same client run as the owner is accepted (control);
* a page of another origin framing the tab (real headless Chromium): the plugin's own answers
  refuse to be framed, and the tab framed through TensorBoard's entry page or main page
  refuses to act, says why, and never asks for the token;
* DNS-rebinding reads (a foreign ``Host``) are refused on every read route;
* nested, oversized and over-long chunked bodies get 400 / 413.
"""
from __future__ import annotations

import base64
import hashlib
import http.client
import importlib.metadata
import json
import math
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tbproc import TensorBoard

PREFIX = "/data/plugin/footprint"
OLD = 1795000000
CHROMIUM = "/usr/bin/chromium"
TOKEN_HEADER = "X-Footprint-Token"
WRITE_ROUTES = [("/reduce", {"runs": ["big"]}), ("/restore", {"run": "big"}), ("/purge", {"confirm": True}),
                ("/purge", {"confirm": False}), ("/cancel", {"job": "abcdef"}), ("/rescan", {})]
READ_ROUTES = ["/status", "/runs", "/summary", "/run?run=big", "/plan", "/history", "/operations", "/jobs",
               "/policies", "/token", "/index.js", "/model.js"]

pytestmark = pytest.mark.skipif(
    not any(e.name == "footprint" for e in importlib.metadata.entry_points(group="tensorboard_plugins")),
    reason="the 'footprint' TensorBoard entry point is not installed: run `pip install -e .` first",
)


# ---------------------------------------------------------------------------------------
# the tree, hashed whole
# ---------------------------------------------------------------------------------------
def whole_tree(*roots) -> dict:
    """Every file (sha256, mode), symlink and directory under the roots. Left out: what a running
    TensorBoard writes for itself whatever the requests (the scan cache, lock files)."""
    out = {}
    for root in roots:
        root = str(root)
        for dirpath, dirnames, filenames in os.walk(root):
            rel_dir = os.path.relpath(dirpath, root)
            parts = rel_dir.split(os.sep)
            if ".tb-footprint" in parts and ("locks" in parts or "tmp" in parts):
                continue
            out[(root, rel_dir)] = "dir"
            for n in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                if n.startswith("scan-cache"):
                    continue
                p = os.path.join(dirpath, n)
                if os.path.islink(p):
                    out[(root, os.path.join(rel_dir, n))] = "link:" + os.readlink(p)
                    continue
                with open(p, "rb") as f:
                    out[(root, os.path.join(rel_dir, n))] = (hashlib.sha256(f.read()).hexdigest(),
                                                             os.lstat(p).st_mode)
    return out


def _write_run(run_dir, *, seed, sessions=0):
    from tb_footprint_plugin import synth

    with synth.EventWriter(run_dir) as w:
        for s in range(60):
            w.scalar("loss", s, math.exp(-s / 15.0) + 0.01 * seed)
    for i in range(sessions):
        synth.write_profile_session(run_dir, synth.session_name_for(synth.DEFAULT_TIMESTAMP + 60 * i),
                                    n_events=1500, with_caches=True, seed=seed * 10 + i)


def _age(root):
    for dirpath, dirnames, filenames in os.walk(root):
        for n in filenames + dirnames:
            p = os.path.join(dirpath, n)
            if not os.path.islink(p):
                os.utime(p, (OLD, OLD))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """``logs/`` (two runs, one reduced so the vault holds a backup) and ``outside/`` beside it."""
    base = tmp_path_factory.mktemp("adversarial")
    logs, outside = base / "logs", base / "outside"
    _write_run(str(logs / "big"), seed=1, sessions=2)
    _write_run(str(logs / "small"), seed=2)
    _write_run(str(outside / "precious"), seed=3, sessions=1)
    _age(str(logs))
    _age(str(outside))
    from tb_footprint_plugin import api

    report = api.reduce_logdir(str(logs), None, policy="archive", dry_run=False, runs=["big"],
                               quiet_period=0)
    assert any(o.status == "verified" for o in report.outcomes), report.to_dict()
    return base, logs, outside


@pytest.fixture(scope="module")
def tb(world):
    base, logs, _ = world
    t = TensorBoard(logs, log_path=str(base.parent / f"tb-adversarial-{os.getpid()}.log"))
    t.request("GET", PREFIX + "/runs?wait=60", timeout=90)
    yield t
    t.stop()


# ---------------------------------------------------------------------------------------
# a second Unix user, and an HTTP client running as it
# ---------------------------------------------------------------------------------------
CLIENT = r'''
import base64, http.client, json, sys
spec = json.loads(sys.stdin.read())
out = []
for r in spec["requests"]:
    conn = http.client.HTTPConnection(spec["host"], spec["port"], timeout=60)
    body = base64.b64decode(r["body"]) if r.get("body") is not None else None
    if r.get("chunked"):
        conn.putrequest(r["method"], r["path"], skip_host="Host" in r.get("headers", {}), skip_accept_encoding=True)
        for k, v in r.get("headers", {}).items():
            conn.putheader(k, v)
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        step = 65536
        try:
            for i in range(0, len(body), step):
                piece = body[i:i + step]
                conn.send(b"%x\r\n" % len(piece) + piece + b"\r\n")
            conn.send(b"0\r\n\r\n")
        except OSError:
            pass
    else:
        conn.request(r["method"], r["path"], body=body, headers=r.get("headers", {}))
    try:
        resp = conn.getresponse()
        out.append({"status": resp.status, "headers": dict(resp.getheaders()),
                    "body": resp.read().decode("utf-8", "replace")[:4000]})
    except OSError as e:
        out.append({"status": None, "error": str(e)})
    conn.close()
print(json.dumps(out))
'''


def _interpreter_for(uid, gid):
    """A Python the other user may execute (the venv's may live under a private home)."""
    for exe in (os.path.realpath(sys.executable), "/usr/bin/python3", shutil.which("python3") or ""):
        if not exe or not os.path.exists(exe):
            continue
        r = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", exe, "-c", "pass"],
                           capture_output=True, env={"PATH": "/usr/bin:/bin"}, cwd="/")
        if r.returncode == 0:
            return exe
    return None


class LocalUser:
    """A throw-away Unix user; ``run`` sends HTTP requests as that user."""

    def __init__(self):
        if os.geteuid() != 0:
            pytest.skip("creating a second Unix user needs root (CI runs as root)")
        for tool in ("useradd", "userdel", "setpriv"):
            if not shutil.which(tool):
                pytest.skip(f"{tool} is missing: cannot act as a second Unix user here")
        self.name = "fpadv" + secrets.token_hex(4)
        r = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", self.name],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"this machine cannot create a user (useradd: {r.stderr.strip()})")
        pw = pwd.getpwnam(self.name)
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        self.python = _interpreter_for(self.uid, self.gid)
        if self.python is None:
            self.remove()
            pytest.skip("no Python interpreter the second user may execute")

    def run(self, port, requests, *, as_owner=False, host="127.0.0.1"):
        spec = json.dumps({"host": host, "port": port, "requests": requests})
        cmd = [self.python, "-c", CLIENT]
        if not as_owner:
            cmd = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups"] + cmd
        r = subprocess.run(cmd, input=spec, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, cwd="/",
                           timeout=120)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def remove(self):
        subprocess.run(["userdel", self.name], capture_output=True)


@pytest.fixture(scope="module")
def other_user():
    u = LocalUser()
    yield u
    u.remove()


def _req(method, path, body=None, headers=None, chunked=False):
    raw = json.dumps(body).encode() if isinstance(body, dict) else body
    return {"method": method, "path": path, "headers": headers or {}, "chunked": chunked,
            "body": base64.b64encode(raw).decode() if raw is not None else None}


def _write_headers(token, port):
    return {"Content-Type": "application/json", TOKEN_HEADER: token, "Origin": f"http://127.0.0.1:{port}",
            "Host": f"127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"}


def _owner_token(t):
    status, _, body = t.request("GET", PREFIX + "/token")
    assert status == 200, body
    return json.loads(body)["token"]


# ---------------------------------------------------------------------------------------
# another local user
# ---------------------------------------------------------------------------------------
def _attack_as_other_user(t, user, roots):
    before = whole_tree(*roots)
    token = _owner_token(t)  # even the real token (leaked, say) must not help
    reqs = [_req("GET", PREFIX + "/token")]
    reqs += [_req("POST", PREFIX + route, body, _write_headers(token, t.port)) for route, body in WRITE_ROUTES]
    answers = user.run(t.port, reqs)
    tok = answers[0]
    assert tok["status"] == 403, tok
    body = json.loads(tok["body"])
    assert body["reason_code"] == "peer_not_owner" and "token" not in body, body
    assert user.name in body["error"], body["error"]
    for (route, _), a in zip(WRITE_ROUTES, answers[1:]):
        assert a["status"] == 403, (route, a)
        assert json.loads(a["body"])["reason_code"] == "peer_not_owner", (route, a["body"])
    # the owner, with the same client and the same requests, is let in (so the refusal above
    # is about who asks, not about how)
    mine = user.run(t.port, [_req("GET", PREFIX + "/token"),
                             _req("POST", PREFIX + "/rescan", {}, _write_headers(token, t.port))], as_owner=True)
    assert mine[0]["status"] == 200 and json.loads(mine[0]["body"])["token"] == token, mine[0]
    assert mine[1]["status"] == 202, mine[1]
    t.request("GET", PREFIX + "/runs?wait=60", timeout=90)
    assert whole_tree(*roots) == before


def test_other_local_user_gets_no_token_and_changes_nothing(tb, world, other_user):
    base, logs, outside = world
    _attack_as_other_user(tb, other_user, [logs, outside])


def test_other_local_user_over_a_dual_stack_socket(world, other_user):
    """``--bind_all`` listens on ``::`` with IPv4 mapped in: the client shows up as
    ``::ffff:127.0.0.1`` on the server side while its socket sits in /proc/net/tcp as IPv4."""
    base, logs, outside = world
    t = TensorBoard(logs, "--bind_all", "--footprint_allow_remote_actions",
                    log_path=str(base.parent / f"tb-adversarial-dual-{os.getpid()}.log"), host=None)
    try:
        _attack_as_other_user(t, other_user, [logs, outside])
    finally:
        t.stop()


# ---------------------------------------------------------------------------------------
# rebinding, bodies
# ---------------------------------------------------------------------------------------
def test_rebinding_reads_are_refused(tb, world):
    base, logs, outside = world
    before = whole_tree(logs, outside)
    for route in READ_ROUTES:
        for host in ("evil.example", f"evil.example:{tb.port}", "attacker.localhost.evil:80", "10.0.0.8"):
            status, headers, body = tb.request("GET", PREFIX + route, headers={"Host": host})
            assert status == 403, (route, host, status, body[:200])
            data = json.loads(body)
            assert data["reason_code"] == "foreign_host", data
            assert str(logs) not in body.decode(), (route, "the refusal leaks the logdir")
    status, _, _ = tb.request("GET", PREFIX + "/status", headers={"Host": f"localhost:{tb.port}"})
    assert status == 200
    assert whole_tree(logs, outside) == before


def test_nested_oversized_and_chunked_bodies(tb, world, other_user):
    base, logs, outside = world
    before = whole_tree(logs, outside)
    token = _owner_token(tb)
    h = _write_headers(token, tb.port)
    deep = b'{"runs": ' + b"[" * 100000 + b"]" * 100000 + b"}"
    big = b'{"runs": ["big"], "pad": "' + b"x" * (2 * 1024 * 1024) + b'"}'
    answers = other_user.run(tb.port, [
        _req("POST", PREFIX + "/reduce", deep, h),
        _req("POST", PREFIX + "/purge", deep, h, chunked=True),
        _req("POST", PREFIX + "/reduce", big, h),
        _req("POST", PREFIX + "/purge", big, h, chunked=True),
        _req("POST", PREFIX + "/reduce", b'{"runs": ["big"', h),
    ], as_owner=True)
    assert [a["status"] for a in answers] == [400, 400, 413, 413, 400], answers
    assert "nested" in json.loads(answers[0]["body"])["error"]
    assert "too large" in json.loads(answers[3]["body"])["error"]
    assert whole_tree(logs, outside) == before


# ---------------------------------------------------------------------------------------
# framing by another origin (real Chromium)
# ---------------------------------------------------------------------------------------
def _chromium():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium): framing tests skipped")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:  # pragma: no cover
        pytest.skip(f"playwright is not installed ({e})")
    return sync_playwright


class _EvilSite:
    """A page of another origin (another loopback port) that frames TensorBoard's pages."""

    def __init__(self, pages):
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                page = pages.get(self.path.split("?")[0])
                if page is None:
                    self.send_error(404)
                    return
                data = page.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_framing_by_another_origin(tb, world):
    sync_playwright = _chromium()
    base, logs, outside = world
    before = whole_tree(logs, outside)
    tbo = tb.base
    frame = ('<iframe id="f" style="opacity:0.01;position:absolute;top:0;left:0;width:1200px;height:900px" '
             'src="{src}"></iframe>')
    evil = _EvilSite({
        "/route.html": frame.format(src=tbo + PREFIX + "/status"),
        "/entry.html": frame.format(src=tbo + "/data/plugin_entry.html?name=footprint"),
        "/main.html": frame.format(src=tbo + "/#footprint"),
    })
    # the page of another origin is another port: same host, different origin
    assert evil.base.split(":")[-1] != str(tb.port)
    seen = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                        args=["--no-sandbox", "--disable-gpu", "--no-first-run"])
            try:
                ctx = browser.new_context(viewport={"width": 1300, "height": 1000})
                page = ctx.new_page()
                page.on("request", lambda r: seen.append((r.method, r.url)))

                # 1. the plugin's own answers refuse to be framed (X-Frame-Options / frame-ancestors)
                page.goto(evil.base + "/route.html")
                page.wait_for_timeout(1500)
                child = [f for f in page.frames if f != page.main_frame]
                assert child, "no frame at all"
                blocked = child[0]
                assert blocked.url.startswith("chrome-error://") or blocked.url in ("", "about:blank"), blocked.url
                assert "logdir" not in (blocked.content() or "")

                # 2. TensorBoard's entry page framed directly: the tab loads, refuses to act, says why
                page.goto(evil.base + "/entry.html")
                tab = page.frame_locator("#f")
                banner = tab.locator(".banner-readonly")
                banner.wait_for(timeout=60000)
                text = banner.inner_text()
                assert "another origin" in text and "foreign_frame" in text, text
                tab.locator(".row[data-run]").first.wait_for(timeout=60000)
                buttons = tab.locator("button.reduce-run")
                assert buttons.count() > 0
                assert all(buttons.nth(i).is_disabled() for i in range(buttons.count()))

                # 3. TensorBoard's main page framed (the tab inside it): its top is foreign too
                page.goto(evil.base + "/main.html")
                inner = page.frame_locator("#f").frame_locator('iframe[src*="name=footprint"]')
                banner = inner.locator(".banner-readonly")
                banner.wait_for(timeout=60000)
                assert "foreign_frame" in banner.inner_text()
                page.wait_for_timeout(1000)
            finally:
                browser.close()
    finally:
        evil.close()
    # the framed tab never asked for the token nor posted anything
    ours = [(m, u) for m, u in seen if u.startswith(tbo + PREFIX)]
    assert ours, "the framed tab did not load at all"
    assert not [u for m, u in ours if u.split("?")[0].endswith("/token")], ours
    assert not [u for m, u in ours if m != "GET"], ours
    assert whole_tree(logs, outside) == before


def test_the_tab_acts_when_tensorboard_itself_frames_it(tb):
    """Control for the framing test: TensorBoard's own page (top-level, same origin) framing the
    tab shows no framing banner and gets the token."""
    sync_playwright = _chromium()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--no-first-run"])
        try:
            page = browser.new_page()
            got_token = []
            page.on("response", lambda r: got_token.append(r.status) if r.url.endswith(PREFIX + "/token") else None)
            page.goto(tb.base + "/#footprint")
            tab = page.frame_locator('iframe[src*="name=footprint"]')
            tab.locator(".row[data-run]").first.wait_for(timeout=60000)
            page.wait_for_timeout(500)
            assert tab.locator(".banner-readonly").count() == 0
            assert got_token == [200]
        finally:
            browser.close()


# ---------------------------------------------------------------------------------------
# hostile state on disk: planted journals and manifests, a copied state directory
# ---------------------------------------------------------------------------------------
def _fresh(tmp_path, name="logs"):
    logs, outside = tmp_path / name, tmp_path / "outside"
    _write_run(str(logs / "big"), seed=1, sessions=1)
    _write_run(str(logs / "small"), seed=2)
    if not outside.exists():
        _write_run(str(outside / "precious"), seed=3, sessions=1)
        (outside / "victim.txt").write_text("must survive")
        (outside / "victimdir").mkdir()
        (outside / "victimdir" / "keep.txt").write_text("must survive too")
        _age(str(outside))
    _age(str(logs))
    from tb_footprint_plugin import api

    rep = api.reduce_logdir(str(logs), None, policy="archive", dry_run=False, runs=["big"], quiet_period=0)
    assert any(o.status == "verified" for o in rep.outcomes), rep.to_dict()
    return logs, outside


def _state(logs):
    return logs / ".tb-footprint"


def _identity(logs):
    with open(_state(logs) / "identity.json") as f:
        return json.load(f)


def _plant_journal(logs, file_op_id, records):
    d = _state(logs) / "journal"
    d.mkdir(parents=True, exist_ok=True)
    with open(d / f"{file_op_id}.jsonl", "w") as f:
        for r in records:
            f.write(json.dumps(dict(r, t=OLD)) + "\n")
    return d / f"{file_op_id}.jsonl"


def _begin(logs, op_id, *, run="big", vault=None, **extra):
    return dict({"type": "begin", "kind": "reduce", "op_id": op_id, "run": run, "logdir": str(logs),
                 "vault": str(vault or _state(logs)), "policy": {"name": "archive"}, "verify_backends": ["python"],
                 "plan": {"run": run, "bytes_before": 1, "expected_after_bytes": 0, "actions": []}}, **extra)


SHA = "ab" * 32


def _hostile_journals(logs, outside):
    """Journals an attacker who can write into the logdir plants; each names the code it must get."""
    ident = _identity(logs)
    vict = str(outside / "victim.txt")
    j = {}
    j["20260101T000000-aaaaaa"] = ("path_outside", [
        _begin(logs, "20260101T000000-aaaaaa", logdir_id=ident["id"]),
        {"type": "stage", "tmp": "../outside/victim.txt", "final": "big/x", "src": "big/x"}])
    j["20260101T000000-bbbbbb"] = ("path_outside", [
        _begin(logs, "20260101T000000-bbbbbb", logdir_id=ident["id"]),
        {"type": "stage", "tmp": vict, "final": "big/x", "src": "big/x"}])
    j["20260101T000000-cccccc"] = ("path_outside", [
        _begin(logs, "20260101T000000-cccccc", logdir_id=ident["id"]),
        {"type": "backup", "path": "../outside/precious", "sha256": SHA, "size": 1, "mode": 420, "mtime": 1.0,
         "action": "delete"}, {"type": "swap"}])
    j["20260101T000000-dddddd"] = ("path_outside", [
        _begin(logs, "20260101T000000-dddddd", logdir_id=ident["id"]),
        {"type": "rmdir", "path": str(outside / "newdir"), "mode": 493}, {"type": "swap"}])
    j["20260101T000000-eeeeee"] = ("bad_op_id", [_begin(logs, "../../outside/victimdir", logdir_id=ident["id"])])
    j["20260101T000000-ffffff"] = ("bad_digest", [
        _begin(logs, "20260101T000000-ffffff", logdir_id=ident["id"]),
        {"type": "backup", "path": "big/x", "sha256": "../../../outside/victim.txt", "size": 1, "mode": 420,
         "mtime": 1.0, "action": "delete"}, {"type": "swap"}])
    j["20260101T000000-a1a1a1"] = ("foreign_vault", [
        _begin(logs, "20260101T000000-a1a1a1", logdir_id=ident["id"], vault=str(outside))])
    j["20260101T000000-b2b2b2"] = ("foreign_journal", [
        _begin(logs, "20260101T000000-b2b2b2", logdir_id="0" * 32)])
    j["20260101T000000-c3c3c3"] = ("foreign_journal", [
        _begin(logs, "20260101T000000-c3c3c3", logdir=str(outside))])
    j["20260101T000000-d4d4d4"] = ("path_outside", [
        _begin(logs, "20260101T000000-d4d4d4", logdir_id=ident["id"]),
        {"type": "stage", "tmp": "big/not-a-temp-file.tfevents", "final": "big/x", "src": "big/x"}])
    for op_id, (_code, recs) in j.items():
        _plant_journal(logs, op_id, recs)
    # a scratch folder of a (valid) op id that is really a symlink to a directory outside
    (_state(logs) / "tmp").mkdir(exist_ok=True)
    os.symlink(str(outside / "victimdir"), str(_state(logs) / "tmp" / "20260101T000000-eeeeee"))
    return {op_id: code for op_id, (code, _) in j.items()}


def test_planted_journals_at_a_real_tensorboard_start(tmp_path):
    logs, outside = _fresh(tmp_path)
    expected = _hostile_journals(logs, outside)
    before = whole_tree(logs, outside)
    t = TensorBoard(logs, log_path=str(tmp_path / "tb.log"))
    try:
        deadline = 60
        import time

        for _ in range(deadline * 4):
            status = t.json(PREFIX + "/status")
            if status["recovery"]["state"] not in ("pending", "running"):
                break
            time.sleep(0.25)
        rec = status["recovery"]
        assert rec["state"] == "done", rec
        got = {o["op_id"]: (o["action"], o["code"]) for o in rec["outcomes"]}
        assert got == {op_id: ("refused", code) for op_id, code in expected.items()}, got
        assert "refused" in rec["detail"]
        t.request("GET", PREFIX + "/runs?wait=60", timeout=90)
    finally:
        t.stop()
    assert whole_tree(logs, outside) == before
    assert (outside / "victimdir" / "keep.txt").read_text() == "must survive too"


def test_planted_journals_via_cli_purge(tmp_path):
    logs, outside = _fresh(tmp_path)
    expected = _hostile_journals(logs, outside)
    before = whole_tree(logs, outside)
    r = subprocess.run(["tb-footprint", "purge", str(logs), "--json", "-n"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert {x["op_id"]: x["code"] for x in rep["refused"] if "op_id" in x} == expected
    assert whole_tree(logs, outside) == before
    r = subprocess.run(["tb-footprint", "purge", str(logs)], capture_output=True, text=True, timeout=300)
    assert "refused [path_outside]" in r.stdout and "refused [foreign_journal]" in r.stdout, r.stdout
    assert whole_tree(logs, outside) == before


def _plant_manifest(vault_root, op_id, m):
    d = os.path.join(str(vault_root), "ops")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"{op_id}.json"), "w") as f:
        json.dump(m, f)


def test_planted_manifests_never_lead_purge_out_of_the_vault(tmp_path):
    logs, outside = _fresh(tmp_path)
    # the file a traversal digest points at, as if it were a blob
    target = outside / "victim.txt"
    base = {"kind": "reduce", "run": "big", "logdir": str(logs), "outcome": "verified", "started_at": 1.0,
            "finished_at": 1.0, "backup_purged": False, "vault": str(outside)}
    _plant_manifest(_state(logs), "20260101T000001-aaaaaa", dict(base, op_id="20260101T000001-aaaaaa", files=[
        {"path": "big/x", "size": 12, "mode": 420, "mtime": 1.0, "action": "delete",
         "sha256": "../../../outside/victim.txt"}]))
    _plant_manifest(_state(logs), "20260101T000001-bbbbbb", dict(base, op_id="20260101T000001-bbbbbb", files=[
        {"path": "big/x", "size": 12, "mode": 420, "mtime": 1.0, "action": "delete", "sha256": SHA,
         "blob": "blobs/../../../outside/victim.txt"}]))
    _plant_manifest(_state(logs), "20260101T000001-cccccc", dict(base, op_id="20260101T000001-cccccc", files=[
        {"path": str(target), "size": 12, "mode": 420, "mtime": 1.0, "action": "delete", "sha256": SHA}]))
    _plant_manifest(_state(logs), "20260101T000001-dddddd", dict(base, op_id="../../outside/victimdir", files=[]))
    # the vault index naming the filesystem root and the outside folder as vaults
    with open(_state(logs) / "vaults.json", "w") as f:
        json.dump(["/", str(outside), "relative/vault", str(logs)], f)
    before = whole_tree(logs, outside)
    r = subprocess.run(["tb-footprint", "purge", str(logs), "--json", "-n"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    preview = json.loads(r.stdout)
    refused = {os.path.basename(x["file"]): x["code"] for x in preview["refused"] if "file" in x}
    assert refused == {"20260101T000001-aaaaaa.json": "bad_digest", "20260101T000001-bbbbbb.json": "path_outside",
                       "20260101T000001-cccccc.json": "path_outside", "20260101T000001-dddddd.json": "bad_op_id"}, refused
    # only the real reduction is listed, with its own size: never the outside file's
    assert [o["run"] for o in preview["ops"]] == ["big"]
    assert preview["originals_lost"] >= 1
    # purge for real through a real TensorBoard tab, then by CLI
    t = TensorBoard(logs, log_path=str(tmp_path / "tb.log"))
    try:
        token = _owner_token(t)
        status, _, body = t.request("POST", PREFIX + "/purge", body=json.dumps({"confirm": False}).encode(),
                                    headers=_write_headers(token, t.port))
        assert status == 200, body
        prev = json.loads(body)["preview"]
        assert [o["op_id"] for o in prev["ops"]] == [o["op_id"] for o in preview["ops"]]
        assert prev["freed_bytes"] == preview["freed_bytes"]
    finally:
        t.stop()
    r = subprocess.run(["tb-footprint", "purge", str(logs), "--yes"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "refused [bad_digest]" in r.stdout, r.stdout
    after = whole_tree(outside)
    assert after == {k: v for k, v in before.items() if k[0] == str(outside)}
    assert target.read_text() == "must survive"


def test_state_copied_from_another_logdir_is_reported_not_replayed(tmp_path):
    src, outside = _fresh(tmp_path, "source")
    # an unfinished (valid, replayable) operation in the source logdir's own state
    ident = _identity(src)
    op = "20260101T000002-abcdef"
    _plant_journal(src, op, [_begin(src, op, logdir_id=ident["id"])])
    # the target logdir: the same runs, and the source's whole state directory copied in (a
    # tarball of logs including .tb-footprint/, or a planted folder)
    dst = tmp_path / "target"
    shutil.copytree(str(src), str(dst), symlinks=True)
    before = whole_tree(src, dst, outside)
    t = TensorBoard(dst, log_path=str(tmp_path / "tb.log"))
    try:
        import time

        for _ in range(240):
            status = t.json(PREFIX + "/status")
            if status["recovery"]["state"] not in ("pending", "running"):
                break
            time.sleep(0.25)
        outs = status["recovery"]["outcomes"]
        assert [(o["op_id"], o["action"], o["code"]) for o in outs] == [(op, "refused", "foreign_state")], outs
        ops = t.json(PREFIX + "/operations")["operations"]
        assert ops == [], "operations of another logdir's vault are not offered"
    finally:
        t.stop()
    r = subprocess.run(["tb-footprint", "purge", str(dst), "--yes"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "refused [foreign_state]" in r.stdout, r.stdout
    r = subprocess.run(["tb-footprint", "status", str(dst)], capture_output=True, text=True, timeout=300)
    assert "foreign_state" in r.stdout, r.stdout
    assert whole_tree(src, dst, outside) == before
    # the source itself still settles its own journal
    from tb_footprint_plugin import api

    outs = api.recover_logdir(str(src))
    assert [(o.op_id, o.action) for o in outs] == [(op, "rolled_back")]


def test_old_state_without_identity_keeps_working(tmp_path):
    """State written before identities existed is adopted on first use: its journals replay."""
    logs, outside = _fresh(tmp_path)
    os.unlink(_state(logs) / "identity.json")
    # as an older version wrote it: no logdir_id in the manifests either
    for n in os.listdir(_state(logs) / "ops"):
        p = _state(logs) / "ops" / n
        m = json.loads(p.read_text())
        m.pop("logdir_id", None)
        p.write_text(json.dumps(m))
    op = "20260101T000003-abcdef"
    _plant_journal(logs, op, [_begin(logs, op)])  # an old journal: no logdir_id, the right logdir path
    from tb_footprint_plugin import api

    outs = api.recover_logdir(str(logs))
    assert [(o.op_id, o.action) for o in outs] == [(op, "rolled_back")]
    assert (_state(logs) / "identity.json").exists()
    ops = api.operations(str(logs))
    assert any(o["op_id"] == op for o in ops) and any(o["outcome"] == "verified" for o in ops)


def test_a_deleted_identity_is_taken_back_from_the_manifests(tmp_path):
    logs, outside = _fresh(tmp_path)
    old_id = _identity(logs)["id"]
    os.unlink(_state(logs) / "identity.json")
    from tb_footprint_plugin import api

    assert api.recover_logdir(str(logs)) == []
    op = "20260101T000004-abcdef"
    _plant_journal(logs, op, [_begin(logs, op)])
    api.recover_logdir(str(logs))
    assert _identity(logs)["id"] == old_id
    assert any(o["outcome"] == "verified" for o in api.operations(str(logs)))


def test_a_valid_journal_cannot_unlink_through_a_symlinked_folder(tmp_path):
    """Well formed and bound to this logdir, but its run holds a folder that is a symlink to a
    directory outside: recovery does not follow it (the journal stays, the failure is said)."""
    logs, outside = _fresh(tmp_path)
    op = "20260101T000005-abcdef"
    bait = outside / "victimdir" / f".footprint-{op}-0.tmp"
    bait.write_text("outside: must survive")
    os.symlink(str(outside / "victimdir"), str(logs / "big" / "evil"))
    _plant_journal(logs, op, [
        _begin(logs, op, logdir_id=_identity(logs)["id"]),
        {"type": "stage", "tmp": f"big/evil/.footprint-{op}-0.tmp", "final": "big/evil/x", "src": "big/x"}])
    before = whole_tree(logs, outside)
    from tb_footprint_plugin import api

    outs = api.recover_logdir(str(logs))
    assert [(o.op_id, o.action) for o in outs] == [(op, "failed")], outs
    assert "symlink" in outs[0].detail
    assert bait.read_text() == "outside: must survive"
    assert whole_tree(logs, outside) == before


@pytest.mark.parametrize("plant", ["symlink", "fifo", "directory"])
def test_a_planted_history_file_is_never_followed_or_opened(tmp_path, plant):
    """``.tb-footprint/history.jsonl`` replaced by a symlink to a file outside the logdir (or a
    FIFO, or a folder): the next operation's history line never lands outside, never blocks; the
    planted thing is renamed aside (the link itself) and a fresh history started."""
    from tb_footprint_plugin import api

    logs, outside = _fresh(tmp_path)
    _write_run(str(logs / "second"), seed=4, sessions=1)
    _age(str(logs))
    hist = _state(logs) / "history.jsonl"
    os.replace(hist, tmp_path / "old-history.jsonl")
    if plant == "symlink":
        os.symlink(str(outside / "victim.txt"), str(hist))
    elif plant == "fifo":
        os.mkfifo(str(hist))
    else:
        hist.mkdir()
    before = whole_tree(outside)
    rep = api.reduce_logdir(str(logs), None, policy="archive", dry_run=False, runs=["second"], quiet_period=0)
    assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
    assert whole_tree(outside) == before and (outside / "victim.txt").read_text() == "must survive"
    assert hist.is_file() and not hist.is_symlink()
    (aside,) = [p for p in _state(logs).iterdir() if p.name.startswith("history.jsonl.refused-")]
    assert {"symlink": aside.is_symlink, "fifo": lambda: not aside.is_file() and not aside.is_dir(),
            "directory": aside.is_dir}[plant]()
    assert [(e["run"], e["outcome"]) for e in api.history(str(logs))] == [("second", "verified")]
