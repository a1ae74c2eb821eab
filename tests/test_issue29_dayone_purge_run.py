"""Issue 29, day one item 4 (the same run selectors on every verb), purge's part as it stands:
``purge --run A --run B`` used to keep only the last name and preview and purge B alone, while the
user had asked for both. The library's purge takes one run (it counts shared blobs and the
originals lost for good over the operations it purges together), so a second, different --run is
refused with exit 2 and nothing changes; the same name twice is one run."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import copy_real, tree_hashes

ROOT = Path(__file__).resolve().parent.parent


def tbf(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", *map(str, args)], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)


def test_purge_refuses_a_second_run_instead_of_keeping_only_the_last(tmp_path):
    src = copy_real("tf/keras_profiled", tmp_path / "src") / "train"
    logdir = tmp_path / "logdir"
    for run in ("a", "b"):
        shutil.copytree(src, logdir / run)
    assert tbf("reduce", logdir, "--verify", "python", "--quiet-period", "0", "-y").returncode == 0
    vault = tree_hashes(logdir / ".tb-footprint")
    p = tbf("purge", logdir, "--run", "a", "--run", "b", "-y")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "purge takes one run per call" in p.stderr, p.stderr
    assert tree_hashes(logdir / ".tb-footprint") == vault  # nothing purged, neither a nor b
    p = tbf("purge", logdir, "--run", "a", "--run", "a", "--older-than", "0s", "-n", "--json")
    assert p.returncode == 0, p.stderr
    assert {o["run"] for o in json.loads(p.stdout)["ops"]} == {"a"}
