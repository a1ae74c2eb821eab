"""A big local scan parses event files on the other cores too (#28 item 1, scan.parse_pool): the
footprint is exactly the one-process scan's, for good, damaged and odd event files alike, the
cache it writes serves the next scan, nothing is left running, and a worker that fails loses
nothing (the scan parses its files itself)."""
from __future__ import annotations

import os
import shutil

import pytest

from conftest import REAL_LOGDIRS, copy_real
from tb_footprint_plugin import synth
from tb_footprint_plugin.scan import parse_pool
from tb_footprint_plugin.scan.scanner import scan
from tb_footprint_plugin.scan.tfrecord import RecordWriter


def _events(path, tags, steps=30, first=0):
    from tensorboard.compat.proto import event_pb2, summary_pb2

    with open(path, "wb") as f:
        w = RecordWriter(f)
        w.write(event_pb2.Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString())
        for i in range(first, first + steps):
            ev = event_pb2.Event(wall_time=2.0 + i, step=i, summary=summary_pb2.Summary(
                value=[summary_pb2.Summary.Value(tag=t, simple_value=float(i)) for t in tags]))
            w.write(ev.SerializeToString())


def mixed_logdir(root):
    """Runs of TF2 writers (tags bound by metadata on their first value, a second file of a run
    relying on the first's binding), legacy multi-value events, and damaged files of each kind."""
    logdir = root / "logs"
    for i in range(12):
        with synth.EventWriter(str(logdir / f"sweep/run{i}"), timestamp=1_700_000_000 + i) as w:
            for step in range(40):
                w.scalar("loss", step, 1.0 / (step + 1 + i))
                if step % 10 == 0:
                    w.histogram("w", step, [(0.0, 1.0, float(step)), (1.0, 2.0, 3.0)])
    for i in range(6):
        run = logdir / f"legacy/run{i}"
        run.mkdir(parents=True)
        _events(run / "events.out.tfevents.1.h", ["a", "b/c", "é"], steps=20 + i)
        _events(run / "events.out.tfevents.2.h", ["a"], steps=5, first=100)
    bad = logdir / "bad"
    bad.mkdir()
    _events(bad / "events.out.tfevents.1.trunc", ["x"])
    with open(bad / "events.out.tfevents.1.trunc", "ab") as f:
        f.write(b"\x40\x00\x00")
    _events(bad / "events.out.tfevents.2.crc", ["x"])
    data = bytearray((bad / "events.out.tfevents.2.crc").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (bad / "events.out.tfevents.2.crc").write_bytes(bytes(data))
    (bad / "events.out.tfevents.3.empty").write_bytes(b"")
    (bad / "events.out.tfevents.4.junk").write_text("this is not a TFRecord file\n")
    odd = os.fsencode(str(bad)) + b"/events.out.tfevents.5.\xff\xfe"
    with open(odd, "wb") as f:
        f.write((bad / "events.out.tfevents.2.crc").read_bytes())
    for name in REAL_LOGDIRS[:3]:
        copy_real(name, logdir / "real" / name)
    return logdir


def footprint(fp) -> dict:
    d = fp.to_dict()
    for what in ("scanned_at", "disk", "files_read", "files_cached"):  # (asserted apart)
        d.pop(what, None)
    return d


@pytest.fixture
def counted(monkeypatch):
    """Each pool's workers' pids and what they parsed."""
    seen = {"pids": [], "parsed": 0}
    real_init, real_close = parse_pool._Worker.__init__, parse_pool.ParsePool.close

    def init(self):
        real_init(self)
        seen["pids"].append(self.proc.pid)

    def close(self):
        seen["parsed"] += self.parsed
        real_close(self)

    monkeypatch.setattr(parse_pool._Worker, "__init__", init)
    monkeypatch.setattr(parse_pool.ParsePool, "close", close)
    return seen


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # reaped children vanish; a zombie would still answer
    return False


def test_a_scan_on_workers_is_the_one_process_scan_exactly(tmp_path, monkeypatch, counted):
    logdir = mixed_logdir(tmp_path)
    monkeypatch.setenv(parse_pool.ENV, "0")
    alone = scan(str(logdir), use_cache=False, write_cache=False)
    monkeypatch.setenv(parse_pool.ENV, "2")
    monkeypatch.setattr(parse_pool, "START_AFTER", 3)  # the first 3 files the scan's own
    monkeypatch.setattr(parse_pool, "IN_FLIGHT", 2)  # and some no worker has room for
    # the scan parses what its workers have not answered when it needs it: once as it comes ...
    stealing = scan(str(logdir), use_cache=False, write_cache=False)
    assert footprint(stealing) == footprint(alone)
    # ... and once waiting for every answer
    monkeypatch.setattr(parse_pool, "STEAL", False)
    counted["parsed"] = 0
    shared = scan(str(logdir))
    assert footprint(shared) == footprint(alone)
    assert shared.files_read == alone.files_read and shared.files_cached == 0
    assert len(counted["pids"]) == 4 and counted["parsed"] > 0, counted
    assert all(_gone(pid) for pid in counted["pids"])
    # the cache the shared scan wrote serves every event file of the next scan
    again = scan(str(logdir))
    assert again.files_read == 0 and again.files_cached == alone.files_read
    assert footprint(again) == footprint(alone)


def test_a_small_scan_starts_no_worker(tmp_path, monkeypatch, counted):
    logdir = mixed_logdir(tmp_path)
    monkeypatch.setenv(parse_pool.ENV, "2")
    fp = scan(str(logdir), use_cache=False, write_cache=False)
    assert fp.files_read < parse_pool.START_AFTER and counted["pids"] == []


def test_a_worker_that_fails_loses_nothing(tmp_path, monkeypatch, counted):
    logdir = mixed_logdir(tmp_path)
    monkeypatch.setenv(parse_pool.ENV, "0")
    alone = scan(str(logdir), use_cache=False, write_cache=False)
    monkeypatch.setenv(parse_pool.ENV, "2")
    monkeypatch.setattr(parse_pool, "START_AFTER", 0)
    monkeypatch.setattr(parse_pool, "WORKER_MODULE", "this_module_does_not_exist_28")  # exits at once
    fp = scan(str(logdir), use_cache=False, write_cache=False)
    assert footprint(fp) == footprint(alone)
    assert counted["parsed"] == 0 and len(counted["pids"]) == 2
    assert all(_gone(pid) for pid in counted["pids"])


def test_workers_wanted_follows_the_setting(monkeypatch):
    monkeypatch.setenv(parse_pool.ENV, "3")
    assert parse_pool.workers_wanted() == 3
    monkeypatch.setenv(parse_pool.ENV, "0")
    assert parse_pool.workers_wanted() == 0
    monkeypatch.setenv(parse_pool.ENV, "lots")
    assert parse_pool.workers_wanted() == 0
    monkeypatch.delenv(parse_pool.ENV)
    cpus = len(os.sched_getaffinity(0))
    most = (cpus - 1 if cpus > 2 else cpus) if cpus > 1 else 0
    # one worker for each core left idle while the scan parsed alone, none on a busy machine
    assert parse_pool.workers_wanted(idle=float(cpus)) == min(most, parse_pool.MAX_WORKERS)
    assert parse_pool.workers_wanted(idle=0.3) == 0
    assert parse_pool.workers_wanted(idle=1.0) == (1 if cpus > 1 else 0)
    # unknown: the cores the load average leaves idle
    monkeypatch.setattr(parse_pool.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert parse_pool.workers_wanted() == min(most, parse_pool.MAX_WORKERS)
    monkeypatch.setattr(parse_pool.os, "getloadavg", lambda: (float(cpus), 0.0, 0.0))
    assert parse_pool.workers_wanted() == 0
    # idle cores told from the machine's ticks: all of them idle, none, or too short a window
    ticks = iter([(0, 0), (100 * (os.cpu_count() or 1), 100 * (os.cpu_count() or 1))])
    monkeypatch.setattr(parse_pool, "cpu_ticks", lambda: next(ticks))
    assert parse_pool.idle_cores(parse_pool.cpu_ticks()) == float(os.cpu_count() or 1)
    ticks = iter([(0, 0), (0, 100 * (os.cpu_count() or 1))])
    assert parse_pool.idle_cores(parse_pool.cpu_ticks()) == 0.0
    ticks = iter([(0, 0), (1, 2)])
    assert parse_pool.idle_cores(parse_pool.cpu_ticks()) is None


def test_workers_run_nothing_planted_in_the_current_folder_or_pythonpath(tmp_path, monkeypatch, counted):
    """Review R11 G8: a scan's workers started as ``python -m`` (or ``-c``) put the current folder
    first on their sys.path, so a tb_footprint_plugin/ or json.py planted in a shared logdir the user
    stands in ran as that user. They start isolated, as the compaction worker does."""
    logdir = mixed_logdir(tmp_path)
    marker = tmp_path / "PWNED"
    for where in (logdir, tmp_path / "elsewhere"):
        planted = where / "tb_footprint_plugin"
        planted.mkdir(parents=True)
        (planted / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write('package ')\n")
        for mod in ("json", "select", "numpy"):
            (where / f"{mod}.py").write_text(f"open({str(marker)!r}, 'a').write('{mod} ')\n")
    monkeypatch.chdir(logdir)  # the user stands in the shared logdir
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "elsewhere"))
    monkeypatch.setenv(parse_pool.ENV, "2")
    monkeypatch.setattr(parse_pool, "START_AFTER", 0)
    monkeypatch.setattr(parse_pool, "STEAL", False)  # every file asked is parsed by a worker
    fp = scan(".", use_cache=False, write_cache=False)
    assert not marker.exists(), marker.read_text()
    assert fp.files_read > counted["parsed"] > 0 and len(counted["pids"]) == 2


def test_no_interpreter_no_workers(tmp_path, monkeypatch, counted):
    logdir = mixed_logdir(tmp_path)
    monkeypatch.setenv(parse_pool.ENV, "0")
    alone = scan(str(logdir), use_cache=False, write_cache=False)
    monkeypatch.setenv(parse_pool.ENV, "2")
    monkeypatch.setattr(parse_pool, "START_AFTER", 0)
    monkeypatch.setattr(parse_pool.sys, "executable", None)
    assert parse_pool.workers_wanted() == 0
    with parse_pool.ParsePool(workers=2, start_after=0) as pool:  # asked for workers all the same
        assert pool.ask(str(logdir / "bad/events.out.tfevents.3.empty"), "x", 0) is False
    assert footprint(scan(str(logdir), use_cache=False, write_cache=False)) == footprint(alone)
    assert counted["pids"] == []
