"""Review R12 H2/H3: the owner rule is asked again where the run is held, and the plan names
another user's runs before anyone says yes.

H2: the owner rule (``plan.owners``) was asked of the SCAN only; the engine that moves or changes
the run never asked again. So a run handed to another user after the scan the plan was made from
(``cp -r`` as root, then ``chown -R alice``) was taken with no word:
(a) the tab's retire passes its kept scan (``footprint=``) to ``api.retire``;
(b) a batch reduce: a run chowned while another is reduced (a nightly batch of hours).
Now the retirement's inventory and the reduce's preflight, under the run's lock, ask the same rule
of what they read: left alone with ``Skip.OTHERS_RUN`` unless the plan was made with the opt-in.
H3: with ``--include-others-runs`` the text plan, the reduce's question and ``retire --dry-run``
say which runs are another user's.

Run as root (CI does): the tool's user is root; 54321 is another user (no name here).
"""
import os
import subprocess
import sys

import pytest

from conftest import REPO
from helpers_runs import write_loss_run
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Outcome, Skip
from tb_footprint_plugin.plan import owners
from tb_footprint_plugin.plugin import read_routes
from tb_footprint_plugin.scan.scanner import scan

STRANGER = 54321
OLD = 1_600_000_000


@pytest.fixture(autouse=True)
def as_root():
    assert os.geteuid() == 0, "these tests chown files to another uid: run them as root (CI does)"


def _chown_tree(root, uid):
    os.chown(root, uid, -1)
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            os.chown(os.path.join(d, n), uid, -1, follow_symlinks=False)


def _old(logdir):
    for d, _dirs, files in os.walk(logdir):
        for n in files:
            os.utime(os.path.join(d, n), (OLD, OLD))


def _tree(root) -> dict:
    out = {}
    for d, _dirs, files in os.walk(root):
        for n in files:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def _said(o) -> bool:
    return o.code == Skip.OTHERS_RUN or any(f.get("code") == Finding.OTHERS_RUN_TAKEN for f in o.findings)


def test_retire_from_a_kept_scan_after_a_chown(tmp_path):
    logdir = tmp_path / "team"
    write_loss_run(logdir / "r", seed=1)
    write_loss_run(logdir / "s", seed=4)
    _old(logdir)
    fp = scan(str(logdir), write_cache=False)  # the tab's kept scan
    _chown_tree(logdir / "r", STRANGER)  # the run is another user's now
    before = _tree(logdir / "r")
    rep = api.retire(str(logdir), api.retire_rule(runs=["r"]), dry_run=False, quiet_period=0, footprint=fp)
    outs = [(o.run, o.status, o.code, o.reason) for o in rep.outcomes]
    assert not any(o.status == Outcome.VERIFIED and not _said(o) for o in rep.outcomes), outs
    (o,) = rep.outcomes
    assert o.status == Outcome.SKIPPED and o.code == Skip.OTHERS_RUN, outs
    assert f"owned by uid {STRANGER} since the plan; nothing changed" in o.reason, o.reason
    assert _tree(logdir / "r") == before  # nothing moved
    # a plan made with the opt-in takes it, and the engine does not refuse what it was asked to take
    fp = scan(str(logdir), write_cache=False)
    _chown_tree(logdir / "s", STRANGER)
    rule = api.retire_rule(runs=["s"], include_others_runs=True)
    rep = api.retire(str(logdir), rule, dry_run=False, quiet_period=0, footprint=fp)
    assert [(o.run, o.status) for o in rep.outcomes] == [("s", Outcome.VERIFIED)], rep.outcomes
    assert not (logdir / "s").exists()


