"""A cancel (Ctrl-C, SIGTERM, the tab's Cancel, a run's timeout) is looked at inside the verification,
not only between the transaction's steps (review R16, left open).

The verification of a big run can take many seconds (two readers, the route crawl, the Rust data
servers' loads, the Python loader's child); the driver honoured a cancel only after it. Here the
verification is made slow where it really waits — one group of the route crawl answers slowly, or
the data server's load does not end — and the batch is cancelled from another thread once it is
in there. The cancel must be seen inside: the outcome comes far sooner than the slowed part lasts,
the run is rolled back and coded ``interrupted`` (never "verification failed"), its files are byte
for byte, mtime and mode what they were, the journal is settled, the history says interrupted, and
no helper process of the verification is left.
"""
import hashlib
import os
import threading
import time
from pathlib import Path

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.formats import views
from tb_footprint_plugin.verify import dashboard, data_server_binary, original, routes

from test_verify_handover import _age, _histogram_run

BOTH = ("python", "rust")
needs_rust = pytest.mark.skipif(data_server_binary() is None, reason="no data server binary")
pytestmark = pytest.mark.usefixtures("disarm_faults")

#: how long the slowed part of the verification would last if the cancel were not seen inside it
SLOW_S = 30.0
#: how soon after the cancel the reduce must have returned (rollback included)
PROMPT_S = 3.0


def _snapshot(root: Path) -> dict:
    """The user's files: sha256, mtime and mode of each (the tool's state folder left out)."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not (dirpath == str(root) and d.startswith(".tb-footprint"))]
        for n in files:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = (hashlib.sha256(f.read()).hexdigest(), st.st_mtime_ns, st.st_mode)
    return out


def _children() -> list:
    """Processes whose parent is this one (a data server, a Python loader child; in a pytest-xdist
    worker, the object-store emulators an earlier test started too: compare with ``_new_children``)."""
    me, out = os.getpid(), []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == me and fields[0] != "Z":
            out.append((int(pid), stat.split("(", 1)[1].rsplit(")", 1)[0]))
    return out


def _new_children(before: list) -> list:
    """``_children()`` that were not there ``before`` (the plan's parked load released first: it
    exists by design and expires on its own)."""
    original.release_parked()
    return sorted(set(_children()) - set(before))


def _logdir(tmp_path: Path, runs=("a", "b")) -> Path:
    logdir = tmp_path / "logdir"
    for r in runs:
        _histogram_run(logdir / r)
    _age(logdir)
    return logdir


def _reduce_and_cancel(logdir: Path, inside: threading.Event, jobs: int):
    """Reduce ``logdir`` on a thread, cancel the batch once ``inside`` is set; returns the report,
    the seconds from the cancel to the reduce's return, and the children left then."""
    cancel = api.CancelToken()
    got: dict = {}
    children = _children()

    def reduce() -> None:
        try:
            got["report"] = api.reduce_logdir(str(logdir), policy="archive", dry_run=False,
                                              verify_backends=BOTH, jobs=jobs, cancel=cancel)
        except BaseException as e:  # noqa: BLE001 - shown by the assertion below
            got["error"] = e

    t = threading.Thread(target=reduce)
    t.start()
    assert inside.wait(240), "the verification never reached its slowed part"
    time.sleep(0.3)  # well inside it
    cancelled = time.monotonic()
    cancel.cancel()
    t.join(SLOW_S + 120)
    took = time.monotonic() - cancelled
    assert not t.is_alive()
    assert "error" not in got, got.get("error")
    return got["report"], took, _new_children(children)


