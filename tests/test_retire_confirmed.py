"""What ``retire`` does with the runs of its plan before any engine moves one, the same on a disk and
on every bucket (one loop in ``api.retirement``): a run the rule selects now but that is not in the
plan the user confirmed (``only``) is left where it is with ``Skip.NOT_IN_PLAN``; after a cancel
every run left is skipped with ``Skip.CANCELLED``; each outcome is reported to ``on_outcome`` as it
comes; a dry run moves nothing and reports nothing as it goes."""
from pathlib import Path

import pytest

from conftest import tree_hashes
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Outcome, Skip

STATE = ".tb-footprint"
RUNS = ("sweep/lr0", "sweep/lr1", "baseline")


def _write(root: Path) -> Path:
    for i, name in enumerate(RUNS):
        with synth.EventWriter(str(root / name)) as w:
            for step, v in enumerate([1.0, 0.5, 0.2 + i]):
                w.scalar("val/loss", step, v)
    return root


def _without(files: dict, run: str) -> dict:
    return {k: v for k, v in files.items() if k != run and not k.startswith(run + "/")}


@pytest.fixture(params=["disk", "bucket"])
def where(request, tmp_path):
    """(logdir as the API is given it, its user files now): a local folder, or the same runs in an
    S3 bucket (moto)."""
    root = _write(tmp_path / "logs")
    if request.param == "disk":
        return str(root), lambda: {k: v for k, v in tree_hashes(root).items() if not k.startswith(STATE)}
    b = request.getfixturevalue("s3_bucket")
    url = b.upload(root, "logs")
    return url, lambda: {k: v for k, v in b.hashes("logs").items() if not k.startswith(STATE)}


def test_only_the_confirmed_runs_are_retired(where):
    url, user = where
    before = user()
    seen = []
    rep = api.retire(url, api.retire_rule(run_glob="sweep/*"), dry_run=False, quiet_period=0,
                     only=["sweep/lr0"], on_outcome=seen.append)
    by_run = {o.run: o for o in rep.outcomes}
    assert set(by_run) == {"sweep/lr0", "sweep/lr1"}
    assert by_run["sweep/lr0"].status == Outcome.VERIFIED, by_run["sweep/lr0"].reason
    left = by_run["sweep/lr1"]
    assert (left.status, left.code, left.reason) == (Outcome.SKIPPED, Skip.NOT_IN_PLAN,
                                                     "not in the plan that was confirmed")
    assert left.bytes_before == left.bytes_after > 0
    assert [o.run for o in seen] == [o.run for o in rep.outcomes]  # each one told as it came
    assert _without(before, "sweep/lr0") != before and user() == _without(before, "sweep/lr0")


def test_a_cancelled_retire_moves_nothing_and_says_cancelled(where):
    url, user = where
    before = user()
    token = api.CancelToken()
    token.cancel()
    seen = []
    rep = api.retire(url, api.retire_rule(run_glob="sweep/*"), dry_run=False, quiet_period=0, cancel=token,
                     on_outcome=seen.append)
    assert sorted(o.run for o in rep.outcomes) == ["sweep/lr0", "sweep/lr1"]
    assert {(o.status, o.code, o.reason) for o in rep.outcomes} == {(Outcome.SKIPPED, Skip.CANCELLED, "cancelled")}
    assert all(o.bytes_before == o.bytes_after > 0 for o in rep.outcomes)
    assert len(seen) == 2 and user() == before


def test_a_dry_run_lists_every_run_and_reports_none_as_it_goes(where):
    url, user = where
    before = user()
    seen = []
    rule = api.retire_rule(run_glob="sweep/*", keep_list=["sweep/lr0"])
    rep = api.retire(url, rule, quiet_period=0, only=[], on_outcome=seen.append)
    by_run = {o.run: (o.status, o.code, o.bytes_after == 0, o.bytes_after == o.bytes_before > 0) for o in rep.outcomes}
    assert by_run == {"sweep/lr1": (Outcome.DRY_RUN, None, True, False),  # ``only`` is not asked in a dry run
                      "sweep/lr0": (Outcome.SKIPPED, "marked_keep", False, True)}
    assert seen == [] and user() == before
