"""A purge tells its caller its commit point (``api.purge(progress=)``: ``("purge", 0.5)``, once,
right before the first intent is recorded) on every store, and the driver's last cancel check
comes after it: a cancel that arrives while the caller is told (the tab's Cancel clicked as the
job turns "purge") is still honoured, nothing marked or deleted. This is what lets the tab's purge
job stop offering a cancel at that instant and never accept one it cannot honour."""
import itertools
import shutil
import uuid
from contract_stores import buckets  # noqa: F401 - the bucket fixture
from pathlib import Path

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine import faults

_n = itertools.count()


def _logdir(root: Path) -> Path:
    """``exp``: scalars and a profile session the drop policy removes; ``old``: scalars, retired."""
    with synth.EventWriter(str(root / "exp")) as w:
        for s in range(20):
            w.scalar("loss", s, 1.0 / (s + 1))
    session = root / "exp" / "plugins" / "profile" / "2026_01_01_00_00_00"
    session.mkdir(parents=True)
    (session / "host.xplane.pb").write_bytes(b"x" * 3000)
    with synth.EventWriter(str(root / "old")) as w:
        w.scalar("loss", 0, 1.0)
    return root


@pytest.fixture
def reduced_and_retired(tmp_path, buckets):  # noqa: F811 - the fixture imported above
    def make(store):
        src = _logdir(tmp_path / f"src{next(_n)}")
        if store == "posix":
            url = str(tmp_path / f"logs{next(_n)}")
            shutil.copytree(src, url)
        else:
            url = buckets(store).upload(src, f"p{next(_n)}-{uuid.uuid4().hex[:6]}")
        drop = {"name": "drop-profiles", "rules": {c: "delete" for c in ("profile_xplane", "profile_other")}}
        rep = api.reduce_logdir(url, policy=drop, dry_run=False, quiet_period=0, verify_backends=("python",))
        assert [o.status for o in rep.outcomes if o.run == "exp"] == ["verified"], rep.to_dict()
        rep = api.retire(url, api.retire_rule(runs=["old"]), dry_run=False, quiet_period=0)
        assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
        return url
    return make


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
