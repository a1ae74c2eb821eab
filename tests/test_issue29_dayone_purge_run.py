"""Issue 29, day one item 4 (the same run selectors on every verb), purge's part:
``purge --run A --run B`` used to keep only the last name and preview and purge B alone, while the
user had asked for both. Purge now takes every selector and purges the selected runs together:
never fewer or other runs than asked; the same name twice is one run."""
import json

from helpers_cli import run_cli as tbf
from test_issue29_gaps_purge import reduced_copies


def test_purge_of_two_runs_purges_both_and_no_other(tmp_path):
    logdir = reduced_copies(tmp_path, ("a", "b", "c"))
    p = tbf("purge", logdir, "--run", "a", "--run", "a", "--older-than", "0s", "-n", "--json")
    assert p.returncode == 0, p.stderr
    assert {o["run"] for o in json.loads(p.stdout)["ops"]} == {"a"}
    p = tbf("purge", logdir, "--run", "a", "--run", "b", "-y", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(o["run"] for o in json.loads(p.stdout)["ops"]) == ["a", "b"]
    p = tbf("purge", logdir, "-n", "--json")  # c's backup is all that is left to purge
    assert [o["run"] for o in json.loads(p.stdout)["ops"]] == ["c"], p.stdout
