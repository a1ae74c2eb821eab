"""Review R16 F9, F20: a failure that stops a whole command, and an interrupt, gave a script
nothing: ``main()`` printed ``tb-footprint: error: …`` with no code (a refused ``--backup-dir``
is ``state_not_ours`` in the README) and stdout stayed empty even with ``--json``; Ctrl-C of a
``reduce --json`` left stdout empty though runs were reduced and verified. Now the error line
carries its code, ``--json`` gets ``{"error": {code, message, file}}``, and an interrupt gets one
JSON document of the outcomes that landed and what was settled."""
import json
import os
import subprocess
import sys
import time

from conftest import copy_real
from helpers_cli import cli_env, run_cli as tbf
from test_ctrlc_restore_names_runs import CHILD

OLD = time.time() - 3600


def test_refused_backup_dir_is_coded_and_json(tmp_path):
    logdir = copy_real("tf/keras_profiled", tmp_path / "L" / "a").parent
    real = tmp_path / "vault"
    real.mkdir(mode=0o700)
    link = tmp_path / "linkv"
    link.symlink_to(real)
    p = tbf("reduce", logdir, "--yes", "--json", "--backup-dir", link)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "[state_not_ours]" in p.stderr, p.stderr
    err = json.loads(p.stdout)["error"]
    assert err["code"] == "state_not_ours" and str(link) in err["message"], err


def test_interrupted_reduce_json_reports_what_landed(tmp_path):
    logdir = tmp_path / "L"
    for name in ("a", "b"):
        copy_real("tf/keras_profiled", logdir / name)
    for p in [logdir, *logdir.rglob("*")]:
        os.utime(p, (OLD, OLD), follow_symlinks=False)
    # reduce.journal is hit once a run: its 2nd hit is inside the 2nd run
    r = subprocess.run([sys.executable, "-c", CHILD, "reduce.journal", "2", "reduce", str(logdir), "--yes",
                        "--json", "--verify", "python"], env=cli_env(),
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    assert r.returncode == 130, (r.stdout, r.stderr)
    doc = json.loads(r.stdout)
    assert doc["interrupted"] is True and doc["verb"] == "reduce", doc
    assert [o["status"] for o in doc["outcomes"]] == ["verified"], doc
    assert doc["settled"], doc  # the run under way, rolled back and said so
