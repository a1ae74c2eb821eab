"""examples/archive_pipeline.sh on the demo logs, with real rsync: a failed night leaves the
archive copy as synced and says so; the next night reduces and verifies it and appends each
operation to the records once; a rerun copies nothing back and records nothing twice."""
import csv
import os
import shutil
import subprocess
import sys

from conftest import REPO, tree_hashes

import tb_footprint_plugin as fp
from tb_footprint_plugin.demo import generate_demo

SCRIPT = REPO / "examples" / "archive_pipeline.sh"


def pipeline(tmp_path, **env):
    assert shutil.which("rsync"), "rsync is not installed (scripts/test.sh installs it)"
    e = dict(os.environ, PYTHONPATH=str(REPO), PYTHON=sys.executable,
             TB_FOOTPRINT=f"{sys.executable} -m tb_footprint_plugin.cli", TF_CPP_MIN_LOG_LEVEL="2", **env)
    return subprocess.run(["bash", str(SCRIPT), str(tmp_path / "src"), str(tmp_path / "archive"),
                           str(tmp_path / "records.csv")], env=e, capture_output=True, text=True, timeout=900)


def records(tmp_path):
    with open(tmp_path / "records.csv", newline="") as f:
        return list(csv.DictReader(f))


def runs_tree(root):
    return {k: v for k, v in tree_hashes(root).items() if not k.startswith(".tb-footprint")}


def test_archive_pipeline_on_demo_logs(tmp_path):
    src = tmp_path / "src"
    generate_demo(str(src), scale=0.05)
    source_before = tree_hashes(src)

    # night 1: every reduction fails (injected) -> rolled back, archive = the synced copy, exit 1
    p = pipeline(tmp_path, TB_FOOTPRINT_FAILPOINTS="reduce.verify=raise")
    assert p.returncode == 1, p.stderr[-3000:]
    assert runs_tree(tmp_path / "archive") == {k: v for k, v in source_before.items()}
    failed = records(tmp_path)
    assert failed and {r["outcome"] for r in failed} == {"rolled_back"}, failed

    # night 2: reduced, verified, recorded
    p = pipeline(tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "== verify" in p.stderr and "new record(s)" in p.stderr
    rows = records(tmp_path)
    done = [r for r in rows if r["outcome"] == "verified"]
    assert done and all(r["verified"] == "True" for r in done)
    assert rows[:len(failed)] == failed  # appended, never rewritten
    assert len({(r["op_id"], r["outcome"]) for r in rows}) == len(rows)
    checks = fp.verify(str(tmp_path / "archive"))
    assert checks and all(c["ok"] for c in checks)
    archive_after = runs_tree(tmp_path / "archive")
    assert archive_after != source_before
    assert any(k.endswith(".pt.trace.json") for k in source_before)
    assert not any(k.endswith(".pt.trace.json") for k in archive_after)  # archive policy removed them
    assert tree_hashes(src) == source_before  # the source is only read

    # night 3: nothing new at the source -> nothing copied back, nothing recorded twice
    p = pipeline(tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "0 new record(s)" in p.stderr
    assert records(tmp_path) == rows
    assert runs_tree(tmp_path / "archive") == archive_after
