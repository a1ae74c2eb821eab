"""Which runs a selector names: the one rule of every verb that takes runs (scan, plan, reduce,
verify, restore, retire; the CLI, the API and the tab alike).

A run is selected by its exact name (as TensorBoard shows it, ``a/b/train``) or by a glob on
that name, matched as ``.gitignore`` and a shell's ``rm -r`` do: ``*``, ``?`` and ``[...]`` stay
inside one ``/``-separated part, ``**`` as a whole part spans any number of parts (none
included), and a glob that matches a folder takes the runs inside it. So ``sweep/*`` is
``sweep/lr1`` and the runs below it (``sweep/lr1/eval``), ``*`` is every run, ``**/eval`` is
every run named ``eval`` at any depth, and ``*/eval`` only ``x/eval`` (not ``x/y/eval``).
Before, ``*`` crossed ``/`` anywhere in the glob (Python's ``fnmatch``): a glob that selects
nothing now but would have then is named in the error with its ``**`` form.
"""
from __future__ import annotations

import fnmatch
import functools
import re
from typing import Iterable, List, Optional, Sequence, Tuple


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> "re.Pattern[str]":
    parts = pattern.split("/")
    out = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            out.append(".*" if last else "(?:[^/]*/)*")
        else:
            out.append(_part(part) + ("" if last else "/"))
    return re.compile("".join(out) + r"\Z", re.S)


def _part(part: str) -> str:
    """One ``/``-free part of a glob as a regular expression (``fnmatch``'s syntax, never
    matching ``/``; ``**`` inside a part is a plain ``*``)."""
    i, n, res = 0, len(part), []
    while i < n:
        c = part[i]
        i += 1
        if c == "*":
            while i < n and part[i] == "*":
                i += 1
            res.append("[^/]*")
        elif c == "?":
            res.append("[^/]")
        elif c == "[":
            j = i
            if j < n and part[j] == "!":
                j += 1
            if j < n and part[j] == "]":
                j += 1
            while j < n and part[j] != "]":
                j += 1
            if j >= n:
                res.append(r"\[")
                continue
            stuff, i = part[i:j], j + 1
            negate = stuff.startswith("!")
            if negate:
                stuff = stuff[1:]
            stuff = stuff.replace("\\", r"\\")
            if not negate and stuff.startswith("^"):
                stuff = "\\" + stuff
            res.append("[" + ("^/" if negate else "") + stuff + "]")
        else:
            res.append(re.escape(c))
    return "".join(res)


def is_glob(text: str) -> bool:
    """True when ``text`` has glob characters (else it can only name a run exactly)."""
    return any(c in text for c in "*?[")


def matches(name: str, pattern: str) -> bool:
    """``name`` (a run name) is ``pattern``, matches it as a path-wise glob, or lies in a folder
    that matches it (module docstring)."""
    if name == pattern:
        return True
    rx = _compiled(pattern)
    parts = name.split("/")
    return any(rx.match("/".join(parts[:k])) is not None for k in range(len(parts), 0, -1))


def matches_any(name: str, patterns: Iterable[str]) -> bool:
    return any(matches(name, p) for p in patterns)


def select(names: Sequence[str], runs: Optional[Sequence[str]] = None,
           run_glob: Optional[str] = None) -> Tuple[List[str], List[str]]:
    """``(selected, missing)``: the names that every given selector admits (``runs``: exact names;
    ``run_glob``: a glob), in their order; ``missing`` lists each name and the glob that match no
    run at all, each with a hint when the old ``fnmatch`` rule would have matched it."""
    known, wanted = set(names), (set(runs) if runs is not None else None)  # not O(runs x names)
    missing = [r for r in (runs or []) if r not in known or not r.strip()]
    # a blank glob is not "no glob": read so, `--glob "$UNSET"` would select every run
    if run_glob is not None and (not run_glob.strip() or not any(matches(n, run_glob) for n in names)):
        missing.append(run_glob)
    chosen = [n for n in names if (wanted is None or n in wanted) and (not run_glob or matches(n, run_glob))]
    return chosen, missing


def missing_hint(pattern: str, names: Sequence[str]) -> str:
    """What to write instead of a glob that matches nothing because ``*`` stops at ``/`` now."""
    if not is_glob(pattern) or not any(fnmatch.fnmatchcase(n, pattern) for n in names):
        return ""
    wider = "/".join("**" if p == "*" else p for p in pattern.split("/"))
    wider = wider if wider != pattern else pattern.replace("*", "**")
    return f" (`*` stops at `/`: {wider!r} also matches runs in sub-folders)"
