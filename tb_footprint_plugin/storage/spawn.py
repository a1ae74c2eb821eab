"""Helper processes spawned out of the terminal's reach (review R16 F13, and the CI of ecdb86f).

A terminal's Ctrl-C sends SIGINT to its whole foreground process group. The verification's helper
processes (TensorBoard's Rust data server, the Python loader child) are started in a session of
their own (``start_new_session``), but the child leaves our process group only at its ``setsid``,
after the fork: a Ctrl-C in between (CPython restores the child's signal mask before it calls
``setsid``) killed it, and its reader's failure was said as "verification failed" where the
command was interrupted. ``out_of_the_terminals_reach`` blocks the terminal's signals in the
spawning thread across the spawn: the child inherits that mask through ``exec``, so a signal
sent in the window stays pending and is never delivered, and once in its own session no
terminal's signal reaches it. The helpers are stopped by us (SIGKILL, their stdin closing),
never by a terminal's signal. Only the calling thread's mask changes, and only for the spawn: a
signal meant for this process is delivered once it is restored."""
from __future__ import annotations

import contextlib
import signal
from typing import Iterator

#: what a terminal sends its foreground process group (Ctrl-C, Ctrl-\, Ctrl-Z)
TERMINAL_SIGNALS = frozenset({signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP})


@contextlib.contextmanager
def out_of_the_terminals_reach() -> Iterator[None]:
    """Around a ``Popen(..., start_new_session=True)``: the terminal's signals blocked in this
    thread (and so in the child, for life) until the spawn returned."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, TERMINAL_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


__all__ = ["TERMINAL_SIGNALS", "out_of_the_terminals_reach"]
