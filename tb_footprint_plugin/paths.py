"""Where the tool keeps its state, and the path checks every writer goes through."""
from __future__ import annotations

import os
from typing import Optional

STATE_DIR_NAME = ".tb-footprint"


def state_dir(logdir: str) -> str:
    """``<logdir>/.tb-footprint``: journal, scan cache, ledger, history and lock live here.

    Nothing in it has ``tfevents`` in its name or a ``plugins/profile`` path, so neither
    TensorBoard nor xprof ever takes it for a run.
    """
    return os.path.join(os.path.abspath(logdir), STATE_DIR_NAME)


def vault_dir(logdir: str, backup_dir: Optional[str] = None) -> str:
    """The backup vault: ``backup_dir`` if given, else the state directory."""
    return os.path.abspath(backup_dir) if backup_dir else state_dir(logdir)


def is_within(path: str, root: str) -> bool:
    """True when ``path`` is ``root`` or below it (both made absolute, no symlink resolution)."""
    path, root = os.path.abspath(path), os.path.abspath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def real_within(path: str, root: str) -> bool:
    """True when ``path`` resolves (following every symlink) to somewhere under ``root``."""
    return is_within(os.path.realpath(path), os.path.realpath(root))
