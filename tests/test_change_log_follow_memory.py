"""Following a change log larger than its limit (planted) holds one copy of what it reads, not
two (review R20 G3, R19 N1's twin): ``changes_since``, which every disk reduce's preflight asks
of each run, read the first ``MAX_STATE_BYTES`` as one range (the pieces and their join) and then
sliced it twice; it now reads them in pieces into one buffer and takes its lines one at a time."""
import tracemalloc

from tb_footprint_plugin.engine import history

LIMIT = 64 << 20


def test_following_an_oversize_log_holds_one_copy_of_what_it_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(history, "MAX_STATE_BYTES", LIMIT)
    monkeypatch.setattr(history, "_FOLLOWED", {})
    state = tmp_path / ".tb-footprint"
    state.mkdir()
    line = b'{"kind":"reduce","outcome":"verified","run":"r","time":5.0}\n'
    with open(state / "history.jsonl", "wb") as f:  # a line, then sparse: the NUL bytes of a planted file
        f.write(line)
        f.truncate(LIMIT + (6 << 20))
    tracemalloc.start()
    try:
        got = history.changes_since(str(state), "r", 0.0, {"verified"})
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [e["time"] for e in got] == [5.0]
    assert peak < 1.5 * LIMIT, f"{peak / (1 << 20):.0f} MB at once to follow a {LIMIT >> 20} MB prefix"
