"""A number that is not finite (``NaN``, ``Infinity``, ``-Infinity``) planted in a change-log line
or in a manifest never reaches ``/history`` or ``api.history_page``: Python's JSON reads and
writes those tokens, a browser's ``JSON.parse`` refuses them, so the tab's Activity page failed
on the whole answer. The history read makes each such number null (``history.finite``: each
log's lines as they are parsed, and the entries the API returns with figures joined from
manifests); every other value is as it was. (The ``/history`` route answered such a number as
the string ``"Infinity"``, TensorBoard's responder's rule, where a number or none belongs.)"""
from __future__ import annotations

import json
import time

import pytest

from tb_footprint_plugin import api, cli
from tb_footprint_plugin.engine import history
from tb_footprint_plugin.storage.stores import open_store

PLANTED = ('{"time": %r, "kind": "reduce", "op_id": "20261205T000000-abcdef", "run": "a", "outcome": "verified", '
           '"before": Infinity, "after": NaN, "backup_kept": true, "freed": -Infinity, "policy": "p", '
           '"x": [1, 2.5, Infinity, {"y": NaN}], "big": 1E+400, "hex": "ee5e123"}\n')


def strict(text: str):
    """JSON as a browser parses it: no NaN or Infinity token."""
    def refuse(token):
        raise ValueError(f"{token} is not JSON")
    return json.loads(text, parse_constant=refuse)


def _logdir(tmp_path):
    from tb_footprint_plugin import synth

    ld = tmp_path / "logs"
    for run in ("a", "b"):
        with synth.EventWriter(str(ld / run)) as w:
            w.scalar("loss", 0, 1.0)
    assert api.retire(str(ld), api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).ok
    with open(ld / ".tb-footprint" / "history.jsonl", "a") as f:
        f.write(PLANTED % time.time())
    return ld


def test_a_planted_line_reads_with_nulls(tmp_path):
    ld = _logdir(tmp_path)
    page = api.history_page(str(ld), newest=500)
    assert strict(json.dumps(page)) == page
    (e,) = [e for e in page["entries"] if e["op_id"] == "20261205T000000-abcdef"]
    assert (e["before"], e["after"], e["freed"], e["x"], e["policy"]) == (None, None, None, [1, 2.5, None, {"y": None}], "p")
    assert (e["big"], e["hex"]) == (None, "ee5e123"), e  # too large for a float: none; a string stays
    # every read of the log, the whole one and the follower's too
    (line,) = [r for r in history.disk_log(str(ld / ".tb-footprint")).read() if r.get("op_id") == e["op_id"]]
    assert line["before"] is None and line["x"][2] is None
    assert [x for x in api.history(str(ld)) if x["kind"] == "retire"][0]["before"] > 0  # finite numbers stay


def test_a_block_is_walked_only_where_such_a_number_may_be():
    # a block of ordinary lines is not walked record by record (100,000 runs' lines: issue #28)
    assert not history._may_not_be_finite(b'{"op_id":"20261205T181427-5e1234","h":"ee5e123","t":1.5e10,"s":1e-400}\n')
    for planted in (b'{"a":1e999}', b'{"a": -Infinity}', b'{"a":[1,NaN]}', b'{"a": [2, 1E+400]}',
                    b'{"a":' + b"9" * 100 + b'.0}'):
        assert history._may_not_be_finite(planted), planted
    assert not history._may_not_be_finite(b'{"a":' + b"9" * 99 + b'e99}')  # finite: 1e198


def test_the_route_and_the_cli_answer_json_a_browser_parses(tmp_path, capsys):
    from test_plugin_routes import App

    ld = _logdir(tmp_path)
    a = App(str(ld))
    try:
        body = a.get("/history").get_data(as_text=True)
    finally:
        a.close()
    # TensorBoard's responder writes such a number as the string "Infinity": a number, or none
    (e,) = [e for e in strict(body)["entries"] if e["op_id"] == "20261205T000000-abcdef"]
    assert (e["before"], e["after"], e["freed"]) == (None, None, None), e
    assert cli.main(["history", str(ld), "--json"]) == 0
    (e,) = [e for e in strict(capsys.readouterr().out) if e["op_id"] == "20261205T000000-abcdef"]
    assert e["before"] is None


@pytest.mark.parametrize("store", ["s3"])
def test_a_planted_manifest_number_reads_as_null(store, tmp_path, objstore_pool):
    from objstore_servers import Bucket
    from tb_footprint_plugin import synth

    src = tmp_path / "src"
    for run in ("a", "b"):
        with synth.EventWriter(str(src / run)) as w:
            w.scalar("loss", 0, 1.0)
    url = Bucket(objstore_pool.get(store)).upload(src, "hist-nonfinite")
    assert api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).ok
    st = open_store(url)
    [key] = [e.key for e in st.list(".tb-footprint/manifests", every_key=True) if e.key.endswith(".json")]
    doc = json.loads(st.read_all(key))
    doc["user"] = float("inf")
    st.put(key, json.dumps(doc).encode())  # Python writes the token Infinity
    page = api.history_page(url, newest=500)
    assert strict(json.dumps(page)) == page
    (e,) = [e for e in page["entries"] if e["kind"] == "retire"]
    assert e["user"] is None and e["before"] > 0, e
