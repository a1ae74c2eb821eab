"""State files are read with a cap (a file over it is not one this tool wrote): ``read_capped``
reads what is there, never asking for the cap's bytes at once — ``f.read(256 MB + 1)`` of a 2 KB
journal set 256 MB aside first (~45 µs a read, on every journal, manifest, note and ledger read)."""
import io
import tracemalloc

from tb_footprint_plugin.engine import trust
from tb_footprint_plugin.storage.regular import open_regular, read_capped


def test_a_small_file_is_read_whole_without_setting_the_cap_aside(tmp_path):
    p = tmp_path / "state.json"
    p.write_bytes(b'{"a": 1}\n' * 200)
    tracemalloc.start()
    try:
        with open_regular(str(p)) as f:
            raw = read_capped(f, 256 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert raw == p.read_bytes()
    assert peak < 1 << 20, peak  # was the cap, 256 MB


def test_a_file_over_the_cap_reads_cap_plus_one_bytes(tmp_path):
    p = tmp_path / "big.log"
    p.write_bytes(b"x" * 5000)
    with open_regular(str(p)) as f:
        assert len(read_capped(f, 4096)) == 4097
    with open_regular(str(p)) as f:
        assert read_capped(f, 5000) == p.read_bytes()


def test_a_file_that_grew_since_its_size_was_taken_and_a_stream_read_to_the_cap(tmp_path):
    class Growing(io.BytesIO):
        def fileno(self):  # a size that says less than there is: the file grew since
            raise OSError("no descriptor")

    assert len(read_capped(Growing(b"y" * (3 << 20)), 2 << 20)) == (2 << 20) + 1
    assert read_capped(Growing(b"z" * 100), 2 << 20) == b"z" * 100


def test_the_state_readers_read_small_files_without_the_cap(tmp_path):
    p = tmp_path / "journal.jsonl"
    p.write_bytes(b'{"type": "begin"}\n{"type": "backup", "sha256": "' + b"a" * 64 + b'"}\n')
    tracemalloc.start()
    try:
        log = trust.read_json_lines(str(p))
        doc = trust.read_json_file(str(tmp_path / "n.json")) if (tmp_path / "n.json").write_text('{"b": 2}') else None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [r["type"] for r in log.records] == ["begin", "backup"] and doc == {"b": 2}
    assert peak < 1 << 20, peak
