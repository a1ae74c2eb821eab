"""Helper processes spawned out of the terminal's reach (review R16 F13, and the CI of ecdb86f).

A terminal's Ctrl-C sends SIGINT to its whole foreground process group. The verification's helper
processes (TensorBoard's Rust data server, the Python loader child) are started in a session of
their own (``start_new_session``), but the child leaves our process group only at its ``setsid``,
after the fork: a Ctrl-C in between (CPython restores the child's signal mask before it calls
``setsid``) killed it, and its reader's failure was said as "verification failed" where the
command was interrupted. ``popen_out_of_reach`` spawns it from a short-lived thread that blocks
the terminal's signals first: the child inherits that mask through ``exec``, so a signal sent in
the window stays pending and is never delivered, and once in its own session no terminal's signal
reaches it. The helpers are stopped by us (SIGKILL, their stdin closing), never by a terminal's
signal.

Every Python child of ours starts through ``python_child`` (review R9 F1, R11 G8/G9): ``python -m
mod`` (and ``-c``) put the CURRENT folder first on ``sys.path``, so a ``tb_footprint_plugin/`` or a
``json.py`` planted in a shared logdir the user stands in ran as that user. The child boots from
``-c`` code that imports nothing before it sets ``sys.path`` to the package root this process
imports from plus the absolute entries only, and starts in ``/``.

Why a thread of its own, not the caller's mask blocked and restored (review R7 F1): Python runs
signal handlers in the main thread between bytecodes, and ``signal.pthread_sigmask`` is a Python
wrapper; a handler that raises (the CLI's Ctrl-C and SIGTERM handlers do) between the block and the
restore left the caller's thread with those signals blocked for good, and every thread and child it
started later with them. The spawning thread never runs a handler and dies with its mask, so no
thread's mask is ever restored and none can leak."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import Any, Dict, List, Optional, Sequence

#: what a terminal sends its foreground process group (Ctrl-C, Ctrl-\, Ctrl-Z)
TERMINAL_SIGNALS = frozenset({signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP})


#: the boot of a Python child (``python_child``): ``sys`` is built in, so nothing is looked up on
#: ``sys.path`` before it holds absolute entries only ('' and '.' gone: the current folder) and the
#: package root — in its place when it is there already (an installed package's site-packages stays
#: after the standard library, review R12), else first (a checkout); then ``module.function(argv)``,
#: its return the exit status
_BOOT = ("import sys; root = sys.argv[1]; "
         "sys.path[:] = [p for p in sys.path if p.startswith('/')]; "
         "root in sys.path or sys.path.insert(0, root); "
         "from {module} import {function} as f; sys.exit(f(sys.argv[2:]))")


#: the folder this package is imported from (``<root>/tb_footprint_plugin/storage/spawn.py``)
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def python_child(module: str, function: str, args: Sequence[str] = (), *,
                 isolated: bool = True) -> List[str]:
    """The command line of a Python child of ours: ``module.function(argv)`` (``argv`` the list
    ``args``; its return the exit status), importing this very package from where this process did
    (a checkout, a wheel), never from the current folder. ``isolated``: ``-I`` too (no
    ``PYTHON*`` variables, no user site-packages) for a child that needs nothing beyond the
    package's own imports; the verification's reader child is not, as it imports TensorBoard from
    wherever this process does. Start it with ``cwd="/"`` and ``python_env``. ``OSError`` when
    there is no interpreter to start."""
    if not sys.executable or getattr(sys, "frozen", False):
        raise OSError(2, "no Python interpreter to start a child with")
    root = _PACKAGE_ROOT
    boot = _BOOT.format(module=module, function=function)
    return [sys.executable] + (["-I"] if isolated else []) + ["-c", boot, root] + list(args)


def python_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """This process's environment for a ``python_child``, ``PYTHONPATH`` kept to its absolute
    entries (an empty or relative one is the current folder at the child's start, where its
    ``sitecustomize`` would be looked for), with ``extra`` set (its ``PYTHONPATH`` kept alike)."""
    env = dict(os.environ, **(extra or {}))
    kept = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p.startswith("/")]
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        env.pop("PYTHONPATH", None)
    return env


def popen_out_of_reach(args: Any, **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(args, start_new_session=True, **kwargs)`` from a thread with the
    terminal's signals blocked (so in the child until its own session, and for life: it is
    stopped by us). The caller's signal mask is never changed. Popen's own errors (``OSError``)
    are raised here; the caller interrupted while the spawn finishes (Ctrl-C) gets its
    ``KeyboardInterrupt`` once the child it would not get is stopped."""
    made: List[subprocess.Popen] = []
    failed: List[BaseException] = []

    began, done = threading.Event(), threading.Event()

    def spawn() -> None:
        began.set()
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, TERMINAL_SIGNALS)  # this thread only, for its life
            made.append(subprocess.Popen(args, start_new_session=True, **kwargs))
        except BaseException as e:  # handed to the caller as it is
            failed.append(e)
        finally:
            done.set()

    try:
        threading.Thread(target=spawn, name="footprint-spawn", daemon=True).start()
        done.wait()
    except BaseException:
        # the spawn ends in moments: the child the caller will not get is stopped, not left behind
        # (Events, not join: a join interrupted once returns at once the next time). A second
        # interrupt here leaves it to end by itself: its stdin closes with its Popen.
        if began.wait(1.0):
            while not done.wait(0.05):
                pass
            _stop(made[0] if made else None)
        raise
    if failed:
        raise failed[0]
    return made[0]


def _stop(proc: Optional[subprocess.Popen]) -> None:
    if proc is None:
        return
    try:
        proc.kill()
        proc.wait()
    except OSError:
        pass


__all__ = ["TERMINAL_SIGNALS", "popen_out_of_reach", "python_child", "python_env"]
