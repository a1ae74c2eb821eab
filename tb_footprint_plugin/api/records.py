"""What the vault and the change log say, read-only: operations and their manifests (a bucket's
in the local shape), ``status`` (and its ``kept_blobs`` alone), the tab's ``disk_numbers`` and
``history``; each from the logdir's engine (``engine.front``).
"""
from __future__ import annotations

from typing import List, Optional

from tb_footprint_plugin.engine.front import open_engine
from tb_footprint_plugin.engine.history import finite


def operation(logdir: str, op_id: str, backup_dir: Optional[str] = None) -> dict:
    """The full manifest of one operation (files, plan, verification with scalar series)."""
    return open_engine(logdir, backup_dir).operation(op_id)


def operations(logdir: str, run: Optional[str] = None, backup_dir: Optional[str] = None) -> List[dict]:
    """Every operation's manifest (newest first), optionally for one run."""
    return open_engine(logdir, backup_dir).operations(run)


def status(logdir: str, backup_dir: Optional[str] = None) -> dict:
    """Unfinished operations, damage (``problems``, with codes), late writes salvaged, the batch
    ledger, ``batch`` (every ledger of the logdir — one per shard — merged into one view: per run
    its state, who did it and its bytes; ``engine.ledger.merged``), the vault and the operations it holds; ``settle_command`` says what settles them.
    ``kept_blobs``: every blob a restore or rollback kept in the vault in a file's place (``path``,
    ``blob``, ``holds``, ``late_records`` and ``late_records_file`` when its records are back in
    the run, ``bring_back``: the command that copies it out, ``code``). ``disk_in_use_bytes``,
    ``freed_now_bytes`` and ``freed_after_purge_bytes``: the tab's ``disk_numbers``, counted once
    by the same rule (a bucket's in what the store holds, as there). Changes nothing."""
    return open_engine(logdir, backup_dir).status()


def kept_blobs(logdir: str, backup_dir: Optional[str] = None,
               manifests: Optional[List[dict]] = None) -> List[dict]:
    """``status``'s ``kept_blobs`` alone (the same entries), without the rest of ``status``: no
    journal, change log, ledger or walk of the disk is read for it. ``manifests``: what
    ``operations(logdir, backup_dir=backup_dir)`` just returned (the tab's Operations page hands
    it the manifests it read), else they are read here. Changes nothing."""
    return open_engine(logdir, backup_dir).kept_blobs(manifests)


def disk_numbers(logdir: str, backup_dir: Optional[str] = None) -> dict:
    """The header numbers of the tab (#27.4), counted as ``status`` and ``history`` count them:
    ``disk_in_use_bytes`` (logdir + vaults now, ``engine.usage``), ``freed_now_bytes`` (what the
    verified reductions not restored freed on disk as things stand, ``usage.freed_by_op``: ~0 while
    hard-linked backups are kept) and ``freed_after_purge_bytes`` (what purging every kept backup
    frees on top). A bucket's ``freed_now_bytes`` is counted in what the store holds: what its
    logdir lost beyond the copies its vault keeps until purge (``usage.bucket_freed_by_op``). Walks
    the logdir and its vaults; changes nothing."""
    return open_engine(logdir, backup_dir).disk_numbers()


def history(logdir: str, backup_dir: Optional[str] = None, *, newest: Optional[int] = None) -> List[dict]:
    """The change log, oldest first. Each reduce entry says where its backup is now
    (``backup``: ``kept``, ``purged`` or ``released`` — dropped by a verified restore — or ``none``)
    and ``removed_from_logdir_bytes``, and how much of that is freed on the logdir's disk now
    (``freed_now_bytes``: ~0 while a hard-linked backup is kept) and after ``purge``
    (``freed_after_purge_bytes``), as things stand when read; purge entries carry ``freed`` (bytes freed on disk); a restore
    (or rolled-back reduce) that kept bytes found in a file's place carries ``kept_blobs`` (as in
    ``status``). Every entry carries ``code``: the outcome's code where its operation recorded one
    (a rolled-back reduce's failure, a restore that kept bytes in the vault), else None.
    ``newest``: only the newest that many (``history_page``)."""
    return history_page(logdir, backup_dir, newest=newest)["entries"]


def history_page(logdir: str, backup_dir: Optional[str] = None, *, newest: Optional[int] = None) -> dict:
    """``entries``: ``history``'s (all, or the newest ``newest``, oldest first) and ``total``: how
    many entries the change log holds in all. A local logdir's newest are read a block of the log
    at a time, holding only ``newest`` entries, and only those are given their backup state (the
    tab's Activity page at 100,000 runs, issue #28), and only the manifests of the entries shown
    are read; a bucket's listing of its manifests and only those that can hold the newest entries
    (their objects' dates tell: ``engine.bucket_history``), into a bounded heap of the newest, and
    its ``total`` counts each manifest not read as one entry (its restore and purge uncounted).
    ``total_exact``: False when ``total`` is such a lower bound (the tab then says "at least")."""
    entries, total, exact = open_engine(logdir, backup_dir, lazy=True).history_page(newest)
    # lines and manifests are untrusted: a number that is not finite is none (``history.finite``:
    # no NaN or Infinity token a browser's JSON.parse refuses), a code a string or nothing
    entries = [finite(e) for e in entries]
    for e in entries:
        e["code"] = e.get("code") if isinstance(e.get("code"), str) else None
    return {"entries": entries, "total": total, "total_exact": exact}


def bring_back(logdir: str, op_id: str, path: str, backup_dir: Optional[str] = None) -> dict:
    """Copy the original that operation ``op_id``'s restore left in a bucket logdir's vault at
    ``path`` (a ``kept_blobs`` row coded ``not_restored``) out beside it, to the key that row
    names: create-only, checked; the vault is left as it is. ``backup_dir``: the local folder
    the logdir's backups are blobs in, as given to reduce and retire (a server-side copy needs
    none). Returns ``{"path", "to", "bytes"}``. A folder logdir's row copies with ``cp``
    (``ValueError`` here: nothing to stream). Failures raise with a code (``not_found``,
    ``backup_damaged``, ``already_exists``, ``restore_blocked``)."""
    return open_engine(logdir, backup_dir).bring_back(op_id, path)
