"""Reading a change log larger than its limit (planted) holds one copy of its prefix, not two
(review R19 N1): the whole lines of its first ``limit`` bytes were read as one range (the pieces
and their join) and then cut by a slice, about twice ``limit`` at once; they are now read in
pieces into one buffer cut in place."""
import tracemalloc

from tb_footprint_plugin.engine import history

LIMIT = 64 << 20


def test_an_oversize_log_is_read_with_one_copy_of_its_prefix(tmp_path, monkeypatch):
    monkeypatch.setattr(history, "MAX_STATE_BYTES", LIMIT)
    state = tmp_path / ".tb-footprint"
    state.mkdir()
    with open(state / "history.jsonl", "wb") as f:  # sparse: the NUL bytes of a planted file, no line
        f.truncate(LIMIT + (6 << 20))
    log = history.disk_log(str(state))
    tracemalloc.start()
    try:
        assert log.read() == []
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    (d,) = log.damage()
    assert d.line == 0 and "larger than" in str(d)
    assert peak < 1.5 * LIMIT, f"{peak / (1 << 20):.0f} MB at once for a {LIMIT >> 20} MB prefix"
