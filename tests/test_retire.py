"""Retiring whole runs: selection rules (glob, group, age, size, keep-best, keep marks, nested runs),
the move into the vault (rename on one filesystem, checked copy across two), restore byte for byte,
purge after a grace period, and the CLI."""
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import REPO, copy_real, user_files
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.scan.scanner import scan

OLD = time.time() - 7 * 86400


def age(root: Path, t: float = OLD) -> None:
    for dirpath, _dirs, files in os.walk(root):
        for n in files:
            os.utime(os.path.join(dirpath, n), (t, t), follow_symlinks=False)


def write_run(logdir: Path, name: str, losses, tag: str = "val/loss", extra: bool = False) -> None:
    with synth.EventWriter(str(logdir / name)) as w:
        for step, v in enumerate(losses):
            w.scalar(tag, step, v)
            w.scalar("train/loss", step, v * 2)
    if extra:
        (logdir / name / "notes").mkdir()
        (logdir / name / "notes" / "config.yaml").write_text("lr: 0.1\n")


def sweep(logdir: Path) -> dict:
    """Eight runs with known metrics: final val/loss of sweep/lr<i> is finals[i]; lr6 dips lowest mid-run."""
    finals = {"sweep/lr0": 0.30, "sweep/lr1": 0.12, "sweep/lr2": 0.55, "sweep/lr3": 0.08,
              "sweep/lr4": 0.41, "sweep/lr5": 0.20, "sweep/lr6": 0.90, "sweep/lr7": 0.33}
    for name, final in finals.items():
        losses = [1.0, 0.7, 0.5, final]
        if name == "sweep/lr6":
            losses = [1.0, 0.01, 0.5, final]  # best minimum, worst last value
        write_run(logdir, name, losses, extra=name == "sweep/lr0")
    write_run(logdir, "baseline", [1.0, 0.05])
    age(logdir)
    return finals


def rule(**kw):
    return api.retire_rule(**kw)


# ---------------------------------------------------------------------------------------
# selection rules
# ---------------------------------------------------------------------------------------
def test_keep_best_retires_exactly_the_rest_and_shows_each_metric(tmp_path):
    finals = sweep(tmp_path)
    p = api.retire_plan(str(tmp_path), rule(group="sweep/*", keep_best=3, metric="val/loss", mode="min"))
    best3 = sorted(finals, key=finals.get)[:3]  # lr3 0.08, lr1 0.12, lr5 0.20
    assert best3 == ["sweep/lr3", "sweep/lr1", "sweep/lr5"]
    assert {i.run for i in p.selected} == set(finals) - set(best3)
    assert "baseline" not in {i.run for i in p.items}  # outside the group: not even looked at
    for i in p.items:
        assert i.metric["value"] == pytest.approx(finals[i.run]), i
        assert i.metric["of"] == 8
    ranks = {i.run: i.metric["rank"] for i in p.items}
    assert [r for r, _ in sorted(ranks.items(), key=lambda kv: kv[1])][:3] == best3
    kept = [i for i in p.items if not i.selected]
    assert all(i.code == "kept_by_rule" for i in kept)
    # nothing moved by a plan
    assert all((tmp_path / r).is_dir() for r in finals)


def test_keep_best_by_min_value_and_max_mode(tmp_path):
    sweep(tmp_path)
    # ranked by each run's lowest val/loss: lr6 (0.01) becomes the best
    p = api.retire_plan(str(tmp_path), rule(group="sweep/*", keep_best=1, metric="val/loss", value="min"))
    assert [i.run for i in p.items if not i.selected] == ["sweep/lr6"]
    # mode max keeps the highest last values
    p = api.retire_plan(str(tmp_path), rule(group="sweep/*", keep_best=2, metric="val/loss", mode="max"))
    assert {i.run for i in p.items if not i.selected} == {"sweep/lr6", "sweep/lr2"}


def test_keep_marks_keep_list_and_missing_metric_are_never_selected(tmp_path):
    sweep(tmp_path)
    write_run(tmp_path, "sweep/nometric", [1.0, 0.5], tag="other")
    (tmp_path / "sweep/lr6/.keep").write_text("")
    keep = tmp_path / "keep.txt"
    keep.write_text("# runs we publish\nsweep/lr2\n")
    p = api.retire_plan(str(tmp_path), rule(group="sweep/*", keep_best=3, metric="val/loss",
                                            keep_list_file=str(keep)))
    by = {i.run: i for i in p.items}
    assert not by["sweep/lr6"].selected and by["sweep/lr6"].code == "marked_keep"
    assert not by["sweep/lr2"].selected and by["sweep/lr2"].code == "marked_keep"
    assert not by["sweep/nometric"].selected and by["sweep/nometric"].code == "no_metric"
    assert {i.run for i in p.selected} == {"sweep/lr0", "sweep/lr4", "sweep/lr7"}


