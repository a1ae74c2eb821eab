"""The newest N entries of the change log, read in constant memory (r22 task H, issue #28: at
100,000 runs the log holds every reduce's line, and ``api.history`` held them all as dicts, ~10x
the log's bytes, for the tab's Activity page to show 500). ``ChangeLog.newest`` reads each log a
block at a time and keeps a bounded heap: the last N of ``read``'s entries, in its order (ties in
time in the logs' and lines' order), by its rules (damaged lines, sealed logs, a seal cut short,
an oversize log), and the total. ``api.history_page`` / ``api.history(newest=)``, the ``/history``
route (same JSON) and ``history --last N`` ask it.
"""
from __future__ import annotations

import json
import os
import tracemalloc

import pytest

from tb_footprint_plugin import api, cli
from tb_footprint_plugin.engine import history

MB = 1 << 20


def _line(i: int, t: float, **extra) -> bytes:
    e = {"op_id": f"op-{i:08d}", "kind": "reduce", "run": f"runs/exp{i % 97}/seed{i % 7}",
         "policy": "keep-last-100", "before": 123456789 + i, "after": 2345678, "verified": False,
         "outcome": "rolled_back", "reason": None, "code": None, "backup_kept": False,
         "user": "someone", "host": "gpu-node-17", "tool_version": "0.9.0", "time": t}
    e.update(extra)
    return (json.dumps(e, separators=(",", ":")) + "\n").encode()


def _state_with_every_kind_of_log(state):
    """A single log with a sealed log it repeats (a seal cut short), damaged and untimed lines and
    a torn last line; two workers' logs, one with a sealed log; many entries of one time across
    the logs (ties keep the logs' and the lines' order)."""
    state.mkdir()
    g = [_line(i, 100.0 + (i % 5)) for i in range(40)]
    head = g[0] + b"\xff\xfe broken\n" + g[1] + b'{"kind":"no time"}\n' + g[2] + b"[1, 2]\n"
    (state / "history.sealed-0000000000001-0123456789ab.jsonl").write_bytes(head)
    (state / "history.jsonl").write_bytes(head + b"".join(g[3:15]) + b"{oops\n\n" + g[15]
                                          + b'{"time": "x"}\n' + b'{"torn": ')
    (state / "history-shard-1-of-2@host.jsonl").write_bytes(b'{"time": 101}\n' * 3 + b"nope\n"
                                                            + b"".join(g[16:28]))
    (state / "history-shard-2-of-2@host.sealed-0000000000002-ba9876543210.jsonl").write_bytes(
        b"".join(g[28:34]) + b'{"a": 1}\n' + b'{"cut')
    (state / "history-shard-2-of-2@host.jsonl").write_bytes(b'{"time": 102}\n' + b"x" * 300 + b"\n"
                                                            + b"".join(g[34:40]))


@pytest.mark.parametrize("limit", [None, 400])
def test_the_newest_are_the_last_of_the_whole_read(tmp_path, monkeypatch, limit):
    monkeypatch.setattr(history, "_BLOCK", 64)  # many blocks, lines cut at their edges
    state = tmp_path / ".tb-footprint"
    _state_with_every_kind_of_log(state)
    log = history.disk_log(str(state))
    if limit is not None:
        monkeypatch.setattr(log, "limit", limit)  # the larger logs read as oversize ones
    whole = log.read()
    assert len(whole) > 40 if limit is None else len(whole) > 5  # a guard of the test itself
    for n in list(range(0, len(whole) + 3)) + [10 ** 6]:
        got, total = log.newest(n)
        assert total == len(whole)
        assert got == (whole[max(0, len(whole) - n):] if n else []), n
    if limit is None:  # the state folder's reader (a log of its own, at the default limit)
        assert history.read_history_page(str(state)) == (whole, len(whole))
        assert history.read_history_page(str(state), 7) == (whole[-7:], len(whole))


