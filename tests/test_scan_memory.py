"""The scan's memory at many runs (issue 28): the cache is never held whole, and what a scan keeps
per run is a compact record, so 100,000 runs fit in a few hundred MB."""
import os
import tracemalloc

from tb_footprint_plugin.scan.cache import ScanCache
from tb_footprint_plugin.scan.scanner import scan
from tb_footprint_plugin.storage.paths import cache_dir

from helpers_runs import copy_runs, small_run_template


def _peak(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_scan_memory_per_run_is_a_compact_record(tmp_path, monkeypatch):
    """The growth of a scan's peak memory per added run, cold (every event file read, every
    entry written to the cache) and warm (every entry served by it). Before the cache streamed,
    the runs' walks were let go and a run's stats were folded in place, a scan grew by ~7 KB
    (cold) and ~8.4 KB (warm) a run here (900 MB at 100,000 runs); now under 3.5 KB."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    template = small_run_template(str(tmp_path))
    small = copy_runs(tmp_path / "small", template, 100)
    big = copy_runs(tmp_path / "big", template, 1000)
    for phase in ("cold", "warm"):
        peaks = {}
        for n, logdir in ((100, small), (1000, big)):
            fp = None

            def run():
                nonlocal fp
                fp = scan(logdir)

            peaks[n] = _peak(run)
            assert len(fp.runs) == n
            assert (fp.files_read, fp.files_cached) == ((n, 0) if phase == "cold" else (0, n))
        per_run = (peaks[1000] - peaks[100]) / 900
        assert per_run < 4500, f"{phase} scan: {per_run:.0f} bytes a run"


def test_the_cache_is_read_a_line_at_a_time(tmp_path, monkeypatch):
    """Loading the cache of N event files keeps their keys and places, not their stats: a few
    hundred bytes per entry (the stats a hit parses are its own line's)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    logdir = copy_runs(tmp_path / "logdir", small_run_template(str(tmp_path)), 400)
    scan(logdir)
    path = cache_dir(logdir)
    assert os.path.getsize(os.path.join(path, "scan-cache.json")) > 400 * 500
    caches = []
    peak = _peak(lambda: caches.append(ScanCache(path)))
    assert peak / 400 < 600, f"{peak / 400:.0f} bytes an entry"
    # and every entry is still served
    again = scan(logdir)
    assert (again.files_read, again.files_cached) == (0, 400)


def test_a_killed_scans_temp_cache_is_swept_by_the_next_save(tmp_path, monkeypatch):
    """A scan streams its new cache to a temp file; one killed before its save leaves it behind,
    and the next save removes it once it is an hour old (a live scan's is never that old)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    template = small_run_template(str(tmp_path))
    logdir = copy_runs(tmp_path / "logdir", template, 3)
    scan(logdir)
    folder = cache_dir(logdir)
    stale, fresh = os.path.join(folder, ".scan-cache.killed"), os.path.join(folder, ".scan-cache.running")
    for p in (stale, fresh):
        with open(p, "wb") as f:
            f.write(b'{"version": 3, "files": {\n')
    os.utime(stale, (1, 1))
    copy_runs(tmp_path / "new", template, 4)
    os.rename(tmp_path / "new" / "exp00" / "run00003", tmp_path / "logdir" / "exp00" / "run00003")  # the next scan saves
    assert scan(logdir).files_read == 1
    assert not os.path.exists(stale) and os.path.exists(fresh)
