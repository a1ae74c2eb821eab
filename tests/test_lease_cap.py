"""Review R16 F15: a lease claiming an absurd end (``expires`` in the year 5138: a host whose clock
was years ahead, a hand-edited file) kept the run locked for good, and the refusal showed only a
time of day ("lease until 09:46:39"). No lease now counts for more than a day past its renewal
(``lease.MAX_LEASE_S``), a renewal no more than a day past now, and the refusal names the date
when it is not today."""
import json
import re
import time

import pytest

from helpers_cli import run_cli as tbf
from tb_footprint_plugin.engine import lease
from tb_footprint_plugin.engine.journal import RunLock

DAY = 86400.0


def _foreign(renewed, expires):
    return {"run": "x", "host": "some-other-host", "pid": 4242, "shard": None, "renewed": renewed,
            "expires": expires, "token": "abc"}


def test_a_lease_ends_a_day_after_its_last_renewal_at_most():
    now = time.time()
    assert lease.holder_gone(_foreign(now - 2 * DAY, 99999999999), lambda: None, now=now)
    assert lease.holder_gone(_foreign(99999999999, 99999999999), lambda: None, now=now + 3 * DAY)
    # a renewal dated years ahead says nothing; a holder whose journal still moves keeps its run
    assert not lease.holder_gone(_foreign(99999999999, 99999999999), lambda: now, now=now)
    assert not lease.holder_gone(_foreign(now, 99999999999), lambda: None, now=now)  # renewed now: a day
    assert not lease.holder_gone(_foreign(now, now + 60), lambda: None, now=now)  # an ordinary lease


def test_refusal_names_the_date_when_not_today(tmp_path):
    lock = RunLock(str(tmp_path / "locks"), "x")
    (tmp_path / "locks").mkdir()
    now = time.time()
    with open(lock.lease_path, "w") as f:
        json.dump(_foreign(now, 99999999999), f)
    who = lock.live_holder()
    assert who and re.search(r"lease until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", who), who


def test_leases_longer_than_a_day_are_refused():
    with pytest.raises(ValueError):
        lease.configure(lease_seconds=2 * DAY)
    p = tbf("reduce", "/nonexistent", "--lease", "2d", "-n")
    assert p.returncode == 2 and "--lease" in p.stderr, p.stderr
