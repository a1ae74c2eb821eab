"""The index of the vaults a logdir has used (``vaults.json`` in its state folder) when it is
damaged: set aside, never overwritten (``vaults.json.damaged-<time>``), the vault paths its bytes
still spell out merged into the new one, and what status and restore say of it. Writing the index
(``catalogue.remember_vault``) and reading it (``paths.recorded_vaults``) are elsewhere.
"""
from __future__ import annotations

import json
import os
import re
import time
from typing import List

from tb_footprint_plugin.engine import trust
from tb_footprint_plugin.storage.paths import VAULTS_NAME
from tb_footprint_plugin.storage.regular import open_regular, read_capped


#: a vault index a reduce found damaged is renamed ``vaults.json.damaged-<time>`` (kept, reported)
DAMAGED_SUFFIX = ".damaged-"
#: no vault path is longer (PATH_MAX); a longer "path" in a damaged file is not one
_MAX_PATH = 4096
_JSON_STRING = re.compile(rb'"((?:[^"\\\x00-\x1f]|\\.){1,%d})"' % _MAX_PATH)


def set_aside(path: str) -> str:
    """Keep a damaged vault index as ``<path>.damaged-<time>`` (never over an earlier one: a
    link fails when the name exists) before a merged one takes its place."""
    t = int(time.time())
    for n in range(1000):
        aside = f"{path}{DAMAGED_SUFFIX}{t + n}"
        try:
            os.link(path, aside, follow_symlinks=False)  # a planted symlink is kept as the link itself
            return aside
        except FileExistsError:
            continue
    raise FileExistsError(f"{path}: too many damaged copies set aside beside it; remove the old ones")


def vault_index_entries(path: str):
    """``(entries, damaged)`` of the vault index at ``path``: every string it lists (in order,
    none dropped for being unused now), and whether it is damaged (not UTF-8 JSON, not a list,
    unreadable). A missing file is ``([], False)``."""
    try:
        listed = trust.read_json_file(path, what="vault index")
    except FileNotFoundError:
        return [], False
    except trust.Untrusted:
        return [], True
    if not isinstance(listed, list):
        return [], True
    return [r for r in listed if isinstance(r, str)], False


def salvage_vault_paths(path: str) -> List[str]:
    """The absolute paths spelled out as JSON strings in the bytes of a damaged vault index
    (what a torn, truncated or partly overwritten file still says), in order; [] when it cannot
    be read. Only remembered: whether one is used is decided when the index is read back."""
    try:
        with open_regular(path) as f:
            raw = read_capped(f, trust.MAX_STATE_BYTES - 1)
    except OSError:
        return []
    out: List[str] = []
    for m in _JSON_STRING.finditer(raw):
        try:
            s = json.loads(b'"' + m.group(1) + b'"')
        except ValueError:  # not UTF-8, or a bad escape: not a path this tool wrote
            continue
        if isinstance(s, str) and os.path.isabs(s) and "\x00" not in s and s not in out:
            out.append(s)
    return out


def damaged_vault_indexes(state: str) -> List[str]:
    """Every vault index a reduce set aside as damaged (``vaults.json.damaged-<time>``), oldest first."""
    prefix = VAULTS_NAME + DAMAGED_SUFFIX
    try:
        names = os.listdir(state)
    except OSError:
        return []
    return [os.path.join(state, n) for n in sorted(names) if n.startswith(prefix) and n[len(prefix):].isdigit()]


def damaged_index_advice(aside: str, state: str) -> str:
    """What to do about a set-aside damaged vault index (status and restore say it)."""
    found = salvage_vault_paths(aside)
    merged = (f"the vault paths still readable in it ({', '.join(found)}) were merged into "
              f"{os.path.join(state, VAULTS_NAME)}" if found else "no vault path could be read from it")
    return (f"damaged vault index set aside by a reduce; {merged}. If a backup folder you used with "
            f"--backup-dir is missing from `tb-footprint status`, give it as --backup-dir; then delete this file")


__all__ = ["DAMAGED_SUFFIX", "damaged_index_advice", "damaged_vault_indexes", "salvage_vault_paths", "set_aside",
           "vault_index_entries"]
