"""Every command in the README and the Fail-Safe guide runs, in order, on demo logs."""
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def blocks(path, lang):
    text = (REPO / path).read_text(encoding="utf-8")
    return re.findall(r"```" + lang + r"\n(.*?)```", text, flags=re.S)


def commands(path):
    """`tb-footprint …` lines of sh blocks, and `$ tb-footprint …` lines of console blocks."""
    out = []
    for b in blocks(path, "sh"):
        out += [l.split("#")[0].strip() for l in b.splitlines() if l.startswith("tb-footprint ")]
    for b in blocks(path, "console"):
        out += [l[2:].split("  #")[0].strip() for l in b.splitlines() if l.startswith("$ tb-footprint ")]
    return out


def run_cli(line, cwd):
    args = shlex.split(line)
    assert args[0] == "tb-footprint"
    return subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", *args[1:]], cwd=cwd,
                          env=ENV, capture_output=True, text=True, timeout=600)


def run_python_blocks(path, cwd):
    for code in blocks(path, "python"):
        p = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=ENV, capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0, f"{path} python block failed:\n{code}\n{p.stderr[-3000:]}"


DEMO = "tb-footprint demo runs"


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory):
    """``DEMO``'s logdir as that command wrote it, kept once a doc's own first command wrote it (or
    written here), for the docs that start on demo logs without writing them. The demo writes
    the same bytes and times in every process and folder (test_synth_demo's
    test_demo_is_deterministic, test_demo_deterministic_across_processes), so a copy with its
    times and modes (``copytree``) is what a second ``DEMO`` would write: ~10 s of CI's cores
    once instead of per doc."""
    kept = tmp_path_factory.mktemp("demo") / "runs"

    def get(cwd=None):
        """Keep ``cwd``'s ``runs`` when given (just written by ``DEMO``); else ``kept``, written
        by ``DEMO`` if nothing was kept yet."""
        if cwd is not None:
            if not kept.exists():
                shutil.copytree(cwd / "runs", kept, symlinks=True)
        elif not kept.exists():
            p = run_cli(DEMO, kept.parent)
            assert p.returncode == 0, p.stderr
        return kept

    return get


@pytest.mark.parametrize("doc", ["docs/FAILSAFE.md", "README.md"])
def test_doc_commands_run(tmp_path, doc, demo_runs):
    lines = commands(doc)
    assert len(lines) >= 8, lines
    if not lines[0].startswith("tb-footprint demo"):
        shutil.copytree(demo_runs(), tmp_path / "runs", symlinks=True)
    for i, line in enumerate(lines):
        p = run_cli(line, tmp_path)
        assert p.returncode == 0, f"`{line}` exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
        if i == 0 and line == DEMO:
            demo_runs(tmp_path)
    run_python_blocks(doc, tmp_path)


def test_readme_has_exactly_two_setup_commands():
    first = blocks("README.md", "sh")[0]
    cmds = [l for l in first.splitlines() if l.strip() and not l.startswith("#")]
    assert [c.split("#")[0].strip() for c in cmds] == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    ci = (REPO / ".ci" / "run").read_text()
    assert "scripts/test.sh" in ci
