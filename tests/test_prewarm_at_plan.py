"""A reduce's own plan starts TensorBoard's app imports as soon as its load of the original is
under way, before it waits for that load (issue #28 item 3): the route crawl waited for them
when they started only with the backup (on a 20 MB run the backup is shorter than the
imports), and still when they started after the plan's wait. A plan that is not a reduce's (a
dry run, the tab's plan) never starts them."""
import os
import random
from pathlib import Path

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine import transaction
from tb_footprint_plugin.verify import data_server_binary, routes
from tb_footprint_plugin.verify.original import release_parked

needs_rust = pytest.mark.skipif(data_server_binary() is None, reason="no data server binary")


def _run(run: Path, steps: int = 600) -> None:
    """Two histogram tags a step: more than the 500 the default view keeps, so the plan's
    selection asks the Rust data server which it keeps (and parks that load)."""
    rng = random.Random(0)
    run.mkdir(parents=True)
    with synth.EventWriter(str(run)) as w:
        for step in range(steps):
            w.scalar("loss", step, 1.0 / (step + 1))
            for tag in ("layer1/weight", "layer2/weight"):
                w.histogram(tag, step, [rng.gauss(0, 1) for _ in range(40)])
    old = 1_700_000_000
    for dirpath, dirs, files in os.walk(run.parent):
        for n in files + dirs:
            os.utime(os.path.join(dirpath, n), (old, old))
    os.utime(run.parent, (old, old))


def _noting(monkeypatch) -> list:
    """Every prewarm call, noting whether a run's transaction steps had started."""
    calls: list = []
    started: list = []
    real_prewarm, real_steps = routes.prewarm, transaction._run_steps

    def prewarm():
        calls.append("during the transaction" if started else "before the transaction")
        real_prewarm()

    def run_steps(*a, **kw):
        started.append(True)
        return real_steps(*a, **kw)

    monkeypatch.setattr(routes, "prewarm", prewarm)
    monkeypatch.setattr(transaction, "_run_steps", run_steps)
    return calls


@needs_rust
def test_a_reduce_starts_the_app_imports_at_its_plan(tmp_path, monkeypatch):
    logdir = tmp_path / "logdir"
    _run(logdir / "run")
    calls = _noting(monkeypatch)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False)
    assert [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]
    assert rep.outcomes[0].verification["ok"]
    assert calls and calls[0] == "before the transaction", calls


@needs_rust
def test_a_plan_alone_does_not_start_them(tmp_path, monkeypatch):
    logdir = tmp_path / "logdir"
    _run(logdir / "run")
    calls = _noting(monkeypatch)
    try:
        p = api.plan(str(logdir), "archive")
        assert any(rp.actions for rp in p.runs), "the plan rewrites the event file (its selection ran)"
        assert calls == []
    finally:
        release_parked(str(logdir / "run"))


@needs_rust
def test_the_imports_start_while_the_plans_load_is_under_way(tmp_path, monkeypatch):
    """The plan waits for its Rust load of the original (~0.1 s on a 20 MB run): the app's
    imports start before that wait, not after it (they had that thread's idle time to use).
    The load is held until the prewarm was called; started only after the load, the prewarm
    comes after the hold's timeout and the load proceeds unprompted."""
    import threading

    from tb_footprint_plugin.verify import readers

    logdir = tmp_path / "logdir"
    _run(logdir / "run")
    called = threading.Event()
    seen: list = []
    real_prewarm, real_open = routes.prewarm, readers.Reader.open

    def prewarm():
        called.set()
        real_prewarm()

    def open_(self):
        if not seen:  # the first reader is the plan's load of the original
            seen.append(called.wait(timeout=5))
        return real_open(self)

    monkeypatch.setattr(routes, "prewarm", prewarm)
    monkeypatch.setattr(readers.Reader, "open", open_)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False)
    assert [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]
    assert seen == [True], "the plan's load of the original finished before the app's imports started"
