"""Review R16 F5: Ctrl-C during ``restore --all`` left the runs restored before it unnamed.

``--all`` is one library call, so the CLI had no outcome to print when the interrupt came: stdout
held only the plan (with ``--json`` it was empty, not JSON) though most runs were back. The library
now hands each run's outcome to the caller as it lands (``api.restore(on_outcome=)``), and the CLI
prints those before settling the run under way."""
import json
import subprocess
import sys

from helpers_cli import cli_env
from test_ctrlc_restore_purge import reduced_logdir
from tb_footprint_plugin import api

#: the CLI in a child; SIGINT sent to itself at the Nth hit of one failpoint
CHILD = r"""
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from tb_footprint_plugin.engine import faults
at, nth, orig = sys.argv[1], int(sys.argv[2]), faults.hit
seen = [0]
def hit(name, *a, **k):
    if name == at:
        seen[0] += 1
        if seen[0] == nth:
            os.kill(os.getpid(), signal.SIGINT)
    return orig(name, *a, **k)
faults.hit = hit
from tb_footprint_plugin import cli
sys.exit(cli.main(sys.argv[3:]))
"""


def _interrupt_second_run(logdir, *extra):
    # restore.dirs is hit once a run: its second hit is inside the second run's restore
    return subprocess.run([sys.executable, "-c", CHILD, "restore.dirs", "2", "restore", str(logdir), "--all",
                           "--yes", *extra], env=cli_env(), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=300)


def test_ctrl_c_in_restore_all_names_the_runs_restored_before(tmp_path):
    logdir = reduced_logdir(tmp_path)
    first = api.restorable(str(logdir))[0]["run"]  # newest first: the order restore takes them
    r = _interrupt_second_run(logdir)
    assert r.returncode == 130, (r.stdout, r.stderr)
    done = [line for line in r.stdout.splitlines() if line.startswith("✓")]
    assert len(done) == 1 and first in done[0] and "restored" in done[0], r.stdout


def test_ctrl_c_in_restore_all_json_stays_json(tmp_path):
    logdir = reduced_logdir(tmp_path)
    r = _interrupt_second_run(logdir, "--json")
    assert r.returncode == 130, (r.stdout, r.stderr)
    doc = json.loads(r.stdout)
    assert doc["interrupted"] is True and doc["verb"] == "restore", doc
    assert [o["status"] for o in doc["outcomes"]] == ["restored"], doc