def _assert_interrupted_and_untouched(logdir: Path, before: dict, report, took: float, left: list) -> None:
    assert took < PROMPT_S, f"the reduce returned {took:.1f}s after the cancel: it waited for the verification"
    outs = [o for o in report.outcomes if o.status != "skipped"]
    assert outs, [o.to_dict() for o in report.outcomes]
    for o in outs:
        assert o.status == "rolled_back" and o.code == "interrupted", o.to_dict()
        assert "verification failed" not in (o.reason or ""), o.to_dict()
    assert _snapshot(logdir) == before  # bytes, mtime and mode of every user file
    assert not left, f"helper processes outlived the verification: {left}"
    assert api.pending_operations(str(logdir)) == []  # every journal settled
    assert api.unfinished(str(logdir))["settle_command"] is None, api.unfinished(str(logdir))
    hist = [e for e in api.history(str(logdir)) if e.get("outcome") == "rolled_back"]
    assert sorted(e["run"] for e in hist) == sorted(o.run for o in outs), hist
    # a rolled-back reduce's history line carries its code (abd7187) and its reason says what happened
    assert all(e.get("code") == "interrupted" and e["reason"].startswith("interrupted") for e in hist), \
        [(e.get("code"), e.get("reason")) for e in hist]


@needs_rust
@pytest.mark.parametrize("path,jobs", [("big", 2), ("full", 1)])
def test_a_cancel_stops_a_slow_route_crawl_at_once(tmp_path, monkeypatch, path, jobs):
    """One group of the route crawl (the core group: runs, plugins, scalars) answers slowly: its
    last route again and again for ``SLOW_S``. On the big-run path (both data servers, the Python
    loader over the reduced run) with two jobs, and on the small-run path (both backends read in
    full, each crawled) with one."""
    logdir = _logdir(tmp_path, ("a", "b") if jobs > 1 else ("a",))
    before = _snapshot(logdir)
    monkeypatch.setattr(dashboard, "FULL_READ_BYTES", 0 if path == "big" else 1 << 40)
    inside = threading.Event()
    real_groups = routes._crawl_groups

    def slow_groups(*a, **kw):
        groups = real_groups(*a, **kw)
        core = groups[0]

        def slow_core():
            last = None
            for last in core():
                yield last
            inside.set()
            end = time.monotonic() + SLOW_S
            while time.monotonic() < end:  # a slow route: each answer takes a tenth of a second
                time.sleep(0.1)
                yield last

        return [slow_core] + groups[1:]

    monkeypatch.setattr(routes, "_crawl_groups", slow_groups)
    report, took, left = _reduce_and_cancel(logdir, inside, jobs)
    _assert_interrupted_and_untouched(logdir, before, report, took, left)


@needs_rust
def test_a_cancel_ends_a_data_server_load_it_waits_for(tmp_path, monkeypatch):
    """The data server of the reduced run never says its load is done (a huge run): the cancel ends
    it; the verification does not wait ``SLOW_S`` for it."""
    logdir = _logdir(tmp_path, ("a",))
    before = _snapshot(logdir)
    monkeypatch.setattr(dashboard, "FULL_READ_BYTES", 0)
    staged, inside = threading.Event(), threading.Event()
    faults.arm("reduce.stage", staged.set)
    real_wait = views.wait_until_loaded

    def slow_load(server, provider, timeout_s):
        real_wait(server, provider, timeout_s)
        if not staged.is_set():
            return  # the plan's load of the original: not this test's
        inside.set()
        end = time.monotonic() + SLOW_S
        while time.monotonic() < end:  # still loading: the real wait lists the run every half second
            provider.list_runs(views.request_context(), experiment_id=views.EXPERIMENT_ID)
            time.sleep(0.5)

    monkeypatch.setattr(views, "wait_until_loaded", slow_load)
    report, took, left = _reduce_and_cancel(logdir, inside, 1)
    _assert_interrupted_and_untouched(logdir, before, report, took, left)


def test_a_stop_asked_before_the_verification_gives_no_verdict(tmp_path):
    """``verify_reduction(should_stop=)``: a stop asked is never answered by a verdict."""
    from tb_footprint_plugin.verify import Stopped, verify_reduction

    run = _histogram_run(tmp_path / "run", steps=20).parent
    with pytest.raises(Stopped):
        verify_reduction(str(run), str(run), should_stop=lambda: True)
    assert verify_reduction(str(run), str(run), backends=("python",), should_stop=lambda: False).ok


