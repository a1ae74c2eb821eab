"""Ctrl-C during ``restore`` and ``purge`` settles the operation under way in process, as every
changing verb's ``--help`` says (review R14 F6).

Before, only reduce and retire ran under ``cli._interruptible``: a Ctrl-C in a restore exited 130
saying the operation "is settled by the next start", and ``status`` then showed an unfinished
restore, while ``restore --help`` promised the run under way was settled. Now restore and purge
settle it before exiting 130 (a restore under way is finished, a purge finished from its
recorded intent), and the help says per verb what happens.

A real SIGINT is sent to a child process (the CLI's own handler runs), from inside the step of
the verb where it is most awkward: one restored file in, or right after the purge's intent.
"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import copy_real
from helpers_cli import cli_env, run_cli
from tb_footprint_plugin import api

OLD = time.time() - 3600

#: the CLI in a child, SIGINT (at its default, as on a terminal) sent to itself at one failpoint
CHILD = r"""
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from tb_footprint_plugin.engine import faults
at, orig = sys.argv[1], faults.hit
def hit(name, *a, **k):
    if name == at and not getattr(hit, "done", False):
        hit.done = True
        os.kill(os.getpid(), signal.SIGINT)   # the interrupt lands inside this step
    return orig(name, *a, **k)
faults.hit = hit
from tb_footprint_plugin import cli
sys.exit(cli.main(sys.argv[2:]))
"""


def reduced_logdir(tmp_path: Path) -> Path:
    logdir = tmp_path / "L"
    for name in ("a", "b"):
        copy_real("tf/keras_profiled", logdir / name)
    for p in [logdir, *logdir.rglob("*")]:
        os.utime(p, (OLD, OLD), follow_symlinks=False)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0,
                            verify_backends=("python",))
    assert rep.ok and sum(o.status == "verified" and bool(o.removed_files) for o in rep.outcomes) == 2
    return logdir


def interrupted(step: str, *argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, step, *map(str, argv)], env=cli_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)


def test_ctrl_c_in_a_restore_finishes_it_before_exiting(tmp_path):
    logdir = reduced_logdir(tmp_path)
    r = interrupted("restore.file", "restore", logdir, "--all", "--yes")
    assert r.returncode == 130, (r.stdout, r.stderr)
    assert "finished" in r.stderr and "restored byte for byte" in r.stderr, r.stderr
    st = api.status(str(logdir))
    assert st["unfinished_operations"] == [] and st["unfinished"] == [], st["unfinished"]  # before: 1 left
    # the other run is restored by the command the message gives
    again = run_cli("restore", logdir, "--all", "--yes")
    assert again.returncode == 0, again.stdout + again.stderr
    assert api.restorable(str(logdir)) == []


def test_ctrl_c_in_a_purge_finishes_it_before_exiting(tmp_path):
    logdir = reduced_logdir(tmp_path)
    r = interrupted("purge.intent", "purge", logdir, "--yes")
    assert r.returncode == 130, (r.stdout, r.stderr)
    assert "settling what it left" in r.stderr, r.stderr
    # settled now: no backup is left half purged for the next start
    fin = run_cli("recover", logdir)
    assert "nothing to recover" in fin.stdout, fin.stdout + fin.stderr
    assert all(o["backup_purged"] for o in api.status(str(logdir))["operations"] if o["kind"] == "reduce")


def test_help_says_what_ctrl_c_does_per_verb():
    for verb in ("restore", "purge", "reduce", "retire"):
        text = " ".join(run_cli(verb, "--help").stdout.split())
        assert "Ctrl-C settles the operation under way" in text, (verb, text)
        assert "a restore or purge under way is finished" in text, (verb, text)
