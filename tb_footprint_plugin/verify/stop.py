"""A verification its caller stops (a cancel, Ctrl-C, a run's timeout) ends within a moment.

The caller passes a plain ``should_stop() -> bool`` (the engine's cancel token, seen from below:
verify never imports the engine). ``Stop`` looks at it at the verification's natural points —
between reader passes, between the route crawl's responses, while waiting on a thread, a data
server or the Python loader's child — and raises ``Stopped`` there. What cannot look (a data
server loading, a gRPC call, the loader's child reading) is ended from outside: while a
verification runs, a watcher thread asks ``should_stop`` every ``POLL_S`` and, the first time it
says yes, runs what the verification registered (``on_stop``: close a data server's channel,
kill the loader's child, end the crawl's groups), so every wait on them ends at once, as a
failure the verification never reports: once stopped it raises ``Stopped`` instead of any verdict
(``verify_reduction``'s last look).
"""
from __future__ import annotations

import concurrent.futures
import threading
from typing import Any, Callable, List, Optional

#: ``should_stop()``: True once the caller wants the verification to end (it is asked often:
#: cheap and thread-safe)
ShouldStop = Callable[[], bool]

#: Seconds between two looks while waiting (a thread, a queue) and the watcher's period.
POLL_S = 0.05


class Stopped(Exception):
    """The caller's ``should_stop`` said so: the verification ended without a verdict."""


class Stop:
    """``should_stop`` looked at and acted on (the module doc). ``Stop(None)`` never stops."""

    def __init__(self, should_stop: Optional[ShouldStop] = None) -> None:
        self._ask = should_stop
        self._seen = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: List[Callable[[], Any]] = []
        self._fired = False
        self._done = threading.Event()
        self._watcher: Optional[threading.Thread] = None

    @property
    def active(self) -> bool:
        """Whether a caller can stop this verification at all."""
        return self._ask is not None

    def stopping(self) -> bool:
        """Whether the caller wants the verification to end (asked now; once yes, always)."""
        if self._seen.is_set():
            return True
        if self._ask is not None and self._ask():
            self._seen.set()
            self._fire()
            return True
        return False

    def check(self) -> None:
        """``Stopped`` if the caller wants the verification to end."""
        if self.stopping():
            raise Stopped("the verification was stopped by its caller")

    def result(self, future: "concurrent.futures.Future") -> Any:
        """``future.result()``, looking at ``should_stop`` while it waits (``Stopped``)."""
        if not self.active:
            return future.result()
        while True:
            self.check()
            try:
                return future.result(timeout=POLL_S)
            except concurrent.futures.TimeoutError:
                continue

    def on_stop(self, callback: Callable[[], Any]) -> None:
        """Run ``callback`` (from any thread, once) when the caller wants the verification to end:
        what ends a wait that cannot look itself. Run at once if it is ending already."""
        if not self.active:
            return
        with self._lock:
            if not self._fired:
                self._callbacks.append(callback)
                return
        _call(callback)

    def _fire(self) -> None:
        with self._lock:
            if self._fired:
                return
            self._fired = True
            callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            _call(cb)

    # -- the watcher, for the verification's life ------------------------------------------------
    def __enter__(self) -> "Stop":
        if self.active and self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, name="footprint-verify-stop", daemon=True)
            self._watcher.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        if self._watcher is not None:
            self._watcher.join()
            self._watcher = None
        with self._lock:
            self._callbacks = []  # what they would end is closed by now

    def _watch(self) -> None:
        while not self._done.wait(POLL_S):
            if self.stopping():
                return


def _call(callback: Callable[[], Any]) -> None:
    try:
        callback()
    except Exception:  # noqa: BLE001 - ending a helper that ended already: nothing to say
        pass


#: the stop of a verification nobody can stop
NEVER = Stop(None)

__all__ = ["NEVER", "POLL_S", "ShouldStop", "Stop", "Stopped"]
