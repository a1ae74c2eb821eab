"""Where the tool keeps its state, and the path checks every writer goes through."""
from __future__ import annotations

import hashlib
import json
import os
from typing import List, Optional

STATE_DIR_NAME = ".tb-footprint"
#: the demo's own record of the files it wrote (at the top of a demo logdir): bookkeeping, no run's
DEMO_MARKER = ".footprint-demo"
VAULTS_NAME = "vaults.json"  # vaults outside the state directory that a logdir's operations used


def state_dir(logdir: str) -> str:
    """``<logdir>/.tb-footprint``: journal, scan cache, ledger, history and lock live here.

    Nothing in it has ``tfevents`` in its name or a ``plugins/profile`` path, so neither
    TensorBoard nor xprof ever takes it for a run.
    """
    return os.path.join(os.path.abspath(logdir), STATE_DIR_NAME)


def cache_dir(logdir: str) -> str:
    """Where the scan cache of ``logdir`` lives: its state directory once the user changed
    something there (a reduce made it), otherwise the user's cache directory
    (``$XDG_CACHE_HOME`` or ``~/.cache``, ``tb-footprint/<hash of the logdir's path>``), so that
    opening a logdir in TensorBoard writes nothing into it."""
    state = state_dir(logdir)
    if os.path.isdir(state):
        return state
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = hashlib.sha256(os.path.realpath(logdir).encode("utf-8", "surrogateescape")).hexdigest()[:24]
    return os.path.join(os.path.abspath(base), "tb-footprint", key)


def vault_dir(logdir: str, backup_dir: Optional[str] = None) -> str:
    """The backup vault: ``backup_dir`` if given, else the state directory."""
    return os.path.abspath(backup_dir) if backup_dir else state_dir(logdir)


def recorded_vaults(state: str) -> List[str]:
    """The vault roots listed in ``<state>/vaults.json`` (empty when missing or unreadable)."""
    try:
        with open(os.path.join(state, VAULTS_NAME), "r", encoding="utf-8") as f:
            roots = json.load(f)
    except (OSError, ValueError):
        return []
    return [r for r in roots if isinstance(r, str)] if isinstance(roots, list) else []


def is_within(path: str, root: str) -> bool:
    """True when ``path`` is ``root`` or below it (both made absolute, no symlink resolution)."""
    path, root = os.path.abspath(path), os.path.abspath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def real_within(path: str, root: str) -> bool:
    """True when ``path`` resolves (following every symlink) to somewhere under ``root``."""
    return is_within(os.path.realpath(path), os.path.realpath(root))


def check_no_symlink(root: str, rel: str) -> None:
    """Refuse (``ValueError`` naming it) when a directory on the way from ``root`` to ``rel``
    is a symlink: every writer calls this right before it acts, so a folder swapped for a link
    after the scan cannot lead a write or a delete out of the logdir."""
    cur = os.path.abspath(root)
    parts = [p for p in rel.replace(os.sep, "/").split("/") if p not in ("", ".")]
    for part in parts[:-1]:
        if part == "..":
            raise ValueError(f"{rel}: leads out of {root}")
        cur = os.path.join(cur, part)
        if os.path.islink(cur):
            raise ValueError(f"{rel}: {os.path.relpath(cur, root)} is a symlink; refusing to follow it")
