"""A crash at one instant, simulated in process: ``Killed`` is raised where a SIGKILL would land, so
nothing after that instant runs (a ``BaseException``: no ``except Exception`` of the code under test
catches it), and the state left on disk is what the next start must settle."""
import contextlib

import pytest

from tb_footprint_plugin.engine import swap


class Killed(BaseException):
    """A SIGKILL at that instant: nothing after it runs."""


def kill() -> None:
    """A failpoint action (``faults.arm(name, kill)``): killed at that step."""
    raise Killed()


@contextlib.contextmanager
def killed_after_a_displacing_put_back():
    """Kill the process right after the first put-back that displaced newer bytes (a put-back
    returning a ``displaced`` record with a digest): its record is written, nothing after runs.
    Yields the list of the displaced records seen; the block must end in ``Killed``."""
    real, seen = swap.put_back, []

    def put_back_then_killed(*a, **kw):
        d = real(*a, **kw)
        if d and d.get("sha256"):
            seen.append(d)
            raise Killed()
        return d

    # a patch of its own, undone on leaving: the test's monkeypatch is not touched
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(swap, "put_back", put_back_then_killed)
        with pytest.raises(Killed):
            yield seen
