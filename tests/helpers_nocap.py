"""A child process that cannot read what a file's mode forbids, even when the suite runs as root.

Root reads every file and folder whatever its mode, so the tests of unreadable backups, state
folders and run folders run their verb in a child without the two capabilities that let it
(``setpriv --bounding-set -dac_override,-dac_read_search``), with this checkout first on its path.
``still_reads`` is each test's guard: where the child can read the path anyway (a container that
keeps the capability), the test proves nothing and says so.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
PREFIX = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"] if os.geteuid() == 0 else []


def run(args: Sequence[str], timeout: float = 600) -> subprocess.CompletedProcess:
    """``args`` in the child (text output captured)."""
    return subprocess.run(PREFIX + [str(a) for a in args], env=ENV, capture_output=True, text=True,
                          timeout=timeout)


def cli(*args) -> subprocess.CompletedProcess:
    """``tb-footprint ARGS`` in the child."""
    return run([sys.executable, "-m", "tb_footprint_plugin.cli", *map(str, args)])


def child_json(code: str, *args) -> dict:
    """Python ``code`` run in the child with ``args``: the JSON of its last line of output (it must
    exit 0)."""
    p = run([sys.executable, "-c", code, *map(str, args)])
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def still_reads(path, mode: int = None) -> bool:
    """Whether the child can read ``path`` anyway (``cat`` a file, ``ls`` a folder); with ``mode``,
    checked at mode 000 and ``mode`` given back after. False where the suite is not root."""
    if not PREFIX:
        return False
    path = Path(path)
    if mode is not None:
        os.chmod(path, 0)
    try:
        probe = subprocess.run(PREFIX + ["cat" if path.is_file() else "ls", str(path)], capture_output=True)
    finally:
        if mode is not None:
            os.chmod(path, mode)
    return probe.returncode == 0
