"""A second Ctrl-C that lands between a verb's interrupt and its settling is ignored, as it is
while settling (review R8 F2): ``_interruptible.__exit__`` put Python's default handler back and
``_interrupted`` ignored SIGINT only on its first line, so a second Ctrl-C (or SIGTERM, taken as
one) in between escaped ``cmd_reduce``'s own settling into ``_main``'s fallback, which said of a
reduce "it changes nothing, nothing was changed" with no settled lines and no JSON. The second
signal is sent at the first line of ``_interrupted``, the instant that window closed, as a user
pressing Ctrl-C twice does; the process that called ``main`` (a notebook) gets its handler back."""
import os
import subprocess
import sys
import time

from conftest import copy_real, user_files
from helpers_cli import cli_env
from tb_footprint_plugin import api

OLD = time.time() - 3600

CHILD = r"""
import os, signal, sys
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin import cli
at, orig = sys.argv[1], faults.hit
def hit(name, *a, **k):
    if name == at and not getattr(hit, "done", False):
        hit.done = True
        os.kill(os.getpid(), signal.SIGINT)       # the first Ctrl-C, inside a step
    return orig(name, *a, **k)
faults.hit = hit
settle = cli._interrupted
def second(*a, **k):
    os.kill(os.getpid(), signal.SIGINT)           # the second one, before the settling begins
    return settle(*a, **k)
cli._interrupted = second
rc = cli.main(sys.argv[2:])
print("handler back:", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
sys.exit(rc)
"""


def test_a_second_ctrl_c_before_settling_is_ignored_and_the_run_settled(tmp_path):
    logdir = tmp_path / "L"
    copy_real("tf/keras_profiled", logdir / "a")
    for p in [logdir, *logdir.rglob("*")]:
        os.utime(p, (OLD, OLD), follow_symlinks=False)
    before = user_files(logdir)
    r = subprocess.run([sys.executable, "-c", CHILD, "reduce.stage", "reduce", str(logdir), "--yes",
                        "--verify", "python"], env=cli_env(), stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 130, (r.stdout, r.stderr)
    assert "settling what it left" in r.stderr and "nothing was changed" not in r.stderr, r.stderr
    assert "handler back: True" in r.stdout, r.stdout
    assert user_files(logdir) == before, "the run was left half-reduced"
    assert api.status(str(logdir))["unfinished_operations"] == [], r.stderr
