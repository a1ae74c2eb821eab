"""A number that is not finite planted in a manifest never reaches ``/operations`` or
``api.summarize_operations`` (issue #28, r26 K3): the manifest schema lets a time be infinite
(``manifest._number`` refuses NaN only) and leaves other fields (``salvaged``, ``verification``)
unchecked, and Python's JSON reads and writes ``Infinity``/``NaN``, which a browser's
``JSON.parse`` refuses (TensorBoard's responder wrote the string ``"Infinity"``). Every number the
summaries give is finite or null (``history.finite``), on a disk and on every bucket store; the
restore rule still decides on the manifests as they are."""
from __future__ import annotations

import json
import math
import os

from tb_footprint_plugin import api, synth

INF = float("inf")


def strict(text: str):
    """JSON as a browser parses it: no NaN or Infinity token."""
    def refuse(token):
        raise ValueError(f"{token} is not JSON")
    return json.loads(text, parse_constant=refuse)


def numbers(value):
    """Every number in ``value`` (a JSON-like value)."""
    if isinstance(value, dict):
        return [n for v in value.values() for n in numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in numbers(v)]
    return [value] if isinstance(value, float) else []


def _plant(doc: dict) -> dict:
    """``doc`` with the numbers a planted manifest may hold that the schema lets through."""
    doc = json.loads(json.dumps(doc))
    doc["started_at"], doc["finished_at"] = -INF, INF
    doc["salvaged"] = [{"path": "x", "file": "y", "records": float("nan"), "bytes": INF, "at": 1e999}]
    ver = doc.get("verification") if isinstance(doc.get("verification"), dict) else {}
    doc["verification"] = dict(ver, failed=[INF, 1.5])
    return doc


def _runs(root) -> str:
    for run in ("a", "b"):
        with synth.EventWriter(str(root / run), timestamp=1_700_000_000) as w:
            w.scalar("loss", 0, 1.0)
        synth.write_profile_session(str(root / run), synth.session_name_for(1_700_000_600), "host",
                                    n_events=5, seed=1)
    return str(root)


def _check(summaries: list, planted: str) -> None:
    assert strict(json.dumps(summaries)) == summaries
    (o,) = [o for o in summaries if o["op_id"] == planted]
    assert (o["started_at"], o["finished_at"]) == (None, None), o
    assert o["salvaged"] == [{"path": "x", "file": "y", "records": None, "bytes": None, "at": None}], o
    assert o["failed"] == [None, 1.5] and o["bytes_before"] > 0, o  # a finite number stays
    assert all(math.isfinite(n) for n in numbers(summaries))


def test_a_planted_manifest_number_is_null_on_the_operations_route(tmp_path):
    from test_plugin_routes import App

    ld = _runs(tmp_path / "logs")
    assert api.reduce_logdir(ld, policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",)).ok
    m = [m for m in api.operations(ld) if m["run"] == "a"][0]
    planted = m["op_id"][:-6] + "ffffff"
    os.makedirs(os.path.join(ld, ".tb-footprint", "ops"), exist_ok=True)
    with open(os.path.join(ld, ".tb-footprint", "ops", f"{planted}.json"), "w") as f:
        json.dump(dict(_plant(m), op_id=planted), f)  # an older version's manifest file, read as one
    assert planted in [m["op_id"] for m in api.operations(ld)]
    _check(api.summarize_operations(api.operations(ld)), planted)
    a = App(ld)
    try:
        body = a.get("/operations").get_data(as_text=True)
    finally:
        a.close()
    _check(strict(body)["operations"], planted)


def test_a_planted_manifest_number_is_null_on_every_bucket(bucket, tmp_path):
    from tb_footprint_plugin.storage.stores import open_store

    url = bucket.upload(_runs(tmp_path / "src"), "ops-nonfinite")
    rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",))
    assert rep.ok and sum(o.status == "verified" for o in rep.outcomes) == 2, [o.to_dict() for o in rep.outcomes]
    st = open_store(url)
    key = sorted(e.key for e in st.list(".tb-footprint/manifests", every_key=True) if e.key.endswith(".json"))[0]
    doc = json.loads(st.read_all(key))
    st.put(key, json.dumps(_plant(doc)).encode())  # Python writes the tokens Infinity and NaN
    _check(api.summarize_operations(api.operations(url)), doc.get("op_id") or doc["op"])
