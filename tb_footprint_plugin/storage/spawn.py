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

Why a thread of its own, not the caller's mask blocked and restored (review R7 F1): Python runs
signal handlers in the main thread between bytecodes, and ``signal.pthread_sigmask`` is a Python
wrapper; a handler that raises (the CLI's Ctrl-C and SIGTERM handlers do) between the block and the
restore left the caller's thread with those signals blocked for good, and every thread and child it
started later with them. The spawning thread never runs a handler and dies with its mask, so no
thread's mask is ever restored and none can leak."""
from __future__ import annotations

import signal
import subprocess
import threading
from typing import Any, List, Optional

#: what a terminal sends its foreground process group (Ctrl-C, Ctrl-\, Ctrl-Z)
TERMINAL_SIGNALS = frozenset({signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP})


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


__all__ = ["TERMINAL_SIGNALS", "popen_out_of_reach"]
