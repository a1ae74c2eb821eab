"""Issue 29 item 4 gap: purge takes the run selectors of every other verb (positional names,
``--run`` repeated, ``--runs``/``--glob`` with the one path-wise glob rule) for local vaults,
retired runs and buckets. The selected runs are purged in one pass: one preview over all of them
counts the blobs they share, and the originals lost for good, once (a loop of one-run purges would
preview 0 B and no lost original for two runs that share every backup). A name or glob matching
no run is exit 2 with nothing changed, as for reduce and retire."""
import json
import shutil
from pathlib import Path

import pytest

from tb_footprint_plugin import api, synth

from conftest import copy_real, tree_hashes
from helpers_cli import run_cli as tbf


def reduced_copies(tmp, runs, others=None):
    """keras_profiled's ``train`` copied as each of ``runs`` (the same backups) and each real fixture
    of ``others`` (run -> fixture) under ``tmp/logdir``, all reduced by the CLI: the logdir."""
    src = copy_real("tf/keras_profiled", tmp / "src") / "train"
    logdir = tmp / "logdir"
    for run in runs:
        shutil.copytree(src, logdir / run)
    for run, name in (others or {}).items():
        copy_real(name, logdir / run)
    p = tbf("reduce", logdir, "--verify", "python", "--quiet-period", "0", "-y")
    assert p.returncode == 0, p.stdout + p.stderr
    return logdir


@pytest.fixture(scope="module")
def reduced(tmp_path_factory):
    """grp/a and grp/b: the same run twice (their backups are the same blobs); c: another run."""
    return reduced_copies(tmp_path_factory.mktemp("purge_sel"), ("grp/a", "grp/b"),
                          others={"c": "jax/profiled"})  # c: backups of its own


def _preview(logdir, *sel):
    p = tbf("purge", logdir, *sel, "-n", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("sel", [("grp/a", "grp/b"), ("--run", "grp/a", "--run", "grp/b"), ("--glob", "grp/*"),
                                 ("--runs", "grp/*"), ("grp/a", "--run", "grp/b")])
def test_every_selector_form_previews_the_selected_runs_together(reduced, sel):
    vault = tree_hashes(reduced / ".tb-footprint")
    alone = [_preview(reduced, "--run", r) for r in ("grp/a", "grp/b")]
    both = _preview(reduced, *sel)
    assert sorted(o["run"] for o in both["ops"]) == ["grp/a", "grp/b"]
    # one run alone frees nothing and loses no original: the other still holds the same blobs
    assert [(a["freed_bytes"], a["originals_lost"]) for a in alone] == [(0, 0), (0, 0)]
    # together: the shared blobs are freed (counted once) and both runs' originals are lost
    assert both["freed_bytes"] > 0 and all(o["originals"] > 0 for o in both["ops"])
    assert both["originals_lost"] == sum(o["originals"] for o in both["ops"])
    every = _preview(reduced)
    shared = [o for o in every["ops"] if o["run"] in ("grp/a", "grp/b")]
    assert sum(o["bytes"] for o in shared) == both["freed_bytes"]
    assert tree_hashes(reduced / ".tb-footprint") == vault  # previews change nothing


def test_a_name_or_glob_matching_nothing_is_exit_2_and_nothing_changes(reduced):
    vault = tree_hashes(reduced / ".tb-footprint")
    for sel in (("--run", "grp/a", "--run", "nope"), ("nope",), ("--glob", "zzz/*"), ("--glob", "a")):
        p = tbf("purge", reduced, *sel, "-y")
        assert p.returncode == 2, (sel, p.stdout + p.stderr)
        assert "matches" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert tree_hashes(reduced / ".tb-footprint") == vault


def test_purge_by_glob_purges_exactly_the_selected_runs(tmp_path):
    logdir = reduced_copies(tmp_path, ("grp/a", "grp/b", "c"))
    preview = _preview(logdir, "--glob", "grp/*")
    p = tbf("purge", logdir, "--glob", "grp/*", "-y", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    done = json.loads(p.stdout)
    assert sorted(o["run"] for o in done["ops"]) == ["grp/a", "grp/b"]
    assert done["freed_bytes"] == preview["freed_bytes"] and done["originals_lost"] == preview["originals_lost"]
    ops = {o["run"]: o for o in api.operations(str(logdir)) if o["kind"] == "reduce"}
    assert ops["grp/a"]["backup_purged"] and ops["grp/b"]["backup_purged"]
    assert not ops["c"]["backup_purged"]  # not selected: still restorable
    assert [o.run for o in api.restore(str(logdir), "c")] == ["c"]


def _sweep(root: Path) -> Path:
    for name, final in (("sweep/lr0", 0.3), ("sweep/lr1", 0.1), ("baseline", 0.05)):
        with synth.EventWriter(str(root / name)) as w:
            for step, v in enumerate([1.0, 0.6, final]):
                w.scalar("val/loss", step, v)
    return root


def test_retired_runs_are_selected_by_name_and_glob(tmp_path):
    logdir = _sweep(tmp_path / "logs")
    r = api.retire(str(logdir), api.retire_rule(run_glob="**"), dry_run=False, quiet_period=0)
    assert len([o for o in r.outcomes if o.op_id]) == 3
    dry = _preview(logdir, "--glob", "sweep/*")
    assert sorted(o["run"] for o in dry["ops"]) == ["sweep/lr0", "sweep/lr1"]
    assert dry["originals_lost"] == sum(o["originals"] for o in dry["ops"]) > 0  # their only copies
    p = tbf("purge", logdir, "sweep/lr0", "--run", "sweep/lr1", "-y", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(o["run"] for o in json.loads(p.stdout)["ops"]) == ["sweep/lr0", "sweep/lr1"]
    left = [m for m in api.retired(str(logdir))]
    assert [m["run"] for m in left] == ["baseline"], left


def test_bucket_purge_takes_the_same_selectors(s3_bucket, tmp_path):
    url = s3_bucket.upload(_sweep(tmp_path / "logs"), "logs")
    api.retire(url, api.retire_rule(run_glob="**"), dry_run=False, quiet_period=0)
    with pytest.raises(api.SelectionError):
        api.purge(url, runs=["nope"], yes=True)
    with pytest.raises(api.SelectionError):
        api.purge(url, run_glob="zzz/*", yes=True)
    dry = api.purge(url, run_glob="sweep/*")
    assert sorted(o["run"] for o in dry.ops) == ["sweep/lr0", "sweep/lr1"]
    done = api.purge(url, runs=["sweep/lr0", "sweep/lr1"], yes=True)
    assert sorted(o["run"] for o in done.ops) == ["sweep/lr0", "sweep/lr1"]
    assert done.freed_bytes == dry.freed_bytes
    assert [o["run"] for o in api.purge(url).ops] == ["baseline"]  # the one not selected is still kept
