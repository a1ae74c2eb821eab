"""The reduce does the plan the user confirmed, or nothing for that run (review R14 F4).

The terminal's question ("Reduce 1 run(s)? [y/N]") and the tab's per-run dialog showed a plan,
and the reduce then planned again: a profile session an archive sync added while the question
was open was deleted though never shown. Now the front ends hand back each shown run's
``api.plan_digest`` (``confirmed=``), and ``api.hold_to_confirmed`` (the one rule, in the api)
leaves alone, with ``Skip.PLAN_CHANGED`` and a message to plan again, a run whose plan is another
by then; the other runs of the batch go on.
"""
import glob
import os
import pty
import shutil
import subprocess
import sys
import time

from conftest import REAL_FIXTURES as REAL
from helpers_cli import cli_env
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Outcome, Skip
from test_plugin_routes import App, _age, logdir, outside  # noqa: F401 (fixtures)

OLD = time.time() - 3600


def aged(root):
    for p in [root, *root.rglob("*")]:
        os.utime(p, (OLD, OLD), follow_symlinks=False)


def files_of(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def make_logdir(tmp_path):
    logdir = tmp_path / "L"
    for name in ("a", "b"):
        shutil.copytree(REAL / "tf" / "summary_mix", logdir / name, symlinks=True)
    aged(logdir)
    return logdir


def sync_a_session(run_dir):
    """An archive sync (cp -a: old mtimes, the run stays quiet) adds a profile session."""
    src = glob.glob(str(REAL / "jax" / "profiled" / "plugins" / "profile" / "*"))[0]
    shutil.copytree(src, run_dir / "plugins" / "profile" / "2026_01_01_00_00_00")
    aged(run_dir)


def test_a_run_changed_after_the_confirmed_plan_is_left_alone(tmp_path):
    logdir = make_logdir(tmp_path)
    shown = api.plan(str(logdir), "archive", quiet_period=0)
    confirmed = api.confirmed_digests(shown)
    assert len(confirmed) == 2
    sync_a_session(logdir / "a")
    before = files_of(logdir / "a")
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0,
                            verify_backends=("python",), confirmed=confirmed)
    by = {o.run: o for o in rep.outcomes}
    assert by["a"].status == Outcome.SKIPPED and by["a"].code == Skip.PLAN_CHANGED, by["a"].to_dict()
    assert "plan again" in by["a"].reason
    assert files_of(logdir / "a") == before  # the session never shown is still there, and all else
    assert by["b"].status == Outcome.VERIFIED  # per run: the unchanged one is reduced as confirmed
    # without a question (--yes, a job) the reduce does its own plan, as before
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0,
                            verify_backends=("python",), runs=["a"])
    assert rep.outcomes[0].status == Outcome.VERIFIED


def test_a_run_not_shown_is_not_reduced(tmp_path):
    logdir = make_logdir(tmp_path)
    confirmed = api.confirmed_digests(api.plan(str(logdir), "archive", quiet_period=0, runs=["b"]))
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0,
                            verify_backends=("python",), confirmed=confirmed)
    by = {o.run: o for o in rep.outcomes}
    assert by["a"].code == Skip.PLAN_CHANGED and by["b"].status == Outcome.VERIFIED


def test_terminal_question_then_change_skips_the_run(tmp_path):
    logdir = make_logdir(tmp_path)
    env = dict(cli_env(), COLUMNS="200")
    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI on a terminal, asking
        os.execvpe(sys.executable, [sys.executable, "-m", "tb_footprint_plugin.cli", "reduce", str(logdir),
                                    "--run", "a", "--quiet-period", "0", "--verify", "python"], env)
    out = b""
    deadline = time.monotonic() + 120
    while b"[y/N]" not in out and time.monotonic() < deadline:
        out += os.read(fd, 4096)
    assert b"[y/N]" in out, out
    sync_a_session(logdir / "a")  # lands while the user reads the question
    before = files_of(logdir / "a")
    os.write(fd, b"y\n")
    rest = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        rest += chunk
    _, status = os.waitpid(pid, 0)
    text = rest.decode(errors="replace")
    assert "plan_changed" in text and "plan again" in text, text
    assert files_of(logdir / "a") == before  # nothing done to the run the user saw otherwise


def test_tab_per_run_dialog_sends_the_plans_it_showed(logdir):  # noqa: F811 (the routes' fixture)
    app = App(logdir)
    try:
        p = app.get("/plan", query_string={"run": ["big", "mid"]}).get_json()
        views = {r["run"]: r for r in p["runs"]}
        assert all(isinstance(views[n]["digest"], str) for n in ("big", "mid"))
        synth.write_profile_session(str(logdir / "big"), synth.session_name_for(synth.DEFAULT_TIMESTAMP + 600),
                                    n_events=1500, with_caches=True, seed=77)  # a session lands in big meanwhile
        _age(str(logdir / "big"))
        before = files_of(logdir / "big")
        assert app.post("/reduce", {"runs": ["big", "mid"], "digests": "x"}).status_code == 400
        r = app.post("/reduce", {"runs": ["big", "mid"], "digests": [views["big"]["digest"], views["mid"]["digest"]]})
        assert r.status_code == 202, r.get_data(as_text=True)
        job = app.wait_job(r.get_json()["job"]["id"])
        by = {o["run"]: o for o in job["result"]["outcomes"]}
        assert by["big"]["status"] == "skipped" and by["big"]["code"] == Skip.PLAN_CHANGED, by["big"]
        assert by["mid"]["status"] == "verified", by["mid"]
        assert files_of(logdir / "big") == before
    finally:
        app.close()
