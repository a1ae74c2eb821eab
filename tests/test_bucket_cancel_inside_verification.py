"""A bucket run's rewrite looks at a cancel inside its verification too (report G, left open):
``bucket_rewrite.ObjectReduce`` verifies the staged run with TensorBoard's readers in its stage
step, and before it passed no ``should_stop``, so a cancel (Ctrl-C, the tab's Cancel, a run's
timeout) waited for the whole verification. Here the route crawl is made slow (as in
``test_cancel_inside_verification``) and the batch cancelled once it is in there, on moto's S3:
the reduce returns at once, the run is rolled back as a cancel between steps leaves it ("cancelled
before the commit point", never "verification failed"), every object is as it was and no journal
is left.
"""
from __future__ import annotations

import threading
import time

import pytest

from test_objstore import _write_rewrite_logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.engine.recovery_rules import CANCELLED_REASON
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.verify import dashboard, routes

pytestmark = pytest.mark.usefixtures("disarm_faults")

#: how long the slowed crawl would last if the cancel were not seen inside it
SLOW_S = 30.0
#: how soon after the cancel the reduce must have returned (rollback included)
PROMPT_S = 5.0


def test_a_cancel_inside_a_bucket_rewrites_verification_ends_it_at_once(s3_bucket, tmp_path, monkeypatch):
    url = s3_bucket.upload(_write_rewrite_logdir(tmp_path / "logs"), "c")
    before = s3_bucket.hashes("c")
    monkeypatch.setattr(dashboard, "FULL_READ_BYTES", 1 << 40)  # every point read, the routes crawled
    inside = threading.Event()
    real_groups = routes._crawl_groups

    def slow_groups(*a, **kw):
        groups = real_groups(*a, **kw)
        core = groups[0]

        def slow_core():
            last = None
            for last in core():
                yield last
            inside.set()
            end = time.monotonic() + SLOW_S
            while time.monotonic() < end:  # a slow route: each answer takes a tenth of a second
                time.sleep(0.1)
                yield last

        return [slow_core] + groups[1:]

    monkeypatch.setattr(routes, "_crawl_groups", slow_groups)
    cancel = api.CancelToken()
    got: dict = {}

    def reduce() -> None:
        try:
            got["report"] = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0,
                                              runs=["exp/hist"], verify_backends=("python",), cancel=cancel)
        except BaseException as e:  # noqa: BLE001 - shown by the assertion below
            got["error"] = e

    t = threading.Thread(target=reduce)
    t.start()
    assert inside.wait(240), "the verification never reached its slowed part"
    time.sleep(0.3)  # well inside it
    cancelled = time.monotonic()
    cancel.cancel()
    t.join(SLOW_S + 120)
    took = time.monotonic() - cancelled
    assert not t.is_alive()
    assert "error" not in got, got.get("error")
    assert took < PROMPT_S, f"the reduce returned {took:.1f}s after the cancel: it waited for the verification"
    (o,) = got["report"].outcomes
    # what a cancel gives on every store (the token's own ``Cancelled``, coded interrupted as on a
    # disk): never "verification failed"
    assert (o.status, o.code) == (Outcome.ROLLED_BACK, Failure.INTERRUPTED), o.to_dict()
    assert o.reason == CANCELLED_REASON, o.to_dict()
    # every object of the logdir byte for byte, nothing left beside them (the state prefix holds the
    # plan's scan cache now; no journal is left there: below)
    after = {k: v for k, v in s3_bucket.hashes("c").items() if not k.startswith(".tb-footprint/")}
    assert after == before
    assert api.pending_operations(url) == []
