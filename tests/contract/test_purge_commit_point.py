"""A purge tells its caller its commit point (``api.purge(progress=)``: ``("purge", 0.5)``, once,
right before the first intent is recorded) on every store, and the driver's last cancel check
comes after it: a cancel that arrives while the caller is told (the tab's Cancel clicked as the
job turns "purge") is still honoured, nothing marked or deleted. This is what lets the tab's purge
job stop offering a cancel at that instant and never accept one it cannot honour."""
from contract_stores import buckets, logdir_on, reduced_and_retired  # noqa: F401 - fixtures

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.engine import faults


@pytest.mark.parametrize("store", ["posix", "s3"])
def test_the_commit_point_is_told_before_the_last_cancel_check(store, reduced_and_retired):
    url = reduced_and_retired(store)
    before = {m["op_id"]: m.get("backup_purged") for m in api.operations(url)}
    token = api.CancelToken()
    told, intents = [], []

    def progress(step, fraction):
        # nothing is recorded yet when the caller is told; a cancel given now is honoured
        told.append((step, fraction))
        intents.append({m["op_id"]: m.get("backup_purged") for m in api.operations(url)})
        token.cancel()

    faults.arm("purge.intent", lambda: intents.append("past the intent"))
    try:
        rep = api.purge(url, yes=True, cancel=token, progress=progress)
    finally:
        faults.disarm_all()
    assert told == [("purge", 0.5)] and intents == [before], (told, intents)
    assert rep.ops == [] and rep.freed_bytes == 0, rep.to_dict()
    # the disk's reductions' transaction stopped (its retired runs' then never told again, also
    # stopped); a bucket's one transaction holds both
    assert sorted(k["code"] for k in rep.kept) == ["interrupted", "interrupted"], rep.kept
    assert {m["op_id"]: m.get("backup_purged") for m in api.operations(url)} == before

    # told once per purge, then it goes through
    told.clear()
    rep = api.purge(url, yes=True, progress=lambda step, fraction: told.append((step, fraction)))
    assert told == [("purge", 0.5)] and sorted(o["run"] for o in rep.ops) == ["exp", "old"], rep.to_dict()
