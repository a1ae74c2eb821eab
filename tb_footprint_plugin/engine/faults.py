"""Failpoints: named places in the transaction where tests inject a failure or a SIGKILL.

Set ``TB_FOOTPRINT_FAILPOINTS="step=action[,step=action]"`` with action one of ``raise``,
``enospc``, ``eacces`` or ``kill`` (SIGKILL to the own process, as a power cut would stop it
at that instant). Unset, ``hit`` is one dictionary lookup. Tests may also call ``arm``.
"""
from __future__ import annotations

import errno
import os
import signal
from typing import Callable, Dict, Union

_armed: Dict[str, Union[str, Callable[[], None]]] = {}


class InjectedFault(RuntimeError):
    """The failure a ``raise`` failpoint throws."""


def _from_env() -> Dict[str, str]:
    spec = os.environ.get("TB_FOOTPRINT_FAILPOINTS", "")
    out = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, action = part.partition("=")
        out[name] = action or "raise"
    return out


def arm(name: str, action: Union[str, Callable[[], None]] = "raise") -> None:
    """Make failpoint ``name`` fire (tests); a callable is called there instead."""
    _armed[name] = action


def disarm_all() -> None:
    _armed.clear()


def hit(name: str) -> None:
    """Fire failpoint ``name`` if it is armed."""
    action = _armed.get(name)
    if action is None and "TB_FOOTPRINT_FAILPOINTS" in os.environ:
        action = _from_env().get(name)
    if action is None:
        return
    if callable(action):
        action()
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "enospc":
        raise OSError(errno.ENOSPC, f"No space left on device (injected at {name})")
    if action == "eacces":
        raise PermissionError(errno.EACCES, f"Permission denied (injected at {name})")
    raise InjectedFault(f"injected failure at {name}")