@pytest.mark.parametrize("opt_in", [False, True])
def test_batch_reduce_run_chowned_mid_batch(tmp_path, opt_in):
    logdir = tmp_path / "team"
    write_loss_run(logdir / "a", seed=2)
    write_loss_run(logdir / "b", seed=3)
    _old(logdir)
    done, before = [], {}

    def on_outcome(o):
        if not done:  # the first run settled: the other becomes another user's before its turn
            done.append(o.run)
            other = logdir / ("b" if o.run == "a" else "a")
            _chown_tree(other, STRANGER)
            before.update(_tree(other))

    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0, jobs=1,
                            verify_backends=("python",), on_outcome=on_outcome, include_others_runs=opt_in)
    outs = [(o.run, o.status, o.code, o.reason) for o in rep.outcomes]
    (second,) = [o for o in rep.outcomes if o.run != done[0]]
    if opt_in:  # asked for: taken, the engine does not refuse it
        assert second.status == Outcome.VERIFIED, outs
        return
    assert not (second.status == Outcome.VERIFIED and not _said(second)), outs
    assert second.status == Outcome.SKIPPED and second.code == Skip.OTHERS_RUN, outs
    assert f"owned by uid {STRANGER} since the plan; nothing changed" in second.reason, outs
    assert _tree(logdir / second.run) == before  # not a byte changed


def test_plan_texts_name_another_users_runs_before_the_yes(tmp_path):
    logdir = tmp_path / "team"
    write_loss_run(logdir / "theirs", seed=5)
    write_loss_run(logdir / "mine", seed=6)
    _old(logdir)
    _chown_tree(logdir / "theirs", STRANGER)
    env = dict(os.environ, PYTHONPATH=REPO)

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", *args, "--quiet-period", "0",
                               "--include-others-runs"], capture_output=True, text=True, env=env, timeout=600,
                              stdin=subprocess.DEVNULL)

    said = f"owned by uid {STRANGER}: taken on request (--include-others-runs)"
    r = cli("plan", str(logdir))
    assert r.returncode == 0, r.stderr
    theirs = r.stdout[r.stdout.index("theirs:"):]
    assert said in theirs.split("\n\n")[0], r.stdout  # under its own head line
    mine = r.stdout[r.stdout.index("mine:"):]
    assert said not in mine.split("\n\n")[0], r.stdout
    # the reduce's question (no terminal here: the plan is shown, nothing changes, exit 2)
    r = cli("reduce", str(logdir), "--verify", "python")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert said in r.stdout and "1 of them another user's" in r.stdout, r.stdout
    assert _tree(logdir / "theirs")  # nothing was reduced
    r = cli("retire", str(logdir), "theirs", "mine", "--dry-run")
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if "theirs" in ln)
    assert said in line, r.stdout
    assert said not in next(ln for ln in r.stdout.splitlines() if " mine " in ln), r.stdout


def test_a_user_name_is_looked_up_once_per_uid(monkeypatch):
    """R12's note: 100k runs of another user were 100k NSS lookups (LDAP: ms each)."""
    import pwd

    calls = []
    real = pwd.getpwuid

    def counting(uid):
        calls.append(uid)
        return real(uid)

    monkeypatch.setattr(pwd, "getpwuid", counting)
    owners.user_label.cache_clear()
    owners.left_alone.cache_clear()
    reasons = {id(owners.left_alone(STRANGER, "reduces")) for _ in range(1000)}
    for _ in range(1000):
        owners.taken_ahead(STRANGER)
        owners.user_label(0)
    assert calls.count(STRANGER) == 1 and calls.count(0) == 1, len(calls)
    assert len(reasons) == 1  # one string for every run left alone


def test_the_tab_overview_memo_sees_a_chown(tmp_path):
    logdir = tmp_path / "team"
    write_loss_run(logdir / "r", seed=7)
    _old(logdir)
    sig = read_routes._signature(scan(str(logdir), write_cache=False))
    assert read_routes._signature(scan(str(logdir), write_cache=False)) == sig  # unchanged: one overview
    _chown_tree(logdir / "r", STRANGER)  # no size changes; the run's verdict does
    assert read_routes._signature(scan(str(logdir), write_cache=False)) != sig
