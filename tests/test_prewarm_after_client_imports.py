"""A reduce's plan imports gRPC and TensorBoard's provider before it starts TensorBoard's app
imports (issue #28 item 3): the plan's load of the original needs them to reach its data server,
and imported beside the app's imports (the two threads sharing the GIL) they took 0.13-0.17 s
instead of ~0.05 s of a fresh 20 MB reduce, with the plan waiting on them. Judged in a fresh
interpreter: this one has imported them long ago."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tb_footprint_plugin.verify import data_server_binary

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

needs_rust = pytest.mark.skipif(data_server_binary() is None, reason="no data server binary")

_MAKE_RUN = """
import os, random
from tb_footprint_plugin import synth

def make_run(run):
    # two histogram tags a step: more than the 500 the default view keeps, so the plan's
    # selection asks the Rust data server which it keeps
    rng = random.Random(0)
    os.makedirs(run)
    with synth.EventWriter(run) as w:
        for step in range(600):
            w.scalar("loss", step, 1.0 / (step + 1))
            for tag in ("layer1/weight", "layer2/weight"):
                w.histogram(tag, step, [rng.gauss(0, 1) for _ in range(40)])
    old = 1_700_000_000
    for d, dirs, files in os.walk(os.path.dirname(run)):
        for n in files + dirs:
            os.utime(os.path.join(d, n), (old, old))
    os.utime(os.path.dirname(run), (old, old))

def client_imported():
    import sys
    grpc, provider = sys.modules.get("grpc"), sys.modules.get("tensorboard.data.grpc_provider")
    # fully imported, not under way in another thread
    return (hasattr(grpc, "insecure_channel") and hasattr(provider, "GrpcDataProvider"))
"""


def _fresh(tmp_path, body: str) -> dict:
    script = tmp_path / "probe.py"
    script.write_text(_MAKE_RUN + textwrap.dedent(body))
    env = dict(os.environ, PYTHONPATH=REPO, XDG_CACHE_HOME=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@needs_rust
def test_load_now_calls_meanwhile_once_the_client_is_imported(tmp_path):
    got = _fresh(tmp_path, """
        import json, sys
        from tb_footprint_plugin.verify.original import OriginalRun
        run = os.path.join(sys.argv[1], "logdir", "run")
        make_run(run)
        assert not client_imported()
        seen = []
        o = OriginalRun(run)
        reader = o.load_now(timeout_s=120, meanwhile=lambda: seen.append(client_imported()))
        fatal = reader.view.fatal
        o.close()
        print(json.dumps({"seen": seen, "fatal": fatal}))
    """)
    assert got == {"seen": [True], "fatal": None}


@needs_rust
def test_a_fresh_reduce_starts_the_app_imports_after_the_client_imports(tmp_path):
    got = _fresh(tmp_path, """
        import json, sys
        from tb_footprint_plugin import api
        from tb_footprint_plugin.verify import routes
        logdir = os.path.join(sys.argv[1], "logdir")
        make_run(os.path.join(logdir, "run"))
        assert not client_imported()
        seen, real = [], routes.prewarm

        def prewarm():
            seen.append(client_imported())
            real()

        routes.prewarm = prewarm
        rep = api.reduce_logdir(logdir, policy="archive", dry_run=False)
        print(json.dumps({"seen": seen[:1], "statuses": [str(getattr(o.status, "value", o.status))
                                                         for o in rep.outcomes],
                          "ok": rep.outcomes[0].verification["ok"]}))
    """)
    assert got == {"seen": [True], "statuses": ["verified"], "ok": True}
