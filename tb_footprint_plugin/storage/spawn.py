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
``json.py`` planted in a shared logdir the user stands in ran as that user. The child runs isolated
(``-I``) on the absolute entries of this process's own ``sys.path`` (the package root among them),
and starts in ``/``.

Why a thread of its own, not the caller's mask blocked and restored (review R7 F1): Python runs
signal handlers in the main thread between bytecodes, and ``signal.pthread_sigmask`` is a Python
wrapper; a handler that raises (the CLI's Ctrl-C and SIGTERM handlers do) between the block and the
restore left the caller's thread with those signals blocked for good, and every thread and child it
started later with them. The spawning thread never runs a handler and dies with its mask, so no
thread's mask is ever restored and none can leak."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from typing import Any, Dict, List, Optional, Sequence

#: what a terminal sends its foreground process group (Ctrl-C, Ctrl-\, Ctrl-Z)
TERMINAL_SIGNALS = frozenset({signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP})


#: the boot of a Python child (``python_child``), run isolated (``-I``: no current folder, no
#: ``PYTHON*`` variables, no user site-packages on ``sys.path``, so the ``json`` it imports is the
#: standard library's): ``sys.path`` becomes the one its parent gave, then ``module.function(argv)``,
#: its return the exit status
_BOOT = ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
         "from {module} import {function} as f; sys.exit(f(sys.argv[2:]))")


#: the folder this package is imported from (``<root>/tb_footprint_plugin/storage/spawn.py``)
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _started_by_folder() -> bool:
    """Whether this interpreter put the folder it started in first on ``sys.path``: ``python -m``
    (and ``-c``: there as '') unless ``-P``/``-I``/``PYTHONSAFEPATH``; Jupyter's kernels start as
    ``python -m ipykernel_launcher``, a TensorBoard as ``python -m tensorboard.main``."""
    if getattr(sys.flags, "safe_path", False) or sys.flags.isolated:
        return False
    for a in list(getattr(sys, "orig_argv", None) or [])[1:]:
        if not a.startswith("-") or a == "-":
            return False  # a script (its own folder goes first) or stdin
        if a.startswith(("-m", "-c")):
            return True
    return False


def _here() -> Optional[str]:
    try:
        return os.path.realpath(os.getcwd())
    except OSError:
        return None


#: the folder this process started in, when that put it first on ``sys.path`` (``python -m``): read
#: at import, which comes before any ``chdir`` of ours (review R13 F1)
_STARTED_IN = _here() if _started_by_folder() else None


def child_path() -> List[str]:
    """The ``sys.path`` a child of ours runs on: this process's own absolute entries, in their
    order (an installed package's site-packages after the standard library, review R12; numpy or
    TensorBoard found where this process found them, a PYTHONPATH of an HPC ``module load`` or
    user site-packages included: review R11's note on 5a25d36), never '' or a relative one (the
    current folder), never the folder ``python -m`` started this process in nor the current one
    (review R13 F1: ``python -m tensorboard.main --logdir .`` or a Jupyter kernel started in a shared
    logdir put it first, absolute, and a package planted there since ran in every child), and the
    package root first when no entry holds it (a checkout)."""
    standing = {d for d in (_STARTED_IN, _here()) if d is not None}
    path = [p for p in sys.path if isinstance(p, str) and p.startswith("/")
            and (p == _PACKAGE_ROOT or os.path.realpath(p) not in standing)]
    return path if _PACKAGE_ROOT in path else [_PACKAGE_ROOT] + path


def python_child(module: str, function: str, args: Sequence[str] = ()) -> List[str]:
    """The command line of a Python child of ours: ``module.function(argv)`` (``argv`` the list
    ``args``; its return the exit status), importing this very package from where this process did
    (a checkout, a wheel) and everything else as this process does (``child_path``), never from
    the current folder nor from a ``PYTHONPATH`` set since (review R9 F1, R11 G8/G9). Start it with
    ``cwd="/"``. ``OSError`` when there is no interpreter to start."""
    if not sys.executable or getattr(sys, "frozen", False):
        raise OSError(2, "no Python interpreter to start a child with")
    boot = _BOOT.format(module=module, function=function)
    return [sys.executable, "-I", "-c", boot, json.dumps(child_path())] + list(args)


def python_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """This process's environment for a ``python_child`` (which ignores ``PYTHON*`` itself) and
    whatever it starts, ``PYTHONPATH`` kept to its absolute entries (an empty or relative one is the
    current folder), with ``extra`` set (its ``PYTHONPATH`` kept alike)."""
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


__all__ = ["TERMINAL_SIGNALS", "child_path", "popen_out_of_reach", "python_child", "python_env"]
