"""What a scan and a plan keep per run (issue 28 item 1: memory <= 300 MB at 100,000 runs).

The figures are the bytes a scan's result and a plan hold per added run, measured with
tracemalloc between two logdir sizes (the fixed part cancels out), on runs of what a small
training job leaves: an event file of scalars and a histogram, one xprof session."""
import json
import os
import subprocess
import sys
import tracemalloc

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.scan.model import NO_ITEMS, FileEntry, LogdirFootprint, footprint_from_dict

from helpers_runs import WRITTEN_AT, copy_runs, small_run_template


def _held(fn):
    """(result, bytes still allocated once ``fn`` returned, peak bytes while it ran)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        out = fn()
        now, peak = tracemalloc.get_traced_memory()
        return out, now - before, peak - before
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def logdirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("records")
    saved = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(root / "cache")  # module scope: restored below
    template = small_run_template(str(root))
    # long quiet: every run is planned
    out = {n: copy_runs(root / f"n{n}", template, n, mtime=WRITTEN_AT) for n in (100, 500)}
    for logdir in out.values():
        api.scan(logdir)  # the scan cache warm: what is measured is what a result keeps
    yield out
    if saved is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = saved


def _per_run(logdirs, fn):
    # modules imported and caches made (the scan's and the plan's selection cache, of each size):
    # not a run's cost. Warming one size only left the other's first plan to make or re-read its
    # selection cache inside the measure, as the tests before it in the process had or had not:
    # a plan then peaked ~600 bytes a run higher by the order of the tests alone (CI, r18)
    for d in logdirs.values():
        fn(d)
    held, peak = {}, {}
    for n, logdir in logdirs.items():
        res, held[n], peak[n] = _held(lambda: fn(logdir))
        assert len(res.runs) == n
        del res
    return (held[500] - held[100]) / 400, (peak[500] - peak[100]) / 400


def _per_run_fresh(logdirs, what: str):
    """``_per_run`` of ``api.plan`` (``what`` "plan") or a scan without writing its cache, in a
    fresh interpreter: the peaks of one process's plan and scan, whatever tests ran before in
    this one (after test_dry_run_dedup's in the same process, a plan peaked ~600 bytes a run
    higher, at 52bac0f too: an order the CI's workers sometimes had)."""
    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
        "from test_scale_memory_records import _per_run\n"
        "from tb_footprint_plugin import api\n"
        "dirs = {int(k): v for k, v in json.loads(sys.argv[1]).items()}\n"
        "fn = (lambda d: api.plan(d, 'archive')) if sys.argv[2] == 'plan' else "
        "(lambda d: api.scan(d, write_cache=False))\n"
        "print(json.dumps(_per_run(dirs, fn)))\n")
    p = subprocess.run([sys.executable, "-c", code, json.dumps({str(k): str(v) for k, v in logdirs.items()}), what],
                       env=dict(os.environ), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return tuple(json.loads(p.stdout.strip().splitlines()[-1]))


def test_a_scan_keeps_under_2_4_kb_a_run(logdirs):
    """A scan's result per run. Before: ~2.75 KB here (a dict of categories per file, an empty
    list per run's warnings and per category without tags, a copy of the host's name per
    session); ~3.3 KB a run of RSS at 100,000 runs. Now ~2.2 KB."""
    held, peak = _per_run(logdirs, lambda d: api.scan(d))
    assert held < 2400, f"a scan keeps {held:.0f} bytes a run"
    assert peak < 3000, f"a scan peaks at {peak:.0f} bytes a run"


def test_a_plan_keeps_under_1_7_kb_a_run_and_peaks_under_3_35_kb(logdirs):
    """A plan's result per run (its scan let go), and the peak while it plans (scan and plan
    both alive). Before: ~2.0 KB kept (an empty params and categories dict per action, an empty
    writers list per run), ~4.5 KB at the peak (also: a list of every backed-up file's absolute
    path and size for the compressed vault's estimate, ~3.4 KB with that alone); now ~1.5 and ~3.2."""
    held, peak = _per_run(logdirs, lambda d: api.plan(d, "archive"))
    assert held < 1700, f"a plan keeps {held:.0f} bytes a run"
    assert peak < 3350, f"a plan peaks at {peak:.0f} bytes a run"


def test_the_compressed_estimate_reads_its_originals_once(tmp_path):
    """The compressed vault's estimate takes a generator (read once, nothing kept but the files
    it samples) and says what it said of the same list."""
    from tb_footprint_plugin.engine import usage

    files = []
    for i in range(60):
        p = tmp_path / f"f{i:02d}"
        p.write_bytes(bytes(range(256)) * (i % 7 + 1) * 16)
        files.append((str(p), p.stat().st_size))
    files.append((str(tmp_path / "gone"), 5000))  # unreadable: counted whole
    assert usage.estimate_compressed(iter(files)) == usage.estimate_compressed(list(files))
    assert 0 < usage.estimate_compressed(f for f in files) < sum(n for _p, n in files)


def test_file_entry_categories_round_trip():
    """A file's categories are kept compactly and handed out as the same dict."""
    one = FileEntry(path="r/a.pb", size=10, mtime=1.0, kind="file", categories={"profile_xplane": 10})
    assert one.categories == {"profile_xplane": 10}
    many = FileEntry(path="r/events", size=10, mtime=1.0, kind="event", categories={"scalars": 7, "other": 3})
    assert many.categories == {"scalars": 7, "other": 3}
    many.categories = {"scalars": 10}
    assert many.categories == {"scalars": 10}
    split = FileEntry(path="r/x", size=10, mtime=1.0, kind="file", categories={"other": 4})  # not the whole file
    assert split.categories == {"other": 4}
    assert FileEntry(path="r/e", size=0, mtime=1.0, kind="event").categories == {}
    assert one == FileEntry(path="r/a.pb", size=10, mtime=1.0, kind="file", categories={"profile_xplane": 10})
    assert one != many


def test_the_shared_empty_defaults_refuse_to_be_filled():
    """The one empty list every record without warnings or tags shares cannot be filled by
    mistake (it would fill every record's)."""
    with pytest.raises(TypeError):
        NO_ITEMS.append("x")
    with pytest.raises(TypeError):
        NO_ITEMS.extend(["x"])
    assert NO_ITEMS == []


def test_the_json_schema_is_unchanged(logdirs):
    """``to_dict`` gives the documented schema (files with their categories dict, runs in
    order), and ``footprint_from_dict`` reads it back to an equal footprint."""
    fp = api.scan(logdirs[100])
    d = json.loads(json.dumps(fp.to_dict()))
    assert list(d) == [f for f in LogdirFootprint.__dataclass_fields__]
    r = d["runs"][0]
    assert list(r) == ["name", "path", "total_bytes", "newest_mtime", "categories", "files", "sessions",
                       "warnings", "has_event_files"]
    assert list(r["files"][0]) == ["path", "size", "mtime", "kind", "categories", "warning"]
    assert all(sum(f["categories"].values()) == f["size"] for r in d["runs"] for f in r["files"])
    assert "files" not in fp.to_dict(with_files=False)["runs"][0]
    back = footprint_from_dict(d)
    assert back.to_dict() == fp.to_dict()
    assert back.runs[0].files == fp.runs[0].files


def test_the_open_writer_check_holds_little_per_file(tmp_path):
    """A plan asks which of its runs' files some process holds open for writing (2 files a run
    here: 200,000 at 100,000 runs), while its scan and the plan are alive. What that check holds
    per file beyond the path itself: before, a (dev, ino) tuple and a list each (~240 bytes here,
    ~330 in a plan of 10,000 runs, where it made the plan's peak); now one int key (~90)."""
    from tb_footprint_plugin.storage.openfiles import find_writers

    paths = []
    for i in range(2000):
        p = tmp_path / f"f{i:05d}"
        p.write_bytes(b"x")
        paths.append(str(p))
    find_writers(paths[:10])  # warm
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        res = find_writers(paths)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert res.holders == []
    assert peak / len(paths) < 150, f"{peak / len(paths):.0f} bytes a file"


def test_like_names_are_one_string_across_runs(logdirs):
    """Category names, tags and host names a sweep's runs share are one string each, whatever
    the number of runs (a session's host was one copy a run)."""
    fp = api.scan(logdirs[100])
    a, b = fp.runs[0], fp.runs[-1]
    assert a.sessions[0].hosts == ["host"] and a.sessions[0].hosts[0] is b.sessions[0].hosts[0]
    assert next(iter(a.categories)) is next(k for k in b.categories if k == next(iter(a.categories)))


def test_like_runs_share_their_lines_and_no_one_can_change_them(logdirs):
    """A sweep's runs mostly say the same fidelity lines: one list for like runs in a row (two
    lists a run were ~180 bytes at 100,000 runs), which refuses to be changed in place."""
    p = api.plan(logdirs[100], "archive")
    a, b = p.runs[0], p.runs[1]
    assert a.fidelity == b.fidelity and a.fidelity is b.fidelity
    assert a.fidelity_details is b.fidelity_details
    with pytest.raises(TypeError):
        a.fidelity.append("x")
    assert json.loads(json.dumps(a.to_dict()))["fidelity"] == list(a.fidelity)


def test_a_session_name_is_read_from_its_path():
    """A profile session's name is the last part of its path, not a second string; a name that
    is not (JSON from elsewhere) is kept as given; equality and JSON are the dataclass's."""
    from tb_footprint_plugin.scan.model import ProfileSession

    s = ProfileSession(name="2024_01_01_00_00_00", path="exp/run/plugins/profile/2024_01_01_00_00_00",
                       mtime=1.0, bytes=10, files=1, hosts=["h"])
    assert s.name == "2024_01_01_00_00_00" and s._name is None
    odd = ProfileSession(name="other", path="exp/run/plugins/profile/x", mtime=1.0, bytes=0, files=0)
    assert odd.name == "other" and odd.hosts == [] and odd.kind == "xprof"
    assert s.to_dict() == {"name": "2024_01_01_00_00_00", "path": "exp/run/plugins/profile/2024_01_01_00_00_00",
                           "mtime": 1.0, "bytes": 10, "files": 1, "hosts": ["h"], "kind": "xprof"}
    assert s == ProfileSession(**s.to_dict()) and s != odd and s in [odd, s]


def test_a_plan_lets_go_of_its_own_scan_run_by_run(logdirs):
    """A plan that made its own scan lets go of each run's files, sessions and categories once
    the run is planned: the scan and the plan were both held whole at the plan's peak (~3.3 KB a
    run here, ~400 MB at 100,000 runs). Now the peak is the scan's own (~2.6 KB). Since like runs
    share their category stats (3b749dd, 5f051da) those are no run's own to let go, and the scan's
    peak fell to ~1.2-1.35 KB: the plan peaks ~330 bytes a run above it, ~1.5 KB in all (without
    letting go: ~840 above, ~2.2 KB)."""
    _held_, peak = _per_run_fresh(logdirs, "plan")
    _s, scan_peak = _per_run_fresh(logdirs, "scan")
    assert peak < scan_peak + 500, f"a plan peaks at {peak:.0f} bytes a run, its scan at {scan_peak:.0f}"
    assert peak < 1900, f"a plan peaks at {peak:.0f} bytes a run"


def test_a_footprint_the_caller_keeps_is_left_whole(logdirs):
    """The tab plans over the scan it keeps for its overview: that one is never let go of."""
    fp = api.scan(logdirs[100])
    files = sum(len(r.files) for r in fp.runs)
    p = api.plan(logdirs[100], "archive", footprint=fp)
    assert p.runs and all(rp.actions for rp in p.runs)
    assert sum(len(r.files) for r in fp.runs) == files and all(r.sessions and r.categories for r in fp.runs)


def test_a_warm_scan_peaks_little_above_what_it_keeps(logdirs):
    """What a scan holds only while it runs, per run: the cache's index (a dict of a bytes object
    an entry, ~150 bytes), the set of every event file's path it kept for the cache (~110), the
    walk's set of folders (an int and a slot each, four folders a run: ~300) and a key tuple a run
    to sort them (~100). Before ~530 bytes a run at 10,000 runs; now ~160."""
    held, peak = _per_run(logdirs, lambda d: api.scan(d))
    assert peak - held < 300, f"a warm scan peaks {peak - held:.0f} bytes a run above what it keeps"


def test_the_scan_cache_index_is_a_few_dozen_bytes_an_entry(logdirs):
    """Loaded, the cache holds per entry its key and place in 49 bytes of arrays, no object each."""
    from tb_footprint_plugin.scan.cache import ScanCache
    from tb_footprint_plugin.storage.paths import cache_dir

    ScanCache(cache_dir(logdirs[100])).close()
    caches = []
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        caches.append(ScanCache(cache_dir(logdirs[500])))
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert len(caches[0]) == 500
    caches[0].close()
    assert held / 500 < 90, f"{held / 500:.0f} bytes an entry"


def test_the_cache_keeps_what_the_scan_looked_up_and_drops_the_rest(tmp_path, monkeypatch, logdirs):
    """The scan no longer hands the cache a set of every path it found: the cache keeps the
    entries it was asked for, a re-read file's new entry, and drops a file that is gone."""
    import shutil

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    logdir = str(tmp_path / "ld")
    shutil.copytree(logdirs[100], logdir)
    first = api.scan(logdir)
    assert (first.files_read, first.files_cached) == (100, 0)
    gone = next(f for r in first.runs for f in r.files if f.kind == "event")
    os.unlink(os.path.join(logdir, gone.path))
    changed = next(f for r in first.runs for f in r.files if f.kind == "event" and f.path != gone.path)
    with open(os.path.join(logdir, changed.path), "ab") as f:
        f.write(b"\0" * 16)  # a torn record at the end: read again
    again = api.scan(logdir)
    assert (again.files_read, again.files_cached) == (1, 98)
    third = api.scan(logdir)
    assert (third.files_read, third.files_cached) == (0, 99)
    from tb_footprint_plugin.scan.cache import ScanCache
    from tb_footprint_plugin.storage.paths import cache_dir

    c = ScanCache(cache_dir(logdir))
    assert len(c) == 99
    c.close()


def test_the_walk_knows_each_folder_once_in_a_few_bytes():
    """The walk's set of folders entered (a bind mount can loop): exact, and ~16-32 bytes a folder."""
    from tb_footprint_plugin.scan.discovery import _InodeSet

    s = _InodeSet()
    s.add(7, 1)  # the first folder's device is the table's; any other is kept in a plain set
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        assert all(s.add(7, i * 7919 + 3) for i in range(40_000))
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert not any(s.add(7, i * 7919 + 3) for i in range(0, 40_000, 97))
    assert s.add(8, 3) and not s.add(8, 3) and s.add(7, 0) and not s.add(7, 0) and not s.add(7, 1)
    assert held / 40_000 < 40, f"{held / 40_000:.0f} bytes a folder"


def test_like_runs_share_one_list_of_tags(logdirs):
    """A sweep's runs log the same tags: one list of them, which refuses to be changed in place
    (a list a category a run was ~160 bytes a run); the logdir's totals have lists of their own."""
    fp = api.scan(logdirs[100])
    a, b = fp.runs[0].categories["scalars"], fp.runs[-1].categories["scalars"]
    assert a.tags == ["accuracy", "grad_norm", "learning_rate", "loss"] and a.tags is b.tags
    with pytest.raises(TypeError):
        a.tags.append("x")
    assert fp.categories["scalars"].tags == a.tags and fp.categories["scalars"].tags is not a.tags
    assert json.loads(json.dumps(fp.to_dict()))["runs"][0]["categories"]["scalars"]["tags"] == list(a.tags)


def test_a_plan_finds_a_run_by_its_name_without_a_search():
    """``Plan.run`` is indexed: ``leave_alone`` over many runs was quadratic (a linear search each)."""
    import time

    from tb_footprint_plugin.plan.model import Plan, RunPlan

    p = Plan(logdir="/x", policy={}, created_at=0.0, total_bytes=0,
             runs=[RunPlan(run=f"exp/run{i:06d}", bytes_before=1, expected_after_bytes=1) for i in range(20_000)])
    t = time.process_time()
    assert all(p.run(f"exp/run{i:06d}").run == f"exp/run{i:06d}" for i in range(20_000))
    assert time.process_time() - t < 2.0
    assert p.run("nope") is None
    p.runs = p.runs[:10]  # a new list: the index follows it
    assert p.run("exp/run000011") is None and p.run("exp/run000009").run == "exp/run000009"
