"""A folder the scan cannot enter outside every run (``chmod 000 logdir/notes``) made every
``tb-footprint reduce`` of the logdir exit 1, though no run it reduced holds it. Now a reduce of the
whole logdir names it (left alone, ``permission_denied``, its path; ``ReduceReport.unread_warnings``)
and is ``ok`` when its runs went well; a run that cannot be read in full is still refused (its
report not ok), and so is a folder the batch named (``--run notes``): what was asked is not done.

Root reads every folder whatever its mode: the tool runs in a child without the capabilities that
let it (``setpriv``, as ``test_unread_folders`` does).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import user_files
from helpers_nocap import child_json, cli, still_reads
from helpers_runs import write_loss_run

pytestmark = pytest.mark.usefixtures("disarm_faults")

CHILD = r'''
import json, sys
from tb_footprint_plugin import api

logdir, runs = sys.argv[1], json.loads(sys.argv[2])
r = api.reduce_logdir(logdir, policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",),
                      runs=runs)
d = r.to_dict()
print(json.dumps({"ok": r.ok, "dict_ok": d["ok"], "warnings": d.get("unread_warnings"),
                  "outcomes": {o.run: {"status": str(o.status), "code": o.code, "reason": o.reason}
                               for o in r.outcomes}}))
'''


def _child(logdir: Path, runs=None) -> dict:
    return child_json(CHILD, logdir, json.dumps(runs))


@pytest.fixture
def logdir(tmp_path):
    """Run ``a`` (readable) and ``notes`` (a folder of no run, mode 000)."""
    ld = tmp_path / "logdir"
    write_loss_run(ld / "a", 0)
    (ld / "notes").mkdir()
    (ld / "notes" / "todo.txt").write_text("read me\n")
    for dirpath, dirnames, filenames in os.walk(ld):
        for n in filenames + dirnames:
            os.utime(os.path.join(dirpath, n), (1_600_000_000, 1_600_000_000))
    os.chmod(ld / "notes", 0)
    if still_reads(ld / "notes"):
        os.chmod(ld / "notes", 0o755)
        pytest.skip("setpriv could not drop the capability to read any folder here")
    yield ld
    os.chmod(ld / "notes", 0o755)
    if (ld / "a" / "x").exists():
        os.chmod(ld / "a" / "x", 0o755)


def test_a_reduce_of_the_whole_logdir_names_the_folder_and_is_ok(logdir):
    out = _child(logdir)
    o = out["outcomes"]
    assert o["a"]["status"] == "verified", o
    assert o["notes"]["status"] == "skipped" and o["notes"]["code"] == "permission_denied", o
    assert str(logdir / "notes") in o["notes"]["reason"], o
    assert out["ok"] is True and out["dict_ok"] is True, out
    assert out["warnings"] == ["notes"], out
    os.chmod(logdir / "notes", 0o755)
    assert (logdir / "notes" / "todo.txt").read_text() == "read me\n"  # never touched


def test_the_cli_reduce_exits_0_and_names_the_folder(logdir):
    p = cli("reduce", logdir, "--yes", "--quiet-period", "0", "--verify", "python")
    assert p.returncode == 0, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert str(logdir / "notes") in p.stdout and "[permission_denied]" in p.stdout, p.stdout


def test_a_run_not_wholly_seen_is_still_refused(logdir):
    (logdir / "a" / "x").mkdir()
    os.chmod(logdir / "a" / "x", 0)
    before = user_files(logdir / "a") if os.access(logdir / "a", os.R_OK) else None
    out = _child(logdir)
    o = out["outcomes"]
    assert o["a"]["status"] == "skipped" and o["a"]["code"] == "permission_denied", o
    assert str(logdir / "a" / "x") in o["a"]["reason"], o
    assert out["ok"] is False and out["warnings"] == ["notes"], out
    assert user_files(logdir / "a") == before


def test_a_folder_the_batch_named_is_not_done(logdir):
    out = _child(logdir, ["notes"])
    assert out["outcomes"]["notes"]["code"] == "permission_denied", out
    assert out["ok"] is False and out["warnings"] == [], out
