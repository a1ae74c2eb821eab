"""The verification's helpers are out of the terminal's reach from their first instant (the CI of
ecdb86f: ``test_ctrlc_jobs_not_verification`` saw a second job's data server die of the Ctrl-C
sent to the process group, "data server exited with -2", said as "verification failed"). They
were started with ``start_new_session``, but a child leaves our process group only at its
``setsid``, after the fork, and CPython restores its signal mask before that call: a SIGINT in
that instant killed it. The spawn now happens in a thread with the terminal's signals blocked,
so the child holds them blocked through ``exec``: one sent to it in that instant never lands.
And the caller's own mask is never touched, so a signal handler raising during the spawn cannot
leave it blocked (review R7 F1: the first version blocked and restored the caller's mask)."""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tb_footprint_plugin.formats import views
from tb_footprint_plugin.storage import spawn
from tb_footprint_plugin.storage.spawn import TERMINAL_SIGNALS, popen_out_of_reach
from tb_footprint_plugin.verify import pyside

#: a child that sends itself what a terminal's Ctrl-C sends: as if it came before its setsid
SELF_SIGINT = "import os, signal; os.kill(os.getpid(), signal.SIGINT); print('alive', flush=True)"


def _mask():
    return signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_a_child_spawned_out_of_reach_survives_a_sigint_of_its_first_instant():
    p = popen_out_of_reach([sys.executable, "-c", SELF_SIGINT], stdout=subprocess.PIPE, text=True)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0 and out.strip() == "alive", (p.returncode, out)
    # without it, the same child dies of it (what the data server did)
    p = subprocess.Popen([sys.executable, "-c", SELF_SIGINT], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    p.communicate(timeout=60)
    assert p.returncode != 0


def test_the_child_is_in_a_session_of_its_own_and_popens_errors_reach_the_caller(tmp_path):
    p = popen_out_of_reach([sys.executable, "-c", "import os; print(os.getsid(0))"], stdout=subprocess.PIPE,
                           text=True)
    out, _ = p.communicate(timeout=60)
    assert int(out) == p.pid != os.getsid(0)
    with pytest.raises(FileNotFoundError):
        popen_out_of_reach([str(tmp_path / "no-such-program")])


def test_the_callers_mask_is_never_touched_so_no_handler_can_leave_it_blocked(monkeypatch):
    """R7 F1: the first version blocked the terminal's signals in the caller's thread and restored
    them after; a signal handler raising in between (the CLI's Ctrl-C one does) left them blocked
    in that thread for good (R7 showed it about once in six such interrupts). Now only the
    short-lived spawning thread ever changes a mask."""
    calls = []
    real = signal.pthread_sigmask

    def spy(how, mask):
        calls.append((threading.get_ident(), how, frozenset(mask)))
        return real(how, mask)

    monkeypatch.setattr(spawn.signal, "pthread_sigmask", spy)
    before = real(signal.SIG_BLOCK, [])
    p = popen_out_of_reach([sys.executable, "-c", SELF_SIGINT], stdout=subprocess.PIPE, text=True)
    out, _ = p.communicate(timeout=60)
    assert out.strip() == "alive"  # blocked in the child all the same
    me = threading.get_ident()
    assert calls and all(ident != me for ident, _how, _m in calls), calls
    assert [(how, m) for _i, how, m in calls] == [(signal.SIG_BLOCK, TERMINAL_SIGNALS)]  # never restored: the thread ends
    assert real(signal.SIG_BLOCK, []) == before


def test_an_interrupted_caller_leaves_no_child_behind(monkeypatch):
    """Ctrl-C in the caller while the spawn thread works: the child it would never get is stopped."""
    made = []
    real = subprocess.Popen

    class Slow(real):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(self)
            time.sleep(0.5)  # the caller is interrupted meanwhile

    monkeypatch.setattr(spawn.subprocess, "Popen", Slow)
    main = threading.get_ident()
    threading.Timer(0.1, lambda: signal.pthread_kill(main, signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        popen_out_of_reach(["sleep", "30"])
    assert len(made) == 1 and made[0].returncode is not None  # killed and reaped
    assert made[0].returncode == -signal.SIGKILL


def test_the_data_server_and_the_python_loader_are_spawned_out_of_reach(monkeypatch, tmp_path):
    held = []

    class Spy:
        def __init__(self, *a, **kw):
            held.append((kw.get("start_new_session"), threading.current_thread() is not threading.main_thread(),
                         TERMINAL_SIGNALS <= _mask()))
            raise OSError("not started in this test")

    monkeypatch.setattr(spawn.subprocess, "Popen", Spy)
    server = views.DataServer.__new__(views.DataServer)
    server.args = ["true"]
    try:
        server.start(1.0)
    except OSError:
        pass
    side = pyside.PythonSide(str(tmp_path), 5.0).start()  # no interpreter started: reads in-process
    assert side._proc is None
    assert held == [(True, True, True), (True, True, True)], held
    assert not TERMINAL_SIGNALS & _mask()  # the caller's own mask untouched
