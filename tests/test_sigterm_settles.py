"""Review R16 F19: SIGTERM — the stop signal of `timeout`, systemd, Slurm and Kubernetes, whose
grace period is meant for cleaning up — killed a reduce silently: exit 124/143 with nothing said,
a staging file left in the user's run, the run left for the next start. It is now taken as Ctrl-C
is: the run under way is settled in process (rolled back before its commit point), stderr says so,
and the exit code is 143."""
import os
import signal
import subprocess
import sys
import time

from conftest import copy_real, user_files
from helpers_cli import cli_env
from tb_footprint_plugin import api

OLD = time.time() - 3600

#: the CLI in a child; SIGTERM sent to itself inside one step of the reduce
CHILD = r"""
import os, signal, sys
from tb_footprint_plugin.engine import faults
at, orig = sys.argv[1], faults.hit
def hit(name, *a, **k):
    if name == at and not getattr(hit, "done", False):
        hit.done = True
        os.kill(os.getpid(), signal.SIGTERM)
    return orig(name, *a, **k)
faults.hit = hit
from tb_footprint_plugin import cli
sys.exit(cli.main(sys.argv[2:]))
"""


def test_sigterm_in_a_reduce_rolls_the_run_back_and_exits_143(tmp_path):
    logdir = tmp_path / "L"
    copy_real("tf/keras_profiled", logdir / "a")
    for p in [logdir, *logdir.rglob("*")]:
        os.utime(p, (OLD, OLD), follow_symlinks=False)
    before = user_files(logdir)
    r = subprocess.run([sys.executable, "-c", CHILD, "reduce.stage", "reduce", str(logdir), "--yes",
                        "--verify", "python"], env=cli_env(), stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 143, (r.stdout, r.stderr)
    assert "interrupt" in r.stderr and "settling" in r.stderr, r.stderr
    assert user_files(logdir) == before  # rolled back: every file as it was, no staging file left
    assert not [p for p in logdir.rglob(".footprint-*")], list(logdir.rglob(".footprint-*"))
    st = api.status(str(logdir))
    assert st["unfinished_operations"] == [], st["unfinished_operations"]


def test_sigterm_restores_the_previous_handler():
    """main() installs its SIGTERM handler for the command only (the tab's process, or a test
    runner calling main, keeps its own)."""
    from tb_footprint_plugin import cli

    mine = signal.getsignal(signal.SIGTERM)
    assert cli.main(["--version"]) == 0
    assert signal.getsignal(signal.SIGTERM) is mine
