"""How a transaction swaps on a store, chosen from what the store declares (issue #26: one
transaction "whose swap strategy follows the store's capabilities").

``swap_strategy(Capabilities)`` is the one rule; an engine asks it for the store its run lives on
(the disk's ``transaction.LocalReduce`` for a folder's, a bucket's ``bucket_rewrite.ObjectReduce``
for the logdir's object store) and never branches on which kind of store that is:

- **replace**: ``RENAME`` where the store renames atomically (each new file renamed over its
  original: one step, a crash leaves one or the other); else ``COPY_DELETE``: the new bytes
  copied over the original, then the source deleted (a crash in between leaves both, never
  none; recovery finishes the swap from its journal record);
- **version_check** (copy and delete only): each copy and delete conditional on the version the
  original was backed up at, where the store has version tokens; a store without them gives no
  such guard, and an engine that needs one refuses the run (``refusal``);
- **link_backups**: a backup may be a hard link of its original (no bytes copied) where the store
  has hard links; else it is a copy;
- **fsync**: whether a write is durable only once fsynced (the file, then its folder), or once
  the store acknowledged it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Optional

from tb_footprint_plugin.storage.store import Capabilities

#: ``SwapStrategy.replace``: each new file renamed over its original
RENAME = "rename"
#: ``SwapStrategy.replace``: each new file copied over its original, then its source deleted
COPY_DELETE = "copy_delete"


@dataclass(frozen=True)
class SwapStrategy:
    """How a transaction puts its new files in place and keeps its backups (the module doc)."""

    replace: str
    version_check: bool
    link_backups: bool
    fsync: bool

    @property
    def renames(self) -> bool:
        """Whether a new file takes its original's place by one atomic rename."""
        return self.replace == RENAME


def swap_strategy(caps: Capabilities) -> SwapStrategy:
    """The swap a transaction makes on a store of these capabilities (the module doc)."""
    renames = caps.rename_atomic
    return SwapStrategy(replace=RENAME if renames else COPY_DELETE,
                        version_check=not renames and caps.versions,
                        link_backups=caps.hard_link,
                        fsync=caps.fsync)


def refusal(strategy: SwapStrategy, implemented: Collection[str], *, needs_version_check: bool = False,
            where: str = "this store") -> Optional[str]:
    """Why an engine that implements the swaps ``implemented`` (and, with ``needs_version_check``,
    only guarded by versions) cannot swap as ``strategy`` says on ``where``; None when it can.
    Asked before anything is written: a run refused here is left exactly as it was."""
    if strategy.replace not in implemented:
        return (f"{where} swaps by {strategy.replace.replace('_', ' + ')}, which this engine does not do "
                f"(it does {', '.join(sorted(i.replace('_', ' + ') for i in implemented))}); nothing was changed")
    if needs_version_check and not strategy.version_check:
        return (f"{where} has no version tokens to make the swap conditional on the backed-up bytes; "
                "nothing was changed")
    return None


__all__ = ["COPY_DELETE", "RENAME", "SwapStrategy", "refusal", "swap_strategy"]
