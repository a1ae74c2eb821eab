"""``routes.prewarm`` as the first TensorBoard import of a process leaves TensorBoard's S3 and
fsspec clients to their first use (issue #28 item 3, fixed cost).

Before: the prewarm's thread imported ``tensorboard.default`` first thing, whose graphs plugin
imports TensorBoard's file layer (``tensorflow_stub.io.gfile``), which imported boto3, botocore
and fsspec on that thread (0.13-0.19 s of a core measured, for ``s3://`` and fsspec paths the
verification never reads): ``views.import_tensorboard_io`` defers them only when it is the one
that imports gfile, while no other thread runs. Today a reduce's plan imports gfile before the
prewarm starts; a prewarm started earlier (or first, as a test's crawl does) paid them. Each
check runs in an interpreter of its own: another test may have imported them in this one.
"""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_FIRST = textwrap.dedent("""
    import importlib.util, json, sys, threading
    sys.path.insert(0, {repo!r})
    from tb_footprint_plugin.verify import routes
    assert threading.active_count() == 1, threading.enumerate()
    assert "tensorboard.compat.tensorflow_stub.io.gfile" not in sys.modules
    routes.prewarm()
    routes.make_app({logdir!r}, None)  # waits for the prewarm's thread
    from tensorboard.compat.tensorflow_stub.io import gfile
    loaded = [m for m in ("boto3", "botocore", "fsspec")
              if getattr(sys.modules.get(m), "__file__", None)]
    print(json.dumps({{"loaded": loaded, "s3": gfile.S3_ENABLED,
                      "s3_registered": "s3" in gfile._REGISTERED_FILESYSTEMS,
                      "boto3_installed": importlib.util.find_spec("boto3") is not None,
                      "fsspec": gfile.FSSPEC_ENABLED,
                      "fsspec_installed": importlib.util.find_spec("fsspec") is not None}}))
""")


def test_a_first_prewarm_imports_no_s3_or_fsspec_client(tmp_path):
    code = _FIRST.format(repo=str(REPO), logdir=str(tmp_path / "nothing-here"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["loaded"] == [], got
    # what TensorBoard offers is still offered: its S3 filesystem registered where boto3 is
    # installed, fsspec paths where fsspec is (each imported at its first use)
    assert got["s3"] == got["s3_registered"] == got["boto3_installed"], got
    assert got["fsspec"] == got["fsspec_installed"], got


_WAIT = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {repo!r})
    from tb_footprint_plugin.verify import routes
    none = routes.prewarm_waited()
    routes.prewarm()
    routes.make_app({logdir!r}, None)  # at once: the imports are under way
    first = routes.prewarm_waited()
    routes.make_app({logdir!r}, None)  # the prewarm is done: no wait
    print(json.dumps({{"none": none, "first": first, "second": routes.prewarm_waited()}}))
""")


def test_make_app_counts_the_seconds_it_waited_for_the_prewarm(tmp_path):
    """``routes.prewarm_waited``: what the bench prints beside a reduce (how long the route
    crawl stood still until TensorBoard's app imports were done)."""
    code = _WAIT.format(repo=str(REPO), logdir=str(tmp_path / "nothing-here"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["none"] == 0.0, got
    # TensorBoard's first-party plugins take tens of milliseconds to import at the very least
    assert got["first"] > 0.02, got
    assert got["second"] == got["first"], got