def test_the_newest_500_of_100k_lines_hold_a_block_not_the_log(tmp_path):
    state = tmp_path / ".tb-footprint"
    state.mkdir()
    n = 100_000
    with open(state / "history.jsonl", "wb") as f:
        f.write(b"".join(_line(i, 1.7e9 + i) for i in range(n)))
    size = os.path.getsize(state / "history.jsonl")
    tracemalloc.start()
    try:
        entries, total = history.read_history_page(str(state), 500)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total == n
    assert [e["op_id"] for e in entries] == [f"op-{i:08d}" for i in range(n - 500, n)]
    # the whole read holds every line as a dict, ~10x the log's bytes (~280 MB here): the newest
    # 500 hold a block (256 KB), its records (~2.5 MB) and 500 entries, whatever the log's size
    assert peak < 6 * MB, f"{peak / MB:.1f} MB at once for the newest 500 of a {size / MB:.0f} MB log"


def _planted_logdir(tmp_path, count: int):
    """A logdir with one small run and a change log of ``count`` (rolled-back reduce) lines."""
    from tb_footprint_plugin import synth

    ld = tmp_path / "logs"
    with synth.EventWriter(str(ld / "a")) as w:
        for s in range(5):
            w.scalar("loss", s, 1.0 / (s + 1))
    state = ld / ".tb-footprint"
    state.mkdir()
    (state / "history.jsonl").write_bytes(b"".join(_line(i, 1.6e9 + i // 3) for i in range(count)))
    return ld


def test_the_api_gives_the_newest_and_the_total(tmp_path):
    ld = _planted_logdir(tmp_path, 30)
    whole = api.history(str(ld))
    assert len(whole) == 30
    assert api.history(str(ld), newest=4) == whole[-4:]
    assert api.history_page(str(ld), newest=4) == {"entries": whole[-4:], "total": 30, "total_exact": True}
    assert api.history_page(str(ld)) == {"entries": whole, "total": 30, "total_exact": True}
    assert api.history_page(str(ld), newest=0) == {"entries": [], "total": 30, "total_exact": True}
    assert all(e["backup"] == "none" and e["code"] is None for e in whole)


def test_the_activity_route_reads_only_the_newest(tmp_path, monkeypatch):
    from test_plugin_routes import App

    ld = _planted_logdir(tmp_path, 620)
    want = list(reversed(api.history(str(ld))))
    a = App(str(ld))
    try:
        # the route never reads the whole log (it held every entry to show 500)
        monkeypatch.setattr(history.ChangeLog, "read", lambda self: pytest.fail("the whole log was read"))
        got = a.get("/history").get_json()
    finally:
        a.close()
    assert got == json.loads(json.dumps({"entries": want[:500], "total": 620, "total_exact": True}))


def test_history_last_n(tmp_path, capsys):
    ld = _planted_logdir(tmp_path, 12)
    whole = api.history(str(ld))
    assert cli.main(["history", str(ld), "--last", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(whole[-3:]))
    assert cli.main(["history", str(ld), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 12
    assert cli.main(["history", str(ld), "--last", "0"]) == 2  # a usage error: at least 1


def test_a_buckets_history_is_cut_to_the_newest(s3_bucket, tmp_path):
    """A bucket's newest N: its manifests each read into a bounded heap of the newest, with the
    change log's newest lines: the same entries as the whole history's last N, and the total."""
    url = s3_bucket.upload(_planted_logdir(tmp_path, 12), "v")
    whole = api.history(url)
    assert len(whole) == 12
    assert api.history_page(url, newest=3) == {"entries": whole[-3:], "total": 12, "total_exact": True}
    assert api.history(url, newest=30) == whole
    assert api.history_page(url, newest=0) == {"entries": [], "total": 12, "total_exact": True}


# --- following a log (``changes_since``) a piece at a time -------------------------------------
def _kept(e: dict) -> dict:
    return {k: e.get(k) for k in history._KEPT}


def test_following_a_growing_log_finds_what_the_reader_finds(tmp_path, monkeypatch):
    """Appends cut anywhere (a torn line finished by the next), damaged lines, a line longer than a
    block (not held while unended, read once ended), a log replaced by a shorter one: after each,
    ``changes_since`` gives the reader's entries of the run."""
    monkeypatch.setattr(history, "CHUNK", 50)  # many pieces, lines cut at their edges
    monkeypatch.setattr(history, "_FOLLOW_BLOCK", 120)
    monkeypatch.setattr(history, "_FOLLOWED", {})
    state = tmp_path / ".tb-footprint"
    state.mkdir()
    log_file = state / "history.jsonl"
    long = (json.dumps({"op_id": "long", "kind": "reduce", "run": "r", "outcome": "verified", "time": 50.0,
                        "reason": "x" * 700}) + "\n").encode()
    data = (b"".join(_line(i, 10.0 + i, run="r" if i % 3 else "s", outcome="verified") for i in range(12))
            + b"{broken\n" + long + b"".join(_line(i, 60.0 + i, run="r", outcome="verified") for i in range(12, 20)))
    cuts = list(range(0, len(data), 97)) + [len(data)]

    def check():
        log = history.disk_log(str(state))
        want = [_kept(e) for e in log.read() if e.get("run") == "r" and e["time"] > 11.0
                and e.get("outcome") == "verified"]
        got = [_kept(e) for e in history.changes_since(str(state), "r", 11.0, {"verified"})]
        assert got == want

    log_file.write_bytes(b"")
    for a, b in zip(cuts, cuts[1:]):
        with open(log_file, "ab") as f:
            f.write(data[a:b])
        check()
    assert any(e["op_id"] == "long" for e in history.changes_since(str(state), "r", 0, {"verified"}))
    log_file.write_bytes(data[:300])  # replaced (shorter): read again from its start
    check()


def test_following_an_oversize_log_holds_a_piece_not_what_it_reads(tmp_path, monkeypatch):
    """``changes_since`` of a planted log (a line, then 64 MB with no newline) held the 64 MB it read
    in one buffer (review R20 G3): it now holds a piece and what it keeps."""
    limit = 64 * MB
    monkeypatch.setattr(history, "MAX_STATE_BYTES", limit)
    monkeypatch.setattr(history, "_FOLLOWED", {})
    state = tmp_path / ".tb-footprint"
    state.mkdir()
    with open(state / "history.jsonl", "wb") as f:  # sparse: a planted file's NUL bytes
        f.write(b'{"kind":"reduce","outcome":"verified","run":"r","time":5.0}\n')
        f.truncate(limit + 6 * MB)
    tracemalloc.start()
    try:
        got = history.changes_since(str(state), "r", 0.0, {"verified"})
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [e["time"] for e in got] == [5.0]
    assert peak < 8 * MB, f"{peak / MB:.0f} MB at once to follow a {limit // MB} MB prefix"


def test_a_planted_line_with_odd_fields_costs_only_its_cells(tmp_path, capsys):
    """Lines are untrusted: an op_id that is a list (no key of a manifest) and byte counts that are
    no numbers stopped ``api.history`` (TypeError: unhashable) and the CLI's table (its error
    instead of the log); now they read as no manifest and no count, and the other lines show."""
    ld = _planted_logdir(tmp_path, 2)
    with open(ld / ".tb-footprint" / "history.jsonl", "ab") as f:
        f.write(b'{"time": 1.7e9, "kind": "reduce", "op_id": [1], "backup_kept": true, "outcome": "verified",'
                b' "before": "x", "after": 1e999}\n')
    for page in (api.history_page(str(ld)), api.history_page(str(ld), newest=1)):
        odd = page["entries"][-1]
        assert (odd["op_id"], odd["removed_from_logdir_bytes"], odd["backup"]) == ([1], 0, "unknown"), odd
        assert page["total"] == 3
    assert cli.main(["history", str(ld)]) == 0
    out = capsys.readouterr().out
    assert "op-00000001" in out and "[1]" in out, out
