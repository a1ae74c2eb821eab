"""The verification's helpers are out of the terminal's reach from their first instant (the CI of
ecdb86f: ``test_ctrlc_jobs_not_verification`` saw a second job's data server die of the Ctrl-C
sent to the process group, "data server exited with -2", said as "verification failed"). They
were started with ``start_new_session``, but a child leaves our process group only at its
``setsid``, after the fork, and CPython restores its signal mask before that call: a SIGINT in
that instant killed it. The spawn now blocks the terminal's signals in the spawning thread, so
the child holds them blocked through ``exec``: one sent to it in that instant never lands."""
import signal
import subprocess
import sys
import threading

from tb_footprint_plugin.formats import views
from tb_footprint_plugin.storage.spawn import TERMINAL_SIGNALS, out_of_the_terminals_reach
from tb_footprint_plugin.verify import pyside

#: a child that sends itself what a terminal's Ctrl-C sends: as if it came before its setsid
SELF_SIGINT = "import os, signal; os.kill(os.getpid(), signal.SIGINT); print('alive', flush=True)"


def test_a_child_spawned_out_of_reach_survives_a_sigint_of_its_first_instant():
    with out_of_the_terminals_reach():
        p = subprocess.Popen([sys.executable, "-c", SELF_SIGINT], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0 and out.strip() == "alive", (p.returncode, out)
    # without it, the same child dies of it (what the data server did)
    p = subprocess.Popen([sys.executable, "-c", SELF_SIGINT], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    p.communicate(timeout=60)
    assert p.returncode != 0


def test_only_the_spawn_is_held_and_only_in_its_thread():
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    ask, told, other = threading.Event(), threading.Event(), []

    def another_thread():  # one already running, as the main thread is for a worker's spawn
        ask.wait(30)
        other.append(signal.pthread_sigmask(signal.SIG_BLOCK, []))
        told.set()

    t = threading.Thread(target=another_thread)
    t.start()
    with out_of_the_terminals_reach():
        assert TERMINAL_SIGNALS <= signal.pthread_sigmask(signal.SIG_BLOCK, [])
        ask.set()
        assert told.wait(30)
        assert not (TERMINAL_SIGNALS - before) & other[0], other  # its mask untouched
    t.join()
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before


def test_the_data_server_and_the_python_loader_are_spawned_out_of_reach(monkeypatch, tmp_path):
    held = []

    class Spy:
        def __init__(self, *a, **kw):
            held.append((kw.get("start_new_session"), TERMINAL_SIGNALS <= signal.pthread_sigmask(signal.SIG_BLOCK, [])))
            raise OSError("not started in this test")

    monkeypatch.setattr(views.subprocess, "Popen", Spy)
    server = views.DataServer.__new__(views.DataServer)
    server.args = ["true"]
    try:
        server.start(1.0)
    except OSError:
        pass
    side = pyside.PythonSide(str(tmp_path), 5.0).start()  # no interpreter started: reads in-process
    assert side._proc is None
    assert held == [(True, True), (True, True)], held
