"""``verify.original.warm_up`` (issue #28 item 3): the imports a reduce's verification waits for
(gRPC and TensorBoard's provider, then TensorBoard's app) started on one thread, the client
first, so that a reduce's start can overlap them with its recovery and scan. Judged in a fresh
interpreter: this one imported them long ago."""
import json
import os
import subprocess
import sys
import textwrap

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
