"""Run names with a newline or bytes not valid UTF-8 are printed escaped, one row a row (review
R14 F9, third bullet): the CLI's outcome lines, plan, restore list and history table printed them
raw, so a run named ``a<newline>b`` split a table row in two (and a name could carry a terminal
escape). ``fmt.shown`` escapes for display only; ``--json`` keeps the name as it is.
"""
import json
import os
import shutil
import time

from conftest import REAL_FIXTURES
from helpers_cli import run_cli
from tb_footprint_plugin.fmt import shown

OLD = time.time() - 3600
NL = "new\nline"
BAD = "bad\udcffname"  # the byte 0xff, as os.listdir gives it back (surrogateescape)


def test_shown_escapes_only_what_is_not_printable():
    assert shown("plain/run é") == "plain/run é"
    assert shown(NL) == "new\\nline" and shown(BAD) == "bad\\xffname" and shown("\x1b[2J") == "\\x1b[2J"
    assert "\n" not in shown("a\r\n\tb") and shown(None) == "None"


def test_cli_lines_keep_one_row_per_run(tmp_path):
    logdir = tmp_path / "L"
    for name in (NL, BAD):
        shutil.copytree(str(REAL_FIXTURES / "jax" / "profiled"), str(logdir / name), symlinks=True)
    for d, dirs, files in os.walk(str(logdir)):
        for n in dirs + files:
            os.utime(os.path.join(d, n), (OLD, OLD), follow_symlinks=False)
    red = run_cli("reduce", logdir, "--yes", "--quiet-period", "0", "--verify", "python")
    assert red.returncode == 0, red.stdout + red.stderr
    lines = red.stdout.splitlines()
    assert any(line.startswith("✓ new\\nline: verified") for line in lines), red.stdout
    assert any(line.startswith("✓ bad\\xffname: verified") for line in lines), red.stdout
    assert not any(line.startswith("line") for line in lines), red.stdout  # no row split in two
    hist = run_cli("history", logdir)
    rows = [line for line in hist.stdout.splitlines() if "reduce" in line and "verified" in line]
    assert len(rows) == 2 and any("new\\nline" in r for r in rows) and any("bad\\xffname" in r for r in rows), \
        hist.stdout
    js = json.loads(run_cli("history", logdir, "--json").stdout)
    assert {e["run"] for e in js if e.get("kind") == "reduce"} >= {NL}  # the name itself, unescaped
    res = run_cli("restore", logdir, "--all", "--yes")
    assert res.returncode == 0 and "✓ new\\nline: restored" in res.stdout, res.stdout + res.stderr
