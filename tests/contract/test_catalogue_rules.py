"""What the catalogue says of an operation is one rule on every store (issue #26 item 2,
``engine.catalogue_rules``): which reductions are restorable (of one run, the newest kept one), a
summary's ``saved_bytes`` and ``restore_note``, and the history's ``removed_from_logdir_bytes``,
the same on a folder and on the three bucket servers as the operations go from kept to restored
and purged."""
import itertools
import shutil
import uuid
from contract_stores import KINDS, buckets  # noqa: F401 - the bucket fixture
from pathlib import Path

import pytest

from tb_footprint_plugin import api, synth

_n = itertools.count()

DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in ("profile_xplane", "profile_other")}}


def _logdir(root: Path) -> Path:
    """``a`` and ``b``: scalars and a profile session the drop policy removes."""
    for run, size in (("a", 3000), ("b", 5000)):
        with synth.EventWriter(str(root / run)) as w:
            for s in range(10):
                w.scalar("loss", s, 1.0 / (s + 1))
        session = root / run / "plugins" / "profile" / "2026_01_01_00_00_00"
        session.mkdir(parents=True)
        (session / "host.xplane.pb").write_bytes(b"x" * size)
    return root


@pytest.fixture
def reduced(tmp_path, buckets):  # noqa: F811 - the fixture imported above
    def make(store):
        src = _logdir(tmp_path / f"src{next(_n)}")
        if store == "posix":
            url = str(tmp_path / f"logs{next(_n)}")
            shutil.copytree(src, url)
        else:
            url = buckets(store).upload(src, f"cr{next(_n)}-{uuid.uuid4().hex[:6]}")
        rep = api.reduce_logdir(url, policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",))
        assert sorted(o.run for o in rep.outcomes if o.status == "verified") == ["a", "b"], rep.to_dict()
        return url
    return make


def _summary(url: str) -> dict:
    """Per run: (restorable, restore_note, saved_bytes) of its reduction, as the operations list says."""
    from tb_footprint_plugin.engine.catalogue_rules import summarize_operations

    return {o["run"]: (o["restorable"], o["restore_note"], o["saved_bytes"])
            for o in summarize_operations([m for m in api.operations(url) if m.get("kind") == "reduce"])}


@pytest.mark.parametrize("store", KINDS)
def test_kept_restored_and_purged_say_the_same_on_every_store(store, reduced):
    url = reduced(store)
    assert _summary(url) == {"a": (True, None, 3000), "b": (True, None, 5000)}
    assert sorted((o["run"], o["restorable"], o["saved_bytes"]) for o in api.restorable(url)) == [
        ("a", True, 3000), ("b", True, 5000)]
    removed = {e["run"]: e["removed_from_logdir_bytes"] for e in api.history(url) if e.get("kind") == "reduce"}
    assert removed == {"a": 3000, "b": 5000}, api.history(url)

    (r,) = api.restore(url, run="a")
    assert r.status == "restored", r.to_dict()
    assert _summary(url) == {"a": (False, "restored", 3000), "b": (True, None, 5000)}
    assert [o["run"] for o in api.restorable(url)] == ["b"]

    rep = api.purge(url, yes=True, run="b")
    assert [o["run"] for o in rep.ops] == ["b"], rep.to_dict()
    assert _summary(url) == {"a": (False, "restored", 3000), "b": (False, "backup purged", 5000)}
    assert api.restorable(url) == []
    kinds = sorted(e["kind"] for e in api.history(url))
    assert kinds.count("reduce") == 2 and "restore" in kinds, kinds
