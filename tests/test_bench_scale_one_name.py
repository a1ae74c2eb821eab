"""bench/scale.py's file-size section (issue #28 item 3) reduces a file of one name, as a job's
event file is: an original of several names is backed up by a copy (the vault's rule since
6fd1676), a path the reduce of a user's file does not take, so a linked copy of the kept
original measured that copy instead of the hard link a user's reduce makes."""
import argparse
import os
import sys

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.insert(0, BENCH)

import scale  # noqa: E402


def test_each_measured_reduce_sees_an_event_file_of_one_name(tmp_path, monkeypatch):
    def small_file(run_dir, target_bytes):
        os.makedirs(run_dir, exist_ok=True)
        p = os.path.join(run_dir, "events.out.tfevents.1700000000.host")
        with open(p, "wb") as f:
            f.write(b"x" * 1000)
        return p

    seen = []

    def measure(kind, cache, timeout=None, **a):
        names = [os.path.join(d, n) for d, _, ns in os.walk(a["logdir"]) for n in ns]
        seen.append((kind, [os.lstat(n).st_nlink for n in names]))
        return {"seconds": 0.1, "rss_mb": 1.0, "statuses": {"verified": 1}}

    monkeypatch.setattr(scale, "make_media_event_file", small_file)
    monkeypatch.setattr(scale, "measure", measure)
    monkeypatch.setattr(scale, "compile_package", lambda: "")
    args = argparse.Namespace(profile=None, repeat=2, time_limit=None)
    rows = scale.file_sizes_bench([1.0], str(tmp_path), args)
    assert [k for k, _ in seen] == ["rust", "rust", "file_reduce", "file_reduce", "file_reduce", "file_reduce"]
    assert all(links == [1] for _, links in seen), seen
    assert rows[0]["cold"]["statuses"] == {"verified": 1}
