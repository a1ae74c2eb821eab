"""What the catalogue says of an operation is one rule on every store (issue #26 item 2,
``engine.catalogue_rules``): which reductions are restorable (of one run, the newest kept one), a
summary's ``saved_bytes`` and ``restore_note``, and the history's ``removed_from_logdir_bytes``,
the same on a folder and on the three bucket servers as the operations go from kept to restored
and purged."""
import itertools
from contract_stores import KINDS, buckets, logdir_on  # noqa: F401 - fixtures
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
def reduced(tmp_path, logdir_on):
    def make(store):
        url = logdir_on(store, _logdir(tmp_path / f"src{next(_n)}"))
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


@pytest.mark.parametrize("store", [k for k in KINDS if k != "posix"])  # a bucket's backup keys
def test_a_manifest_naming_a_backup_outside_the_vault_is_refused_by_recheck_as_by_purge(store, reduced, buckets):  # noqa: F811
    """Which of a bucket's manifests are its own is one rule (``bucket_manifests.own_manifests``):
    one naming a backup outside the vault is listed with ``refused`` and left in place by purge,
    and by the re-check a failed check of its operation while the others are checked (the
    re-check raised, checking nothing)."""
    import json

    from tb_footprint_plugin.storage.store_object import ObjectStore

    url = reduced(store)
    prefix = url.split("://", 1)[1].split("/", 1)[1]
    b = buckets(store)
    b.fs.pipe_file(b.key(f"{prefix}-n/canary"), b"canary")
    planted = {"op_id": "20260101T000001-aaaaaa", "run": "a", "kind": "reduce", "outcome": "verified",
               "started_at": 1.0, "finished_at": 1.0, "logdir": url, "backup_purged": False,
               "files": [{"action": "delete", "path": "a/x", "size": 6, "backup": b.key(f"{prefix}-n/canary")}]}
    key = ".tb-footprint/manifests/20260101T000001-aaaaaa.json"
    st = ObjectStore(url)
    st.put(key, json.dumps(planted).encode())
    try:
        rows = api.verify(url)
    finally:
        st.close()
    by_op = {r["op_id"]: r for r in rows}
    assert by_op["20260101T000001-aaaaaa"]["ok"] is False and by_op["20260101T000001-aaaaaa"]["code"] == "refused", rows
    assert sorted(r["run"] for r in rows if r["ok"]) == ["a", "b"], rows
    (one,) = api.verify(url, op="20260101T000001-aaaaaa")
    assert one["code"] == "refused" and not one["ok"], one
    rep = api.purge(url)
    assert [r["op_id"] for r in rep.refused if r["code"] == "refused"] == ["20260101T000001-aaaaaa"], rep.to_dict()
    assert sorted(o["run"] for o in rep.ops) == ["a", "b"], rep.to_dict()
    assert b.fs.cat_file(b.key(f"{prefix}-n/canary")) == b"canary"