def test_glob_age_and_size_rules(tmp_path):
    sweep(tmp_path)
    fresh = time.time() - 3600
    age(tmp_path / "sweep/lr1", fresh)
    p = api.retire_plan(str(tmp_path), rule(run_glob="sweep/lr[0-3]", older_than=86400))
    assert {i.run for i in p.selected} == {"sweep/lr0", "sweep/lr2", "sweep/lr3"}
    big = max(i.bytes for i in api.retire_plan(str(tmp_path), rule(run_glob="*")).items)
    p = api.retire_plan(str(tmp_path), rule(run_glob="*", min_size=big))
    assert [i.run for i in p.selected] == ["sweep/lr0"]  # the one with an extra file
    with pytest.raises(ValueError):
        api.retire_rule()  # an empty rule would select everything: refused
    with pytest.raises(ValueError):
        api.retire_rule(keep_best=2)  # without a metric


def test_runs_being_written_are_never_retired(tmp_path):
    write_run(tmp_path, "live", [1.0, 0.5])  # just written
    rep = api.retire(str(tmp_path), rule(runs=["live"]), dry_run=False, quiet_period=600)
    assert [i.code for i in rep.plan.items] == ["active"]
    assert rep.outcomes == [] and (tmp_path / "live").is_dir()
    # the engine checks again at the moment it acts (the plan may be stale)
    from tb_footprint_plugin.engine.context import Context
    from tb_footprint_plugin.engine.retire import retire_run

    o = retire_run(Context(str(tmp_path), quiet_period=600), "live")
    assert o.status == "skipped" and o.code == "active"
    assert (tmp_path / "live").is_dir()