#: the CLI with the core group of every route crawl slowed as above; the flag is created once a crawl
#: is in its slow part
SLOW_CRAWL_CLI = r"""
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # what a terminal's shell leaves it
from tb_footprint_plugin.verify import routes
flag, slow_s = sys.argv[1], float(sys.argv[2])
real_groups = routes._crawl_groups
def slow_groups(*a, **kw):
    groups = real_groups(*a, **kw)
    core = groups[0]
    def slow_core():
        last = None
        for last in core():
            yield last
        open(flag, "w").close()
        end = time.monotonic() + slow_s
        while time.monotonic() < end:
            time.sleep(0.1)
            yield last
    return [slow_core] + groups[1:]
routes._crawl_groups = slow_groups
from tb_footprint_plugin.cli import main
sys.exit(main(sys.argv[3:]))
"""


def _processes_naming(text: str) -> list:
    """Live processes whose command line names ``text`` (a data server's --logdir, a loader's run)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if text in cmd and not zombie:
            out.append((int(pid), cmd[:200]))
    return out


@needs_rust
def test_ctrl_c_to_a_one_job_cli_in_a_slow_crawl_exits_at_once(tmp_path):
    """The real CLI (``reduce --jobs 1``: the run's verification on the main thread, where Ctrl-C's
    KeyboardInterrupt lands) in its own session, SIGINT to its process group inside a slow crawl:
    it exits 130 within moments, the run untouched and said interrupted, no helper left."""
    import json
    import signal
    import subprocess
    import sys

    from helpers_cli import cli_env, run_cli

    logdir = _logdir(tmp_path, ("a",))
    before = _snapshot(logdir)
    flag = tmp_path / "in-crawl"
    p = subprocess.Popen([sys.executable, "-c", SLOW_CRAWL_CLI, str(flag), str(SLOW_S), "reduce", str(logdir),
                          "--yes", "--jobs", "1", "--verify", "python,rust"],
                         env=cli_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not flag.exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert flag.exists(), p.communicate()
        time.sleep(0.3)
        cancelled = time.monotonic()
        os.killpg(p.pid, signal.SIGINT)  # what Ctrl-C at the terminal does
        out, err = p.communicate(timeout=SLOW_S + 120)
        took = time.monotonic() - cancelled
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, out + err
    assert took < PROMPT_S + 2, f"the CLI exited {took:.1f}s after Ctrl-C: it waited for the verification"
    assert "verification failed" not in out + err, out + err
    assert "✓ a: untouched" in err, err
    assert _snapshot(logdir) == before
    assert not _processes_naming(str(logdir)), _processes_naming(str(logdir))
    hist = run_cli("history", logdir, "--json")
    entries = [e for e in json.loads(hist.stdout) if e.get("outcome") == "rolled_back"]
    assert [e["run"] for e in entries] == ["a"] and entries[0]["reason"].startswith("interrupted"), entries


@needs_rust
def test_a_run_timeout_passing_inside_a_slow_crawl_ends_it_there(tmp_path, monkeypatch):
    """``--timeout``: the run's deadline passes while its verification crawls slowly; the run ends
    then (rolled back, "timed out before the commit point", as a timeout between steps says), not
    when the crawl would have ended."""
    logdir = _logdir(tmp_path, ("a",))
    before = _snapshot(logdir)
    monkeypatch.setattr(dashboard, "FULL_READ_BYTES", 0)
    inside: list = []
    real_groups = routes._crawl_groups

    def slow_groups(*a, **kw):
        groups = real_groups(*a, **kw)
        core = groups[0]

        def slow_core():
            last = None
            for last in core():
                yield last
            inside.append(time.monotonic())
            end = time.monotonic() + SLOW_S
            while time.monotonic() < end:
                time.sleep(0.1)
                yield last

        return [slow_core] + groups[1:]

    monkeypatch.setattr(routes, "_crawl_groups", slow_groups)
    timeout = 10.0
    children = _children()
    api.plan(str(logdir), "archive")  # the plan's own work before the run's clock starts
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=BOTH, timeout=timeout)
    outs = [o for o in rep.outcomes if o.status != "skipped"]
    assert len(outs) == 1 and inside, [o.to_dict() for o in rep.outcomes]
    o = outs[0]
    assert o.status == "rolled_back" and o.reason == "timed out before the commit point", o.to_dict()
    assert o.duration_s < timeout + PROMPT_S, f"the run ended {o.duration_s:.1f}s after it began"
    assert _snapshot(logdir) == before
    assert not _new_children(children)
