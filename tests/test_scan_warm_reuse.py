"""A warm scan reuses what like runs share instead of making it again (issue #28 item 1: a warm
scan of 100,000 runs was 0.21x a cold one, its per-run cost mostly the parse of each cached line
and the fold of each run's stats): each distinct cached text of stats is parsed once a scan, and
a run whose inputs (its event files' stats, its other files' categories and sizes) a like run
had is given that run's fold. What it says is a cold scan's, byte for byte of its JSON, and it
still sees every change a cold scan sees."""
import json
import os

import pytest

from tb_footprint_plugin.scan import eventfile
from tb_footprint_plugin.scan.scanner import scan

from helpers_runs import copy_runs, small_run_template, write_small_run


@pytest.fixture
def logdir(tmp_path, monkeypatch):
    """Four byte copies of one run, and one run with more steps (its stats differ)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = copy_runs(tmp_path / "logs", small_run_template(str(tmp_path)), 4)
    write_small_run(os.path.join(root, "other"), 7, steps=80)
    return root


def _said(fp) -> str:
    """What a scan says, as its JSON says it (its time and what it read or took from its cache
    left out)."""
    d = fp.to_dict()
    for k in ("scanned_at", "files_cached", "files_read"):
        d.pop(k)
    return json.dumps(d, sort_keys=True)


def _run(fp, name: str) -> dict:
    """One run's bytes by category and its files' (times left out), as the scan's JSON says them."""
    r = next(r for r in fp.to_dict()["runs"] if r["name"] == name)
    return {"categories": r["categories"], "files": [(f["path"], f["size"], f["categories"]) for f in r["files"]]}


def _event_file(root: str, run: str) -> str:
    folder = os.path.join(root, run)
    return os.path.join(folder, next(n for n in sorted(os.listdir(folder)) if "tfevents" in n))


def test_a_warm_scan_parses_each_distinct_cached_text_once(logdir, monkeypatch):
    scan(logdir)  # the cache
    calls = []
    real = eventfile.EventFileStats.from_dict.__func__

    def counted(cls, d):
        calls.append(1)
        return real(cls, d)
    monkeypatch.setattr(eventfile.EventFileStats, "from_dict", classmethod(counted))
    fp = scan(logdir)
    assert fp.files_cached == 5 and fp.files_read == 0
    # before: one parse a cached file (5); now one for the four copies' one text, one for "other"
    assert len(calls) == 2


def test_a_like_runs_fold_is_reused(logdir, monkeypatch):
    scan(logdir)
    calls = []
    real = eventfile.EventFileStats.category_bytes

    def counted(self, *a, **k):
        calls.append(1)
        return real(self, *a, **k)
    monkeypatch.setattr(eventfile.EventFileStats, "category_bytes", counted)
    fp = scan(logdir)
    assert fp.files_cached == 5
    # before: each event file's split made afresh and again for the cache's check (10); now the
    # check once for each of the two texts, the split once for each of the two folds
    assert len(calls) == 4
    like = [fp.run(f"exp00/run{i:05d}") for i in range(4)]
    assert all(r.categories is like[0].categories for r in like[1:])
    assert fp.run("other").categories is not like[0].categories


def test_what_a_warm_scan_says_is_a_cold_scans_byte_for_byte(logdir):
    cold = scan(logdir, use_cache=False)
    scan(logdir)
    warm = scan(logdir)
    assert warm.files_cached == 5
    assert _said(warm) == _said(cold)
    # each file's own figures, never a like run's
    for r in warm.runs:
        for f in r.files:
            st = os.lstat(os.path.join(logdir, f.path))
            assert (f.size, f.mtime) == (st.st_size, st.st_mtime)
            assert f.path.startswith(r.name + "/")


def _same_as_cold(root: str):
    warm = scan(root)
    assert _said(warm) == _said(scan(root, use_cache=False))
    return warm


def test_a_warm_scan_sees_every_change_a_cold_one_sees(logdir):
    scan(logdir)
    before = _same_as_cold(logdir)
    ev = _event_file(logdir, "exp00/run00001")
    size = os.path.getsize(ev)
    stat_before = _run(before, "exp00/run00001")

    with open(ev, "ab") as f:  # appended: a record cut short
        f.write(b"\x05" * 20)
    fp = _same_as_cold(logdir)
    assert _run(fp, "exp00/run00001") != stat_before
    assert fp.run("exp00/run00002").categories is fp.run("exp00/run00000").categories

    os.truncate(ev, size)  # truncated back to the same size: the copies' fold again, its own file
    fp = _same_as_cold(logdir)
    assert _run(fp, "exp00/run00001") == stat_before

    with open(ev, "r+b") as f:  # the same size, other bytes (a record's CRC broken)
        f.seek(size // 2)
        b = f.read(1)
        f.seek(size // 2)
        f.write(bytes([b[0] ^ 0xFF]))
    fp = _same_as_cold(logdir)
    assert _run(fp, "exp00/run00001") != stat_before

    # replaced by another file of the same size and the same mtime (a new inode)
    st = os.stat(ev)
    other = ev + ".new"
    with open(os.path.join(logdir, "exp00/run00000", os.path.basename(ev)), "rb") as f:
        data = f.read()
    with open(other, "wb") as f:
        f.write(data)
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, ev)
    fp = _same_as_cold(logdir)
    assert _run(fp, "exp00/run00001") == stat_before

    os.utime(ev, (1_000_000, 1_000_000))  # only its mtime
    fp = _same_as_cold(logdir)
    assert next(f for f in fp.run("exp00/run00001").files if f.kind == "event").mtime == 1_000_000

    # a new file, a new folder, a file gone, a run gone, a run being written
    with open(os.path.join(logdir, "exp00/run00002", "notes.txt"), "wb") as f:
        f.write(b"x" * 300)
    os.makedirs(os.path.join(logdir, "exp00/run00003/plugins/profile/2024_01_01_00_00_00"))
    xplane = next(os.path.join(dp, n) for dp, _d, ns in os.walk(os.path.join(logdir, "exp00/run00000"))
                  for n in ns if n.endswith(".xplane.pb"))
    os.remove(xplane)
    fp = _same_as_cold(logdir)
    assert fp.run("exp00/run00002").total_bytes == before.run("exp00/run00002").total_bytes + 300
    assert fp.run("exp00/run00000").total_bytes < before.run("exp00/run00000").total_bytes
    for n in os.listdir(os.path.join(logdir, "exp00/run00002")):
        if "tfevents" in n:
            os.remove(os.path.join(logdir, "exp00/run00002", n))
    write_small_run(os.path.join(logdir, "new"), 3, steps=20)
    fp = _same_as_cold(logdir)
    assert fp.run("new") is not None
    with open(_event_file(logdir, "new"), "ab") as f:
        f.write(_event_file_bytes(logdir, "other")[:100])  # half a record more: being written
    _same_as_cold(logdir)


def _event_file_bytes(root: str, run: str) -> bytes:
    with open(_event_file(root, run), "rb") as f:
        return f.read()