def test_a_run_with_a_file_open_for_writing_is_never_retired(tmp_path):
    """An old run whose writer still holds its event file open (it logs rarely): left alone,
    the outcome names the process, nothing moves."""
    sweep(tmp_path)
    ev = next((tmp_path / "sweep" / "lr1").glob("*tfevents*"))
    before = user_files(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", "import sys; f = open(sys.argv[1], 'ab'); "
                               "print('open', flush=True); sys.stdin.read()", str(ev)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        rep = api.retire(str(tmp_path), rule(runs=["sweep/lr1"]), dry_run=False)
        [o] = rep.outcomes
        assert o.status == "skipped" and o.code == "open_for_writing", o.to_dict()
        assert str(holder.pid) in o.reason
        assert user_files(tmp_path) == before
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_cancel_before_anything_moves(tmp_path):
    from tb_footprint_plugin.engine.context import CancelToken

    sweep(tmp_path)
    before = user_files(tmp_path)
    token = CancelToken()
    steps = []

    def progress(run, step, frac):
        steps.append(step)
        token.cancel()  # cancelled while the first run's files are being hashed

    rep = api.retire(str(tmp_path), rule(group="sweep/*"), dry_run=False, progress=progress, cancel=token)
    assert steps == ["hash"]
    assert {o.status for o in rep.outcomes} == {"skipped"} and {o.code for o in rep.outcomes} == {"cancelled"}
    assert user_files(tmp_path) == before and api.retired(str(tmp_path)) == []


# ---------------------------------------------------------------------------------------
# the move, restore and purge
# ---------------------------------------------------------------------------------------
def test_retire_real_run_is_a_rename_and_restore_is_byte_for_byte(tmp_path):
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    before = user_files(logdir)
    modes = {p: os.lstat(logdir / p).st_mode for p in before}
    ev = next((logdir / "train").glob("*tfevents*"))
    ino, mtime = ev.stat().st_ino, ev.stat().st_mtime_ns
    rep = api.retire(str(logdir), rule(runs=["train"]), dry_run=False)
    assert rep.ok and [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
    assert not (logdir / "train").exists()
    assert {k: v for k, v in user_files(logdir).items()} == {k: v for k, v in before.items()
                                                               if not k.startswith("train")}
    assert [r.name for r in scan(str(logdir), write_cache=False).runs if r.has_event_files] == ["validation"]
    # moved, not copied: the same inode now sits in the vault, under a name no reader matches
    vault_files = [p for p in (logdir / ".tb-footprint" / "retired").rglob("*") if p.is_file()]
    assert ino in {p.stat().st_ino for p in vault_files}
    assert not [p for p in (logdir / ".tb-footprint").rglob("*") if "tfevents" in p.name]
    listed = api.retired(str(logdir))
    assert [r["run"] for r in listed] == ["train"]
    assert listed[0]["bytes"] == sum(os.lstat(logdir / ".tb-footprint" / "retired" / listed[0]["op_id"] / "files" / n)
                                     .st_size for n in os.listdir(logdir / ".tb-footprint" / "retired"
                                                                   / listed[0]["op_id"] / "files"))
    outs = api.restore(str(logdir), run="train")
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert user_files(logdir) == before
    assert {p: os.lstat(logdir / p).st_mode for p in before} == modes
    assert ev.stat().st_ino == ino and ev.stat().st_mtime_ns == mtime
    assert api.retired(str(logdir)) == []
    assert not os.listdir(logdir / ".tb-footprint" / "retired")
    kinds = [h["kind"] for h in api.history(str(logdir))]
    assert kinds[-2:] == ["retire", "restore"]


def test_retire_across_filesystems_copies_checks_and_deletes(tmp_path):
    vault = Path("/dev/shm") / f"tbfp-test-{uuid.uuid4().hex[:8]}"
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    try:
        vault.mkdir()
        assert os.stat(vault).st_dev != os.stat(logdir).st_dev, "needs /dev/shm on another filesystem"
        before = user_files(logdir)
        rep = api.retire(str(logdir), rule(runs=["train"]), dry_run=False, backup_dir=str(vault))
        assert rep.ok, rep.to_dict()
        m = api.operation(str(logdir), rep.outcomes[0].op_id, backup_dir=str(vault))
        assert m["same_fs"] is False and m["tree_sha256"]
        assert not (logdir / "train").exists()
        stored = list((vault / "retired" / m["op_id"] / "files").iterdir())
        assert len(stored) == len(m["tree"]) and not [p for p in stored if p.name.endswith(".partial")]
        # the logdir remembers the vault: restore without naming it
        outs = api.restore(str(logdir), op=m["op_id"])
        assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
        assert user_files(logdir) == before
        assert not (vault / "retired" / m["op_id"]).exists()
    finally:
        shutil.rmtree(vault, ignore_errors=True)


def test_nested_runs_are_explicit(tmp_path):
    write_run(tmp_path, "exp", [1.0, 0.5])
    write_run(tmp_path, "exp/eval", [1.0, 0.6])
    write_run(tmp_path, "other", [1.0, 0.6])
    age(tmp_path)
    before = user_files(tmp_path)
    rep = api.retire(str(tmp_path), rule(runs=["exp"]), dry_run=False)
    assert rep.outcomes == [] and rep.plan.items[0].code == "holds_nested_runs"
    assert "exp/eval" in rep.plan.items[0].reason and user_files(tmp_path) == before
    # taking them along: one operation, the plan names the nested run, the child is folded in
    p = api.retire_plan(str(tmp_path), rule(run_glob="exp*", include_nested=True))
    by = {i.run: i for i in p.items}
    assert by["exp"].selected and by["exp"].takes_along == ["exp/eval"]
    assert not by["exp/eval"].selected and by["exp/eval"].code == "taken_along"
    assert by["exp"].bytes == sum(os.lstat(tmp_path / k).st_size for k in before
                                  if k.startswith("exp/") and os.path.isfile(tmp_path / k))
    rep = api.retire(str(tmp_path), rule(run_glob="exp*", include_nested=True), dry_run=False)
    assert [(o.run, o.status) for o in rep.outcomes] == [("exp", "verified")]
    assert not (tmp_path / "exp").exists() and (tmp_path / "other").is_dir()
    assert api.retired(str(tmp_path))[0]["takes_along"] == ["exp/eval"]
    outs = api.restore(str(tmp_path), run="exp/eval")  # naming the nested run finds its parent's retirement
    assert [o.status for o in outs] == ["restored"]
    assert user_files(tmp_path) == before
    # a nested run alone: its parent stays
    rep = api.retire(str(tmp_path), rule(runs=["exp/eval"]), dry_run=False)
    assert rep.ok and (tmp_path / "exp").is_dir() and not (tmp_path / "exp/eval").exists()


def test_refusals_change_nothing(tmp_path):
    write_run(tmp_path, "a", [1.0])
    write_run(tmp_path, "b", [1.0])
    age(tmp_path)
    planned = api.scan(str(tmp_path))  # before the link: the engine's own refusal is asked
    os.symlink("/etc/hostname", tmp_path / "b" / "link")
    before = user_files(tmp_path)
    rep = api.retire(str(tmp_path), rule(runs=["b", "nope"]), dry_run=False, footprint=planned)
    assert {i.run: i.code for i in rep.plan.items}["nope"] == "not_found"
    [o] = rep.outcomes
    assert o.status == "failed" and o.code == "refused" and "b/link" in o.reason and "symlink" in o.reason
    assert user_files(tmp_path) == before
    # planned with the link seen, the plan says it before the yes (review R17 F7): no outcome
    rep = api.retire(str(tmp_path), rule(runs=["b"]), dry_run=False)
    assert {i.run: i.code for i in rep.plan.items}["b"] == "holds_symlink" and not rep.outcomes
    assert user_files(tmp_path) == before
    # restore never overwrites a new run of the same name
    assert api.retire(str(tmp_path), rule(runs=["a"]), dry_run=False).ok
    write_run(tmp_path, "a", [5.0])
    now = user_files(tmp_path)
    [o] = api.restore(str(tmp_path), run="a")
    assert o.status == "failed" and "stands there now" in o.reason
    assert user_files(tmp_path) == now and len(api.retired(str(tmp_path))) == 1


def test_purge_frees_retired_runs_after_the_grace_period(tmp_path):
    write_run(tmp_path, "a", [1.0, 0.5])
    age(tmp_path)
    rep = api.retire(str(tmp_path), rule(runs=["a"]), dry_run=False)
    op = rep.outcomes[0].op_id
    stored = tmp_path / ".tb-footprint" / "retired" / op
    assert api.purge(str(tmp_path), older_than=3600, yes=True).ops == []  # within the grace period
    assert stored.is_dir()
    preview = api.purge(str(tmp_path), older_than=0)
    assert [o["op_id"] for o in preview.ops] == [op] and preview.freed_bytes == rep.retired_bytes
    assert stored.is_dir()
    done = api.purge(str(tmp_path), older_than=0, yes=True)
    assert done.freed_bytes == rep.retired_bytes and not stored.exists()
    assert api.retired(str(tmp_path)) == []
    # the change log says the retired run's only copy went, and what it freed (issue 13)
    (e,) = [e for e in api.history(str(tmp_path)) if e["kind"] == "purge"]
    assert e["op_id"] == op and e["run"] == "a" and e["freed"] == rep.retired_bytes
    [o] = api.restore(str(tmp_path), op=op)
    assert o.status == "failed" and "purged" in o.reason


def test_reduce_backups_of_a_retired_run_wait_for_its_restore(tmp_path):
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    before = user_files(logdir)
    red = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",), runs=["train"])
    assert red.ok
    run = next(o.run for o in red.outcomes if o.status == "verified")
    age(logdir)
    ret = api.retire(str(logdir), rule(runs=[run]), dry_run=False)
    assert [o.status for o in ret.outcomes] == ["verified"], ret.to_dict()
    op = next(o.op_id for o in red.outcomes if o.status == "verified")
    [o] = api.restore(str(logdir), op=op)
    assert o.status == "failed" and "restore the retirement first" in o.reason
    outs = api.restore(str(logdir), run=run)  # the retirement first, then the reduction
    assert [x.status for x in outs] == ["restored", "restored"], [x.to_dict() for x in outs]
    assert user_files(logdir) == before


# ---------------------------------------------------------------------------------------
# the CLI
# ---------------------------------------------------------------------------------------
def cli(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", *args], env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_cli_dry_run_by_default_then_yes(tmp_path):
    finals = sweep(tmp_path)
    before = user_files(tmp_path)
    args = ["retire", str(tmp_path), "--group", "sweep/*", "--keep-best", "5", "--metric", "val/loss",
            "--mode", "min"]
    r = cli(*args, "-n")
    assert r.returncode == 0, r.stderr
    assert "3 run(s) to retire" in r.stdout and "nothing moved (dry run)" in r.stdout
    assert "val/loss 0.9 #8/8" in r.stdout  # each run's metric is shown
    assert user_files(tmp_path) == before
    r = cli(*args, "--yes", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    worst = sorted(finals, key=finals.get)[5:]
    assert sorted(o["run"] for o in out["outcomes"] if o["status"] == "verified") == sorted(worst)
    r = cli("retired", str(tmp_path), "--search", "lr6")
    assert "sweep/lr6" in r.stdout and "1 retired run(s)" in r.stdout
    r = cli("restore", str(tmp_path), "sweep/lr6", "--yes")
    assert r.returncode == 0 and "restored" in r.stdout
    assert (tmp_path / "sweep/lr6").is_dir()
