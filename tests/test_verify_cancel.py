"""``api.verify`` (the re-check of kept reductions) takes ``cancel``, as reduce, restore and purge
do (#26 loose end): a cancel (Ctrl-C, the tab's job cancel) stops it between runs, among a run's
backups and inside its verification by TensorBoard's readers (``verify_reduction(should_stop=)``),
on a disk and on a bucket. A run not checked is a result that says so, coded ``interrupted``,
never ``ok``; before, ``verify`` took no cancel at all and checked every run to the end.
"""
from __future__ import annotations

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure
from tb_footprint_plugin.demo import generate_demo
from tb_footprint_plugin.engine import bucket_catalogue, checks

DROP_PROFILES = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}
PY = ("python",)


def _reduced(root, url=None) -> str:
    """A demo logdir (at ``url`` when given, else ``root``) with its profiles dropped: several
    kept reductions, each of several backups."""
    generate_demo(str(root), scale=0.05)
    where = url(root) if url else str(root)
    rep = api.reduce_logdir(where, policy=DROP_PROFILES, dry_run=False, quiet_period=0, verify_backends=PY)
    assert sum(o.status == "verified" for o in rep.outcomes) >= 2, [o.to_dict() for o in rep.outcomes]
    return where


def _all_unchecked(res: list, n: int, rehashed: int = 0) -> None:
    """``n`` results, none ok, each coded interrupted; the first ``rehashed`` had their backups
    re-hashed before the cancel (so said), the others not (never said intact)."""
    assert len(res) == n, res
    for i, r in enumerate(res):
        assert (r["ok"], r["checked"], r["code"]) == (False, False, Failure.INTERRUPTED), r
        assert r["backups_ok"] is (i < rehashed) and r["verification"]["ok"] is False, r


def test_a_cancel_before_verify_leaves_every_run_unchecked_on_a_disk(tmp_path):
    logdir = _reduced(tmp_path / "logs")
    n = len(api.restorable(logdir))
    cancel = api.CancelToken()
    cancel.cancel()
    _all_unchecked(api.verify(logdir, verify_backends=PY, cancel=cancel), n)
    again = api.verify(logdir, verify_backends=PY)
    assert all(r["ok"] and r["checked"] is True for r in again), again  # nothing was wrong: only unchecked


def test_a_cancel_inside_a_runs_verification_stops_it_there_on_a_disk(tmp_path, monkeypatch):
    """The cancel comes as the first run's readers start (the real verification, told to stop):
    that run has its backups re-hashed but no verdict, and no run after it is checked."""
    logdir = _reduced(tmp_path / "logs")
    n = len(api.restorable(logdir))
    cancel = api.CancelToken()
    real = checks.compare_views
    calls = []

    def cancelled_inside(*a, **kw):
        calls.append(1)
        cancel.cancel()
        return real(*a, **kw)

    monkeypatch.setattr(checks, "compare_views", cancelled_inside)
    res = api.verify(logdir, verify_backends=PY, cancel=cancel)
    assert calls == [1]  # the runs after it were not started
    _all_unchecked(res, n, rehashed=1)
    first = res[0]
    assert first["damaged_backups"] == [] and "readers" in first["verification"]["checks"][-1]["detail"], first


def test_a_cancel_between_runs_on_a_bucket(s3_bucket, tmp_path, monkeypatch):
    url = _reduced(tmp_path / "logs", lambda root: s3_bucket.upload(root, "v"))
    n = len(api.restorable(url))
    assert all(r["ok"] for r in api.verify(url))
    cancel = api.CancelToken()
    cancel.cancel()
    _all_unchecked(api.verify(url, cancel=cancel), n)
    # cancelled at the first backup looked at: no run after it is started, and it is cut short
    # unless that was its only backup
    cancel = api.CancelToken()
    real = bucket_catalogue._copy_ok
    looked = []

    def then_cancel(*a, **kw):
        looked.append(1)
        cancel.cancel()
        return real(*a, **kw)

    monkeypatch.setattr(bucket_catalogue, "_copy_ok", then_cancel)
    res = api.verify(url, cancel=cancel)
    assert looked == [1] and len(res) == n
    assert res[0]["ok"] if res[0].get("checked", True) else res[0]["code"] == Failure.INTERRUPTED, res[0]
    _all_unchecked(res[1:], n - 1)
    # one operation of several backups, cancelled at its first: not checked, never ok
    most = max(api.restorable(url), key=lambda o: o["files"])
    assert most["files"] >= 2, most
    cancel, looked[:] = api.CancelToken(), []
    _all_unchecked(api.verify(url, op=most["op_id"], cancel=cancel), 1)
    assert looked == [1]


def test_verify_without_a_cancel_checks_every_run(tmp_path):
    """No cancel: every run checked and ok, as before (no ``checked: False`` row)."""
    logdir = _reduced(tmp_path / "logs")
    res = api.verify(logdir, verify_backends=PY)
    assert res and all(r["ok"] and r.get("checked", True) for r in res), res


def test_ctrl_c_in_the_cli_verify_says_which_runs_were_not_checked(tmp_path, monkeypatch, capsys):
    """``tb-footprint verify``: the first Ctrl-C (a SIGINT while the first run's readers start)
    cancels the re-check through ``api.verify(cancel=)``: every reduction is listed, none ok, each
    coded interrupted, and the exit status is 130 (an interrupt), never 0."""
    import json
    import os
    import signal

    from tb_footprint_plugin import cli

    logdir = _reduced(tmp_path / "logs")
    n = len(api.restorable(logdir))
    real = checks.compare_views

    def interrupted_inside(*a, **kw):
        os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C, as the terminal sends it
        return real(*a, **kw)

    monkeypatch.setattr(checks, "compare_views", interrupted_inside)
    before = signal.getsignal(signal.SIGINT)
    rc = cli.main(["verify", logdir, "--verify", "python", "--json"])
    assert signal.getsignal(signal.SIGINT) is before  # the handler before is put back
    out = capsys.readouterr()
    assert rc == 130, out.err
    _all_unchecked(json.loads(out.out), n, rehashed=1)
    assert "not checked [interrupted]" in out.err, out.err
