"""A plan reads a colliding original once, not on every plan (``scan.digests``).

To count each content once, a plan hashes the originals whose size collides with another's
(``engine.plan_notes.content_dups``). A sweep of copied runs has many; the tab plans the logdir
again and again, and each plan read them all whole. Now the digest of a file read whole is kept
in the cache folder, keyed by the file as it was opened (run, path, size, mtime, ctime, inode,
device): a second plan reads none of them, a file written since is read again. Files under
``digests.MIN_FILE_BYTES`` are read again rather than kept (as cheap as a look-up).
"""
import os
import tracemalloc

from test_dry_run_dedup import OLD, make_logdir, reduce
from tb_footprint_plugin.engine import plan_notes
from tb_footprint_plugin.scan import digests
from tb_footprint_plugin.storage.paths import cache_dir


def count_reads(monkeypatch, logdir):
    """Patch the plan's opener: the logdir-relative paths whose bytes a plan reads."""
    real_open = plan_notes.open_regular
    read = []

    class Counting:
        def __init__(self, f, path):
            self.f, self.path = f, path

        def __enter__(self):
            self.f.__enter__()
            return self

        def __exit__(self, *exc):
            return self.f.__exit__(*exc)

        def fileno(self):
            return self.f.fileno()

        def read(self, n=-1):
            read.append(os.path.relpath(self.path, logdir))
            return self.f.read(n)

    monkeypatch.setattr(plan_notes, "open_regular", lambda path, *a, **k: Counting(real_open(path, *a, **k), path))
    return read


def big(logdir, paths):
    """The paths of ``paths`` (logdir-relative) of files the digests keep."""
    return {p for p in paths if os.path.getsize(os.path.join(logdir, p)) >= digests.MIN_FILE_BYTES}


def test_a_second_plan_reads_no_colliding_original_and_says_the_same(tmp_path, monkeypatch):
    logdir = make_logdir(tmp_path)  # run a, and b a byte-for-byte copy of it
    read = count_reads(monkeypatch, logdir)
    first = reduce(logdir, True)
    d1 = first.plan.content_dups
    assert d1["hashed_files"] > 0 and d1["cached_files"] == 0 and d1["files"] > 0, d1
    assert {p.split(os.sep)[0] for p in read} == {"a", "b"}, read
    kept = big(logdir, read)
    assert {p.split(os.sep)[0] for p in kept} == {"a", "b"}, read  # each run's 6 MB profile
    read.clear()
    second = reduce(logdir, True)  # another plan, as the tab's next one or another process
    d2 = second.plan.content_dups
    assert big(logdir, read) == set(), read  # no kept file read again (a small one would be)
    assert d2 == {**d1, "cached_files": len(kept)}, (d1, d2)
    assert second.freed_now_bytes == first.freed_now_bytes
    assert second.freed_on_disk_after_purge_bytes == first.freed_on_disk_after_purge_bytes


def test_a_file_written_since_is_read_again_even_with_its_mtime_put_back(tmp_path, monkeypatch):
    logdir = make_logdir(tmp_path)
    first = reduce(logdir, True).plan.content_dups
    profile = next((logdir / "b").rglob("*.xplane.pb"))
    data = bytearray(profile.read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes: no longer a's copy
    profile.write_bytes(bytes(data))
    os.utime(profile, (OLD, OLD))  # the mtime a cache keyed on size and mtime alone would trust
    read = count_reads(monkeypatch, logdir)
    again = reduce(logdir, True).plan.content_dups
    rel = os.path.relpath(profile, logdir)
    assert big(logdir, read) == {rel}, read  # of the kept files, only the written one is read again
    assert again["files"] == first["files"] - 1 and again["cached_files"] == 1, (first, again)


def test_a_damaged_table_is_only_a_slower_plan(tmp_path, monkeypatch):
    logdir = make_logdir(tmp_path)
    first = reduce(logdir, True).plan.content_dups
    path = os.path.join(cache_dir(str(logdir)), digests.DIGESTS_NAME)
    with open(path, "ab") as f:
        f.write(b"\0" * 7)  # no longer whole records
    read = count_reads(monkeypatch, logdir)
    again = reduce(logdir, True).plan.content_dups
    assert len(big(logdir, read)) == 2 and again == first, (first, again)  # read again, the same figures
    assert os.path.getsize(path) % 48 == len(b"TBFPDG01")  # and written whole again


def test_records_are_48_bytes_and_the_newest_plan_keeps_its_own(tmp_path, monkeypatch):
    """Memory: 48 bytes a file read; the table keeps at most ``MAX_RECORDS``, this plan's first."""
    folder = str(tmp_path / "cache")
    cache = digests.DigestCache(folder)
    keys = [bytes([i % 256, i // 256]) * 8 for i in range(6000)]
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for k in keys[:2000]:
        cache.put(k, "ab" * 32)
    mid = tracemalloc.get_traced_memory()[0]
    for k in keys[2000:6000]:
        cache.put(k, "ab" * 32)
    grown = (tracemalloc.get_traced_memory()[0] - mid) / 4000
    tracemalloc.stop()
    assert grown <= 52, grown  # a bytearray's spare room aside
    assert cache.save() is None
    back = digests.DigestCache(folder)
    assert all(back.get(k) == "ab" * 32 for k in keys) and back.get(b"\xff" * 16) is None
    # a cap of 5000: the next plan's 2000 records first, then the stored ones up to the cap
    monkeypatch.setattr(digests, "MAX_RECORDS", 5000)
    nxt = digests.DigestCache(folder)
    fresh = [b"\xfe" + bytes([i % 256, i // 256]) * 7 + b"\x01" for i in range(2000)]
    for k in fresh:
        nxt.put(k, "cd" * 32)
    assert nxt.save() is None
    kept = digests.DigestCache(folder)
    assert all(kept.get(k) == "cd" * 32 for k in fresh)
    assert sum(kept.get(k) is not None for k in keys) == 3000
