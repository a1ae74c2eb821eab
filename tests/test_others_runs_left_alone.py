"""A run another user owns is left alone unless asked (review R10 F8).

In a team logdir whose runs others may write, one user's reduce or retire took a teammate's run
into the invoker's private vault: its owner was never told and could not restore it. Now the plan
leaves alone a run whose folder, or a file it would change or move, another uid owns
(``Skip.OTHERS_RUN``, the reason naming the owner), for reduce and retire alike (one rule,
``plan.owners``); ``include_others_runs`` / ``--include-others-runs`` takes them, and each such
run's outcome then says whose vault holds it. Root is no exception. A bucket has no owners.

The real cases run as root (CI does) with files chowned to a uid nobody has: the tool's user is
root, so those files are another user's. The two-user case is ``test_r10_another_users_run``.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO
from helpers_runs import write_loss_run
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Skip
from tb_footprint_plugin.plan.planner import make_plan
from tb_footprint_plugin.plan.retire import RetireRule, plan_retire
from tb_footprint_plugin.scan.model import FileEntry, LogdirFootprint, RunFootprint
from tb_footprint_plugin.scan.scanner import scan
from test_plugin_routes import logdir, outside  # noqa: F401 (fixtures)

STRANGER = 54321  # a uid with no name here: said "uid 54321"
OLD = 1_600_000_000



@pytest.fixture(autouse=True)
def as_root():
    assert os.geteuid() == 0, "these tests chown files to another uid: run them as root (CI does)"


def _fp(run_uid=None, file_uid=None, touched=True) -> LogdirFootprint:
    """One run with an xprof cache the archive policy deletes (``touched``) and a file it keeps."""
    files = [FileEntry("r/plugins/profile/s/host.trace.json.gz" if touched else "r/notes.txt", 10, 0.0, "file",
                       categories={"profile_cache" if touched else "other": 10}, uid=file_uid)]
    run = RunFootprint(name="r", path="r", total_bytes=10, files=files, uid=run_uid)
    return LogdirFootprint(logdir="/nowhere", scanned_at=0.0, total_bytes=10, runs=[run], categories={})


def _chown_tree(root, uid) -> None:
    os.chown(root, uid, -1)
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            os.chown(os.path.join(d, n), uid, -1, follow_symlinks=False)


def _tree(root) -> dict:
    out = {}
    for d, _dirs, files in os.walk(root):
        for n in files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = (f.read(), st.st_mtime_ns, st.st_mode)
    return out


@pytest.mark.parametrize("where", ["folder", "file"])
def test_plan_leaves_another_users_run_alone_unless_asked(where):
    fp = _fp(run_uid=STRANGER if where == "folder" else None, file_uid=STRANGER if where == "file" else None)
    (rp,) = make_plan(fp, "archive", quiet_period=0).runs
    assert rp.actions and rp.code == Skip.OTHERS_RUN and rp.owner_uid == STRANGER, rp
    assert rp.skipped.startswith(f"owned by uid {STRANGER}: its owner reduces it; nothing changed"), rp.skipped
    assert "--include-others-runs" in rp.skipped
    assert make_plan(fp, "archive", quiet_period=0).removable_bytes == 0
    (taken,) = make_plan(_fp(run_uid=STRANGER if where == "folder" else None,
                             file_uid=STRANGER if where == "file" else None),
                         "archive", quiet_period=0, include_others_runs=True).runs
    assert not taken.skipped and taken.owner_uid == STRANGER and taken.to_dict()["owner_uid"] == STRANGER


def test_another_users_file_the_plan_does_not_touch_changes_nothing():
    # a stranger's notes.txt beside the run's own cache: only the files the plan changes count
    fp = _fp()
    fp.runs[0].files.append(FileEntry("r/notes.txt", 5, 0.0, "file", categories={"other": 5}, uid=STRANGER))
    (rp,) = make_plan(fp, "archive", quiet_period=0).runs
    assert not rp.skipped and rp.owner_uid is None, rp
    # and a run with nothing to do says that, whoever owns it
    (rp,) = make_plan(_fp(run_uid=STRANGER, touched=False), "archive", quiet_period=0).runs
    assert rp.code == Skip.NOTHING


def test_retire_plan_uses_the_same_rule():
    fp = _fp(file_uid=STRANGER, touched=False)  # a retirement moves every file: notes.txt counts
    (item,) = plan_retire(fp, RetireRule(runs=["r"]), quiet_period=0, now=OLD + 10**9).items
    assert not item.selected and item.code == Skip.OTHERS_RUN and item.owner_uid == STRANGER
    assert item.reason.startswith(f"owned by uid {STRANGER}: its owner retires it"), item.reason
    (item,) = plan_retire(fp, RetireRule(runs=["r"], include_others_runs=True), quiet_period=0,
                          now=OLD + 10**9).items
    assert item.selected and item.owner_uid == STRANGER


def test_scan_carries_another_users_uid(tmp_path):
    write_loss_run(tmp_path / "theirs", seed=1)
    write_loss_run(tmp_path / "mine", seed=2)
    _chown_tree(tmp_path / "theirs", STRANGER)
    fp = scan(str(tmp_path), write_cache=False)
    theirs, mine = fp.run("theirs"), fp.run("mine")
    assert theirs.uid == STRANGER and {f.uid for f in theirs.files} == {STRANGER}
    assert mine.uid is None and {f.uid for f in mine.files} == {None}
    d = [r for r in fp.to_dict()["runs"] if r["name"] == "mine"][0]
    assert "uid" not in d and all("uid" not in f for f in d["files"])


@pytest.mark.parametrize("where", ["folder", "file"])
def test_reduce_leaves_it_alone_then_takes_it_on_request_and_says_whose_vault(tmp_path, where):
    logdir = tmp_path / "team"
    write_loss_run(logdir / "theirs", seed=3)
    for d, _dirs, files in os.walk(logdir):
        for n in files:
            os.utime(os.path.join(d, n), (OLD, OLD))
    if where == "folder":
        os.chown(logdir / "theirs", STRANGER, -1)
    else:
        _chown_tree(logdir / "theirs" / "plugins", STRANGER)
    before = _tree(logdir / "theirs")
    p = api.plan(str(logdir), "archive", quiet_period=0)
    (rp,) = p.runs
    assert rp.code == Skip.OTHERS_RUN and f"uid {STRANGER}" in rp.skipped, rp
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",))
    (o,) = rep.outcomes
    assert o.status == "skipped" and o.code == Skip.OTHERS_RUN, o
    assert _tree(logdir / "theirs") == before
    assert api.operations(str(logdir)) == []
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",),
                            include_others_runs=True)
    (o,) = rep.outcomes
    assert o.status == "verified", o
    assert f"owned by uid {STRANGER}, taken on request" in o.reason and "root (uid 0)" in o.reason, o.reason
    (f,) = [x for x in o.findings if x["code"] == Finding.OTHERS_RUN_TAKEN]
    assert f["path"] and os.path.isdir(f["path"]), f
    back = api.restore(str(logdir), run="theirs")
    assert [b.status for b in back] == ["restored"]
    assert {k: v[0] for k, v in _tree(logdir / "theirs").items()} == {k: v[0] for k, v in before.items()}


def test_retire_leaves_it_alone_then_takes_it_on_request(tmp_path):
    logdir = tmp_path / "team"
    write_loss_run(logdir / "theirs", seed=4)
    for d, _dirs, files in os.walk(logdir):
        for n in files:
            os.utime(os.path.join(d, n), (OLD, OLD))
    os.chown(logdir / "theirs" / "plugins", STRANGER, -1)  # a folder inside: its files count, not it
    os.chown(next((logdir / "theirs").glob("events.out.tfevents.*")), STRANGER, -1)
    before = _tree(logdir / "theirs")
    rep = api.retire(str(logdir), api.retire_rule(runs=["theirs"]), dry_run=False, quiet_period=0)
    assert rep.outcomes == []
    (item,) = rep.plan.items
    assert item.code == Skip.OTHERS_RUN and not rep.plan.selected, item
    assert _tree(logdir / "theirs") == before
    rep = api.retire(str(logdir), api.retire_rule(runs=["theirs"], include_others_runs=True), dry_run=False,
                     quiet_period=0)
    (o,) = rep.outcomes
    assert o.status == "verified" and "taken on request" in o.reason, o
    assert any(x["code"] == Finding.OTHERS_RUN_TAKEN for x in o.findings)
    assert not (logdir / "theirs").exists()


def test_cli_says_it_and_takes_the_flag(tmp_path):
    logdir = tmp_path / "team"
    write_loss_run(logdir / "theirs", seed=5)
    for d, _dirs, files in os.walk(logdir):
        for n in files:
            os.utime(os.path.join(d, n), (OLD, OLD))
    _chown_tree(logdir / "theirs", STRANGER)
    env = dict(os.environ, PYTHONPATH=REPO)

    def cli(*args):
        r = subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", *args], capture_output=True, text=True,
                           env=env, timeout=600)
        return r

    r = cli("plan", str(logdir), "--quiet-period", "0", "--json")
    assert r.returncode == 0, r.stderr
    (rp,) = json.loads(r.stdout)["runs"]
    assert rp["code"] == "others_run" and rp["owner_uid"] == STRANGER, rp
    r = cli("plan", str(logdir), "--quiet-period", "0")
    assert "[skipped [others_run]: owned by uid 54321" in r.stdout, r.stdout
    r = cli("plan", str(logdir), "--quiet-period", "0", "--json", "--include-others-runs")
    (rp,) = json.loads(r.stdout)["runs"]
    assert rp["code"] is None and rp["owner_uid"] == STRANGER, rp
    r = cli("retire", str(logdir), "theirs", "--quiet-period", "0", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    (item,) = json.loads(r.stdout)["plan"]["items"]
    assert item["code"] == "others_run", item
    r = cli("retire", str(logdir), "theirs", "--quiet-period", "0", "--dry-run", "--json", "--include-others-runs")
    (item,) = json.loads(r.stdout)["plan"]["items"]
    assert item["selected"] and item["owner_uid"] == STRANGER, item
    r = cli("reduce", str(logdir), "--quiet-period", "0", "--yes", "--verify", "python")
    assert "theirs: skipped [others_run]" in r.stdout and "theirs: verified" not in r.stdout, r.stdout
    r = cli("reduce", str(logdir), "--quiet-period", "0", "--yes", "--include-others-runs", "--verify", "python")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    assert f"owned by uid {STRANGER}, taken on request" in r.stdout and "[others_run_taken]" in r.stdout, r.stdout
    shutil.rmtree(logdir, ignore_errors=True)


def test_the_tab_shows_it_left_alone_and_its_reduce_leaves_it(logdir):  # noqa: F811 (the routes' fixture)
    """The tab keeps the default: /plan shows another user's run skipped with its code and reason,
    as any other skip, and a reduce asked for it from the tab leaves it as it is."""
    from test_plugin_routes import App

    _chown_tree(logdir / "big", STRANGER)
    before = _tree(logdir / "big")
    app = App(logdir)
    try:
        p = app.get("/plan", query_string={"run": ["big", "mid"]}).get_json()
        views = {r["run"]: r for r in p["runs"]}
        assert views["big"]["code"] == "others_run" and f"owned by uid {STRANGER}" in views["big"]["skipped"]
        assert views["mid"]["code"] is None and views["mid"]["actions"]
        r = app.post("/reduce", {"runs": ["big", "mid"], "digests": [views["big"]["digest"], views["mid"]["digest"]]})
        assert r.status_code == 202, r.get_data(as_text=True)
        job = app.wait_job(r.get_json()["job"]["id"])
        by = {o["run"]: o for o in job["result"]["outcomes"]}
        assert by["big"]["status"] == "skipped" and by["big"]["code"] == "others_run", by["big"]
        assert by["mid"]["status"] == "verified", by["mid"]
        assert _tree(logdir / "big") == before
    finally:
        app.close()


def test_the_root_runs_folder_is_the_logdir_not_anyones_run(tmp_path):
    """Review R13 F3: the run at the logdir's root ('.') was judged by the logdir folder's owner, so
    a user's own files at the top of a team folder of the lead's were 'owned by' the lead and
    nothing was reduced. The logdir is the folder the user named, no run folder of anyone's: its
    files decide, as everywhere; a subfolder run of the lead's is still the lead's."""
    logdir = tmp_path / "team"
    write_loss_run(logdir, seed=7)  # a run at the root, every file the user's own
    write_loss_run(logdir / "leads", seed=8)
    for d, _dirs, files in os.walk(logdir):
        for n in files:
            os.utime(os.path.join(d, n), (OLD, OLD))
    os.chown(logdir, STRANGER, -1)  # the team folder belongs to the lead
    os.chown(logdir / "leads", STRANGER, -1)
    runs = {rp.run: rp for rp in api.plan(str(logdir), "archive", quiet_period=0).runs}
    assert runs["."].code is None and not runs["."].skipped and runs["."].owner_uid is None, runs["."]
    assert runs["leads"].code == Skip.OTHERS_RUN, runs["leads"]
    before = _tree(logdir / "leads")
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",))
    by = {o.run: o for o in rep.outcomes}
    assert by["."].status == "verified" and "taken on request" not in (by["."].reason or ""), by["."].to_dict()
    assert by["leads"].code == Skip.OTHERS_RUN and _tree(logdir / "leads") == before
    # a file of the lead's at the root is still the lead's: the rule is the files', not the folder's
    back = api.restore(str(logdir), run=".")
    assert [b.status for b in back] == ["restored"]
    xplane = next(p for p in logdir.glob("plugins/profile/*/*.xplane.pb"))
    os.chown(xplane, STRANGER, -1)
    (rp,) = [r for r in api.plan(str(logdir), "archive", quiet_period=0).runs if r.run == "."]
    assert rp.code == Skip.OTHERS_RUN, rp
