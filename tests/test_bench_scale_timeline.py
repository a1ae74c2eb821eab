"""bench/scale.py --timeline: under a fresh reduce of the file-size section, when each thread and
child process started and ended and when the reduce reached each step (issue #28 item 3: where
the fixed part's wall time goes, what the main thread waits on, what overlaps what). The CPU
split by thread said how much each part cost, not when it ran."""
import json
import os
import subprocess
import sys
import textwrap

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.insert(0, BENCH)

import scale  # noqa: E402

# in a child: the timeline patches threading.Thread.run and subprocess.Popen for its process
_CHILD = textwrap.dedent("""
    import json, subprocess, sys, threading, time
    sys.path.insert(0, %(bench)r)
    import scale
    tl = scale._Timeline().install()
    tl.start()

    def burn(s):
        end = time.thread_time() + s
        while time.thread_time() < end:
            pass

    tl.step("run", "backup", 0.1)
    tl.step("run", "backup", 0.3)  # a step is noted once, at its first report
    pool = [threading.Thread(target=burn, args=(0.05,), name=f"footprint-crawl-group_{i}") for i in range(2)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    p.wait()
    p.poll()  # reaped once: noted once
    tl.step("run", "verify", 0.65)
    print(json.dumps(tl.events))
""")


def test_threads_children_and_steps_are_noted_when_they_happen():
    out = subprocess.run([sys.executable, "-c", _CHILD % {"bench": BENCH}], capture_output=True,
                         text=True, check=True)
    events = json.loads(out.stdout.strip().splitlines()[-1])
    whats = [w for _, w in events]
    assert whats[0] == "step backup" and whats[-1] == "step verify", whats
    assert whats.count("step backup") == 1, whats
    ends = [w for w in whats if w.startswith("thread footprint-crawl-group_") and " ended (" in w]
    assert len(ends) == 2, whats
    for w in ends:  # each thread's own CPU as it ended
        assert 0.045 <= float(w.split("(")[1].split()[0]) < 0.2, w
    child = [(t, w) for t, w in events if w.startswith("child ")]
    assert [w.split(" (pid")[0] for _, w in child] == ["child " + os.path.basename(sys.executable)] * 2, child
    assert child[0][1].endswith(" started") and child[1][1].endswith("exited (0)"), child
    assert child[1][0] - child[0][0] >= 0.19, child  # from its spawn to its reaping
    times = [t for t, _ in events]
    assert times == sorted(times)


def test_the_lines_pair_starts_with_ends_and_fold_a_kind_of_thread_into_one():
    events = [
        [0.0, "thread footprint-sha256 started"],
        [0.05, "thread footprint-sha256 ended (0.014 s CPU)"],
        [0.1, "child server (pid 7) started"],
        [0.2, "step backup"],
        [0.3, "thread footprint-crawl-group_0 started"],
        [0.31, "thread footprint-crawl-group_1 started"],
        [0.5, "thread footprint-crawl-group_1 ended (0.020 s CPU)"],
        [0.6, "thread footprint-crawl-group_0 ended (0.030 s CPU)"],
        [0.65, "thread tb-footprint-lease started"],
        [0.7, "child server (pid 7) exited (0)"],
        [0.8, "outcome"],
    ]
    assert scale.timeline_lines(events) == [
        " 0.000- 0.050  thread footprint-sha256 (0.014 s CPU)",
        " 0.100- 0.700  child server (pid 7), exit 0",
        " 0.200         step backup",
        " 0.300- 0.600  threads footprint-crawl-group x2 (0.050 s CPU)",
        " 0.650         thread tb-footprint-lease (0.000 s CPU), not ended",
        " 0.800         outcome",
    ]


def test_the_report_prints_the_fresh_reduces_timeline(capsys):
    fresh = {"seconds": 1.0, "cpu": 0.9, "statuses": {"verified": 1}, "rss_mb": 100.0,
             "timeline": [[0.0, "step backup"], [0.5, "outcome"]]}
    row = {"mb": 20, "bytes": 20e6, "anchor": {"seconds": 0.1}, "cold": fresh,
           "warm": {"seconds": 0.8, "cpu": 0.6, "statuses": {"verified": 1}, "rss_mb": 100.0}}
    scale.file_sizes_report([row])
    out = capsys.readouterr().out
    assert "timeline of that measurement" in out, out
    assert " 0.000         step backup\n" in out and " 0.500         outcome\n" in out, out


_EVENTS = [[0.0, "thread footprint-sha256 started"], [0.2, "thread tb-footprint-lease started"],
           [0.3, "step backup"], [0.4, "step verify"], [0.9, "step done"], [0.91, "outcome"],
           [1.0, "reduce_logdir returned"]]


def test_the_phases_of_a_reduce_come_from_its_marks():
    assert scale.timeline_phases(_EVENTS) == [
        ("plan", 0.2), ("lock to verification (journal, backup, stage)", 0.2),
        ("verification to commit (readers, routes, last look, swap, commit)", 0.5),
        ("after the run (compaction, change log, usage)", 0.1)]
    # without the lease thread's start, the first backup report ends the plan
    no_lease = [e for e in _EVENTS if "lease" not in e[1]]
    assert scale.timeline_phases(no_lease)[0] == ("plan", 0.3)
    # a run that never reached its commit (refused, rolled back) has no phases
    assert scale.timeline_phases([e for e in _EVENTS if e[1] != "step done"]) is None


def test_every_fresh_reduce_prints_its_phases_and_the_two_sizes_side_by_side(capsys):
    def fresh(scale_by: float) -> dict:
        return {"seconds": 1.0 * scale_by, "cpu": 0.9, "statuses": {"verified": 1}, "rss_mb": 100.0,
                "timeline": [[t * (1 if what.startswith(("thread", "step backup", "step verify")) else scale_by),
                              what] for t, what in _EVENTS],
                "show_timeline": False}

    warm = {"seconds": 0.8, "cpu": 0.6, "statuses": {"verified": 1}, "rss_mb": 100.0}
    rows = [{"mb": 20, "bytes": 20e6, "anchor": {"seconds": 0.1}, "cold": fresh(1.0), "warm": dict(warm)},
            {"mb": 100, "bytes": 100e6, "anchor": {"seconds": 0.2}, "cold": fresh(2.0), "warm": dict(warm)}]
    scale.file_sizes_report(rows, gate_time=False)
    out = capsys.readouterr().out
    assert "    phases (s): plan 0.200, lock to verification (journal, backup, stage) 0.200, " in out, out
    assert ("    phases 20 MB -> 100 MB (s): plan 0.20 -> 0.20, lock to verification 0.20 -> 0.20, "
            "verification to commit 0.50 -> 1.40, after the run 0.10 -> 0.20") in out, out
    assert "timeline of that measurement" not in out  # the lines only with --timeline
