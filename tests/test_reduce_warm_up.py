"""``verify.original.warm_up`` (issue #28 item 3): the imports a reduce's verification waits for
(gRPC and TensorBoard's provider, then TensorBoard's app) started on one thread, the client
first, so that a reduce's start can overlap them with its recovery and scan. Judged in a fresh
interpreter: this one imported them long ago. And a reduce starts it before its scan, a dry run
never."""
import json
import os
import subprocess
import sys
import textwrap

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.api import survey
from tb_footprint_plugin.engine import front_local

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_PROBE = """
import json, sys, threading

def client_imported():
    grpc, provider = sys.modules.get("grpc"), sys.modules.get("tensorboard.data.grpc_provider")
    # fully imported, not under way in another thread
    return hasattr(grpc, "insecure_channel") and hasattr(provider, "GrpcDataProvider")
"""


def _fresh(tmp_path, body: str) -> dict:
    script = tmp_path / "probe.py"
    script.write_text(_PROBE + textwrap.dedent(body))
    env = dict(os.environ, PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_warm_up_imports_the_client_then_the_app_on_one_thread_once(tmp_path):
    got = _fresh(tmp_path, """
        from tb_footprint_plugin.verify import original, routes
        assert not client_imported()
        seen, real = [], routes.prewarm

        def prewarm():
            seen.append((threading.current_thread().name, client_imported()))
            real()

        routes.prewarm = prewarm
        t = original.warm_up()
        again = original.warm_up()
        t.join(120)
        app = next(x for x in threading.enumerate() if x.name == "footprint-tb-imports")
        app.join(120)
        print(json.dumps({"thread": t.name, "again": again, "seen": seen, "client": client_imported(),
                          "app_built": not app.is_alive() and "tensorboard.backend.application" in sys.modules,
                          # the file layer was imported in the caller's thread: gfile's S3 client deferred
                          "boto3": "boto3" in sys.modules}))
    """)
    assert got == {"thread": "footprint-warm-up", "again": None, "seen": [["footprint-warm-up", True]],
                   "client": True, "app_built": True, "boto3": False}


def _noting(monkeypatch) -> list:
    seen: list = []
    real_scan = survey.scan
    monkeypatch.setattr(front_local, "warm_up", lambda: seen.append("warm_up"))

    def scan(*a, **kw):
        seen.append("scan")
        return real_scan(*a, **kw)

    monkeypatch.setattr(survey, "scan", scan)
    return seen


def _logdir(tmp_path):
    run = tmp_path / "logdir" / "run"
    run.mkdir(parents=True)
    with synth.EventWriter(str(run)) as w:
        for step in range(3):
            w.scalar("loss", step, 1.0 / (step + 1))
    return str(tmp_path / "logdir")


def test_a_reduce_warms_up_before_its_scan(tmp_path, monkeypatch):
    seen = _noting(monkeypatch)
    api.reduce_logdir(_logdir(tmp_path), policy="archive", dry_run=False, quiet_period=0)
    assert seen[:2] == ["warm_up", "scan"]


def test_a_dry_run_does_not_warm_up(tmp_path, monkeypatch):
    seen = _noting(monkeypatch)
    api.reduce_logdir(_logdir(tmp_path), policy="archive", dry_run=True, quiet_period=0)
    assert "warm_up" not in seen and "scan" in seen
