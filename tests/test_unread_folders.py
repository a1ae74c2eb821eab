"""Review R16 F10: a run folder the user cannot read dropped silently out of ``plan`` and ``reduce``
(only ``scan`` warned). Now the plan lists it as left alone with a code (``codes.UNREAD_SKIPS``) and
its absolute path; a run with such a folder inside is left alone too (it is not wholly seen); the
reduce's outcomes say the same, its report is not ``ok`` and the CLI exits 1; a resumed batch takes
the run up again once it can be read.

Root reads every folder whatever its mode, so the tool runs here in a child without the
capabilities that let it (``setpriv --bounding-set -dac_override,-dac_read_search``), as
``test_livewriters`` does for an unreadable event file.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import user_files
from helpers_nocap import child_json, cli, still_reads
from helpers_runs import write_loss_run as _write_run


pytestmark = pytest.mark.usefixtures("disarm_faults")

CHILD = r'''
import json, sys
from tb_footprint_plugin import api

logdir, what = sys.argv[1], sys.argv[2]
if what == "plan":
    p = api.plan(logdir, "archive", quiet_period=0)
    out = {"runs": {rp.run: {"code": rp.code, "skipped": rp.skipped, "actions": len(rp.actions)} for rp in p.runs}}
elif what == "check-and-plan":
    api.check_logdir(logdir)  # what every verb asks first
    p = api.plan(logdir, "archive", quiet_period=0)
    out = {"runs": {rp.run: {"code": rp.code, "skipped": rp.skipped} for rp in p.runs}}
elif what == "plan-b":
    p = api.plan(logdir, "archive", quiet_period=0, runs=["b"])
    out = {"runs": {rp.run: {"code": rp.code, "skipped": rp.skipped} for rp in p.runs}}
else:
    r = api.reduce_logdir(logdir, policy="archive", dry_run=False, quiet_period=0, ledger="default",
                          verify_backends=("python",))
    out = {"ok": r.ok, "dict_ok": r.to_dict()["ok"],
           "outcomes": {o.run: {"status": str(o.status), "code": o.code, "reason": o.reason} for o in r.outcomes}}
print(json.dumps(out))
'''


def _age(root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for n in filenames + dirnames:
            os.utime(os.path.join(dirpath, n), (1_600_000_000, 1_600_000_000))


def _child(logdir: Path, what: str) -> dict:
    return child_json(CHILD, logdir, what)


@pytest.fixture
def logdir(tmp_path):
    """Runs a (readable), b (its folder mode 000) and c (readable, but an empty folder in it is 000)."""
    ld = tmp_path / "logdir"
    for i, name in enumerate(("a", "b", "c")):
        _write_run(ld / name, i)
    (ld / "c" / "notes").mkdir()
    _age(ld)
    os.chmod(ld / "b", 0)
    os.chmod(ld / "c" / "notes", 0)
    if still_reads(ld / "b"):  # the child must not be able to read them: else the test proves nothing
        pytest.skip("setpriv could not drop the capability to read any folder here")
    yield ld
    os.chmod(ld / "b", 0o755)
    os.chmod(ld / "c" / "notes", 0o755)


def test_plan_lists_an_unreadable_run_folder_with_its_code_and_path(logdir):
    runs = _child(logdir, "plan")["runs"]
    assert runs["a"]["code"] is None and runs["a"]["actions"], runs
    assert runs["b"]["code"] == "permission_denied", runs
    assert str(logdir / "b") in runs["b"]["skipped"] and "Permission denied" in runs["b"]["skipped"], runs
    # a run with a folder it cannot read is not wholly seen: left alone, the folder named
    assert runs["c"]["code"] == "permission_denied", runs
    assert str(logdir / "c" / "notes") in runs["c"]["skipped"], runs
    # a selection may name it: the plan says why it is left alone, not "no run matches"
    chosen = _child(logdir, "plan-b")["runs"]
    assert list(chosen) == ["b"] and chosen["b"]["code"] == "permission_denied", chosen


def test_reduce_says_the_unreadable_folders_and_is_not_ok(logdir):
    os.chmod(logdir / "b", 0o755)
    os.chmod(logdir / "c" / "notes", 0o755)
    before_b_c = {k: v for k, v in user_files(logdir).items() if not k.startswith("a/")}
    os.chmod(logdir / "b", 0)
    os.chmod(logdir / "c" / "notes", 0)

    out = _child(logdir, "reduce")
    o = out["outcomes"]
    assert o["a"]["status"] == "verified", o
    for run, folder in (("b", logdir / "b"), ("c", logdir / "c" / "notes")):
        assert o[run]["status"] == "skipped" and o[run]["code"] == "permission_denied", o
        assert str(folder) in o[run]["reason"], o
    assert out["ok"] is False and out["dict_ok"] is False, out

    os.chmod(logdir / "b", 0o755)
    os.chmod(logdir / "c" / "notes", 0o755)
    after = {k: v for k, v in user_files(logdir).items() if not k.startswith("a/")}
    assert after == before_b_c  # nothing of b or c was touched
    os.chmod(logdir / "b", 0)  # b stays unreadable; c can be read now

    # the same batch resumed (the default ledger) takes c up again: its skip passes once fixed
    out = _child(logdir, "reduce")
    assert out["outcomes"]["c"]["status"] == "verified", out
    # b, a folder outside every run of a batch that named none, is named, no more a failure (r19 E)
    assert out["outcomes"]["b"]["code"] == "permission_denied" and out["ok"] is True, out


def test_cli_reduce_exits_1_when_a_folder_could_not_be_read(logdir):
    p = cli("reduce", logdir, "--yes", "--quiet-period", "0", "--verify", "python", "--run", "b")
    assert p.returncode == 1, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert str(logdir / "b") in p.stdout, p.stdout


def test_a_logdir_whose_only_run_folder_is_unreadable_is_still_a_logdir(tmp_path):
    """Not "not a TensorBoard logdir": the folder it cannot enter may hold runs, and the plan says so."""
    ld = tmp_path / "logdir"
    _write_run(ld / "b", 1)
    _age(ld)
    os.chmod(ld / "b", 0)
    try:
        if still_reads(ld / "b"):
            pytest.skip("setpriv could not drop the capability to read any folder here")
        runs = _child(ld, "check-and-plan")["runs"]
    finally:
        os.chmod(ld / "b", 0o755)
    assert list(runs) == ["b"] and runs["b"]["code"] == "permission_denied", runs
