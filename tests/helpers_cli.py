"""The real CLI in a subprocess, for tests: its environment, one command run to its end, and a
process paused at a chosen point (its script creates a flag file there) to be interrupted."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

#: the checkout under test: first on the subprocesses' PYTHONPATH
ROOT = Path(__file__).resolve().parent.parent


def cli_env(**extra) -> dict:
    """This process's environment with the checkout first on PYTHONPATH (a subprocess imports the
    library under test, not an installed copy), plus ``extra``."""
    e = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    e.update(extra)
    return e


def run_cli(*args, env=None, stdin=subprocess.DEVNULL, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m tb_footprint_plugin.cli ARGS`` to its end without a terminal (stdin from
    /dev/null unless given, as in CI), its output captured as text."""
    return subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", *map(str, args)],
                          env=cli_env() if env is None else env, stdin=stdin, capture_output=True, text=True,
                          timeout=timeout)


def start_paused(script: str, flag, *args, env=None, wait: float = 300) -> subprocess.Popen:
    """``python -c SCRIPT FLAG ARGS``, returned once it paused: its script creates ``flag`` where it
    waits. Fails the test with the process's output when it ended or did not pause within ``wait`` s."""
    p = subprocess.Popen([sys.executable, "-c", script, str(flag), *map(str, args)],
                         env=cli_env() if env is None else env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + wait
    while not os.path.exists(flag) and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.05)
    assert os.path.exists(flag), p.communicate()
    return p


def interrupt(p: subprocess.Popen, sig: int = signal.SIGINT, timeout: float = 300) -> tuple:
    """Send ``sig`` to a paused process and wait for its end: (stdout, stderr)."""
    p.send_signal(sig)
    return p.communicate(timeout=timeout)
