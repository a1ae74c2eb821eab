"""Every ``bench/*.py`` takes ``--small``: ``scripts/test.sh`` (the README's test command, CI's) runs
each with it after the suite, and a script that refuses the flag fails CI after the tests have
passed (the CI of c8afde9: ``bench/history_page.py`` exited 2, "unrecognized arguments: --small").
Asked of each script's own argument parser (``--help``), so the suite says it first."""
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
SCRIPTS = sorted(n for n in os.listdir(BENCH) if n.endswith(".py"))


def test_the_bench_folder_is_found():
    assert "scale.py" in SCRIPTS and "history_page.py" in SCRIPTS, SCRIPTS


@pytest.mark.parametrize("name", SCRIPTS)
def test_each_bench_script_takes_small(name):
    p = subprocess.run([sys.executable, os.path.join(BENCH, name), "--help"], capture_output=True, text=True,
                       timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "--small" in p.stdout, p.stdout[-2000:]
