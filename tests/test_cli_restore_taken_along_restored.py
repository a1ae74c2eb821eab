"""``restore LD exp/eval --yes`` after ``exp`` was restored (its retirement took ``exp/eval``
along) exited 2 with "nothing to restore for run 'exp/eval'", a usage error, where ``restore LD
exp --yes`` says "already restored" and exits 0 (report_L, r32): the run taken along was restored
with its parent, and is said so the same way, by the engine (the API and the tab too)."""
import json

from conftest import copy_real
from helpers_cli import run_cli as cli
from tb_footprint_plugin import api


def test_a_run_taken_along_is_already_restored_with_its_parent(tmp_path):
    logdir = tmp_path / "ld"
    copy_real("tf/keras_profiled/train", logdir / "exp")
    copy_real("tf/keras_profiled/train", logdir / "exp" / "eval")
    assert api.retire(str(logdir), api.retire_rule(runs=["exp"], include_nested=True), dry_run=False,
                      quiet_period=0).ok
    (back,) = api.restore(str(logdir), run="exp")
    assert str(back.status) == "restored", back.reason
    # the engine says it, so the API (and the tab) as the CLI
    (again,) = api.restore(str(logdir), run="exp/eval")
    assert (again.run, str(again.status), str(again.code)) == ("exp/eval", "skipped", "already_restored"), again
    assert f"along with exp) was restored by {back.op_id}" in again.reason, again.reason
    parent = cli("restore", logdir, "exp", "--yes")
    assert parent.returncode == 0 and "already restored" in parent.stdout, (parent.stdout, parent.stderr)

    p = cli("restore", logdir, "exp/eval", "--yes")
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "exp/eval" in p.stdout and "already restored" in p.stdout and back.op_id in p.stdout, p.stdout
    p = cli("restore", logdir, "exp/eval", "--yes", "--json")
    assert p.returncode == 0, (p.stdout, p.stderr)
    (row,) = json.loads(p.stdout)
    assert (row["run"], row["status"], row["code"]) == ("exp/eval", "skipped", "already_restored"), row
    # a name nothing took along is still a usage error
    p = cli("restore", logdir, "exp/evl", "--yes")
    assert p.returncode == 2 and "exp/evl" in p.stderr, (p.stdout, p.stderr)
