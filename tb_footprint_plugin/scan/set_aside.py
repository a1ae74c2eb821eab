"""What the scan sets aside as no run's files, at any depth: a nested logdir's state folder (review
R11 G7) and a vault made inside the scanned folder for another logdir (its ``--backup-dir``: G7's
class, on a disk and a bucket alike). Their retired runs and server-side copies are keyed like runs:
taken as runs of this logdir, a reduce would move their bytes into this logdir's vault (the other
logdir's restore then finds them damaged or gone) and this logdir's purge would destroy them.

Recognised by what the tool itself writes, never by a name alone: a state folder holds a state's
files (``STATE_MARKS``), a vault's root its records folder beside its blobs or retired runs, holding
a record named as the tool names them (``VAULT_SHAPES``, ``is_manifest_name``). A user's folders
named like those stay runs.
"""
from __future__ import annotations

import os
from typing import Callable, Dict, Iterable, List, Optional

from tb_footprint_plugin.codes import SetAside
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.paths import MADE_OP_ID_RE, is_state_name


def display(path: str) -> str:
    """A printable form of a path whose name may not be valid UTF-8."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


#: what a logdir's state folder holds once a verb wrote there (a user's folder named like one
#: holds none of them)
STATE_MARKS = ("identity.json", "ops", "journal")


def nested_state_words(rel: str) -> str:
    """The scan's warning for a nested logdir's state folder it leaves out (review R11 G7)."""
    return f"a nested logdir's state at {display(rel)}: left out"


#: the shapes of a vault's root (``engine.vault``: an ``ops/`` folder of manifests, or the ``oplog/``
#: that holds them now, beside ``blobs/``, ``retired/`` or ``packs/``; a bucket's vault of
#: server-side copies, ``engine.bucket_state``: ``manifests/`` beside ``blobs/``, its copies keyed
#: like runs): the folder of its records, what it sits beside
VAULT_SHAPES = (("ops", ("blobs", "retired", "packs")), ("oplog", ("blobs", "retired", "packs")),
                ("manifests", ("blobs",)))


def vault_manifests(subdirs: Iterable[str]) -> List[str]:
    """The records folders a folder holding ``subdirs`` would have as a vault's root
    (``VAULT_SHAPES``; none: not of a vault's shape): a vault once one holds a record."""
    have = set(subdirs)
    return [records for records, beside in VAULT_SHAPES if records in have and any(b in have for b in beside)]


def is_vault_root(subdirs: Iterable[str], records_in: Callable[[str], Iterable[str]]) -> bool:
    """The one rule of a vault's root, however its folder was listed: of ``VAULT_SHAPES``' shape
    (``subdirs``), a records folder holding a record named as the tool names them
    (``is_manifest_name``; ``records_in(folder)``: the names in that records folder)."""
    return any(is_manifest_name(records, n) for records in vault_manifests(subdirs) for n in records_in(records))


def holding_words(rel: str) -> str:
    """Why a retirement refuses a run holding another logdir's state or vault at ``rel``."""
    return (f"{display(rel)}: another logdir's state or vault inside the run (its backups, perhaps their only "
            "copies): a retirement never moves it; left alone")


def vault_words(rel: str) -> str:
    """The scan's warning for a vault it leaves out, kept inside the folder it scans (G7's class:
    another logdir's ``--backup-dir`` made there, its retired runs and copies keyed like runs)."""
    return (f"a vault at {display(rel)} (another logdir's backups, given as its --backup-dir): left out; "
            "reduce, restore and purge it from the logdir that made it")


def set_aside_entry(rel: str, run: Optional[str], code: SetAside) -> Dict[str, Optional[str]]:
    """A folder left out as another logdir's, as a value (``LogdirFootprint.set_aside``): ``path``
    (relative to the logdir), ``run`` (the run whose folder holds it, or None), ``code`` and ``why``
    (the warning's words)."""
    words = nested_state_words(rel) if code is SetAside.NESTED_STATE else vault_words(rel)
    return {"path": rel, "run": run, "code": code.value, "why": words}


def set_aside_in_listing(keys: Iterable[str], run: str) -> Optional[str]:
    """The first folder (relative to the logdir) among the listed ``keys`` of ``run`` (keys relative
    to the logdir) that a bucket's scan sets aside: a state folder at any depth, or a vault's root
    (``VAULT_SHAPES`` holding a record), the run's own folder included; None when there is none.
    What a bucket retirement asks of the listing it would move (review R14 G1)."""
    prefix = "" if run == "." else run.rstrip("/") + "/"
    tree: Dict[str, tuple] = {}
    for k in keys:
        parts = (k[len(prefix):] if k.startswith(prefix) else k).split("/")
        for i, c in enumerate(parts[:-1]):
            if is_state_name(c):
                return prefix + "/".join(parts[:i + 1])
        for i in range(len(parts) - 1):
            tree.setdefault("/".join(parts[:i]), (set(), set()))[0].add(parts[i])
        tree.setdefault("/".join(parts[:-1]), (set(), set()))[1].add(parts[-1])
    for folder, (subdirs, _names) in sorted(tree.items()):
        if is_vault_root(subdirs, lambda r: tree.get(f"{folder}/{r}" if folder else r, (set(), set()))[1]):
            return (prefix + folder) if folder else (run if run != "." else ".")
    return None


def is_state_folder(path: str) -> bool:
    """True when the folder at ``path`` (not followed) holds what a state folder holds
    (``STATE_MARKS``): a nested logdir's state, left out as the logdir's own is."""
    for mark in STATE_MARKS:
        try:
            os.lstat(os.path.join(path, mark))
            return True
        except OSError:
            continue
    return False


def is_manifest_name(folder: str, name: str) -> bool:
    """Whether ``name``, found in a vault-shaped folder's records folder ``folder``
    (``vault_manifests``), is one of a vault's records: ``<op id>.json`` in ``ops/`` or
    ``manifests/``, ``segments`` in ``oplog/`` (a user's folders named like those hold none)."""
    if folder == "oplog":
        return name == "segments"
    return name.endswith(".json") and MADE_OP_ID_RE.match(name[:-len(".json")]) is not None


def holds_vault(dirpath: str, subdirs: Iterable[str]) -> bool:
    """Whether the folder at ``dirpath`` (its folders: ``subdirs``, not followed) is a vault's
    root: of ``VAULT_SHAPES``' shape, its records folder holding a record (``is_manifest_name``;
    one listing more, only for a folder of that shape)."""
    def records_in(records: str) -> List[str]:
        try:
            with fsops.scandir(os.path.join(dirpath, records)) as it:
                return [e.name for e in it]
        except OSError:
            return []

    return is_vault_root(subdirs, records_in)


__all__ = ["STATE_MARKS", "VAULT_SHAPES", "display", "holding_words", "holds_vault", "is_manifest_name",
           "is_state_folder", "is_vault_root",
           "nested_state_words", "set_aside_entry", "set_aside_in_listing", "vault_manifests", "vault_words"]
