"""The check page's sample, one rule for every store: one image or audio sample of an operation's
run as the dashboard showed it before the reduction or shows it after.

Which event files make each side is decided here once (``sides``):

* *after*: the run's event files as they are now, directly in its folder (as TensorBoard reads a
  run: none of a deeper folder); refused ``restored`` once the reduction was restored (the
  reduced run exists no more);
* *before*: the same files, less those the reduction created (a disk manifest's ``created``, a
  bucket manifest's renamed entries' ``final``), with each backed-up original of a direct event
  file in its path's place (the manifest's ``files``, untrusted: a name outside the run's folder is
  never read); refused ``purged`` when the manifest says its backups were purged; after a restore
  the run holds the originals again, so it is read as it is.

A store says only where the bytes come from (a ``Source``): the run's event files now, which
backup it holds, and local paths of both for the sample reader (a disk's files and vault blobs:
``engine.local_sample``; a bucket's objects, server-side copies or blobs through its downloads:
``engine.bucket_sample``).
"""
from __future__ import annotations

import abc
from typing import Any, Callable, ContextManager, Dict, Iterable, List, Set, Tuple

from tb_footprint_plugin.engine.manifest import renamed, run_prefix


class SampleUnavailable(LookupError):
    """A sample the check page asked for cannot be shown; ``code`` says why (for programs)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def direct_event(name: str, prefix: str) -> bool:
    """Whether ``name`` (relative to the logdir) is an event file directly in the run whose names
    start with ``prefix``, as TensorBoard reads a run."""
    rest = name[len(prefix):]
    return name.startswith(prefix) and bool(rest) and "/" not in rest and "tfevents" in rest


def created_by(m: dict) -> Set[str]:
    """The names the reduction created (not there before it): a disk manifest's ``created``
    entries, a bucket manifest's renamed entries' ``final`` (untrusted: strings only)."""
    out = {c.get("path") for c in m.get("created") or [] if isinstance(c, dict)} \
        if isinstance(m.get("created"), list) else set()
    out |= {f["final"] for f in m.get("files") or [] if isinstance(f, dict) and renamed(f)}
    return {n for n in out if isinstance(n, str)}


def sides(m: dict, op_id: str, side: str, current: Dict[str, Any], prefix: str,
          holds: Callable[[dict], bool]) -> Tuple[Dict[str, Any], Dict[str, dict]]:
    """The event files of ``side`` (the module docstring's rule): ``(now, backups)``, the run's
    files read as they are (of ``current``: name -> the store's handle) and the originals read from
    their backup (name -> the manifest's entry; ``holds(entry)``: the store holds it)."""
    files = dict(current)
    backups: Dict[str, dict] = {}
    if side != "before" or m.get("restored_by"):  # after a restore the run holds the originals again
        return files, backups
    for name in created_by(m):
        files.pop(name, None)
    for f in m.get("files") or []:
        rel = f.get("path") if isinstance(f, dict) else None
        if not isinstance(rel, str) or not direct_event(rel, prefix):
            continue
        if m.get("backup_purged"):
            raise SampleUnavailable("purged", f"the backup of {op_id} was purged: the original is gone")
        if holds(f):
            files.pop(rel, None)
            backups[rel] = f
    return files, backups


class Source(abc.ABC):
    """Where one store's sample bytes come from."""

    @abc.abstractmethod
    def manifest(self, op_id: str) -> dict:
        """The operation's manifest (``TransactionError`` when the vault has none)."""

    @abc.abstractmethod
    def find_run(self, m: dict, op_id: str) -> str:
        """The run's prefix (``manifest.run_prefix``: its files' names relative to the logdir
        start with it); ``SampleUnavailable`` ``not_found`` when the run is
        not in the logdir."""

    @abc.abstractmethod
    def current(self, prefix: str) -> Dict[str, Any]:
        """The run's direct event files now (``direct_event``): name -> the store's handle."""

    @abc.abstractmethod
    def holds(self, f: dict) -> bool:
        """Whether this store's vault holds the original of manifest entry ``f`` (untrusted)."""

    @abc.abstractmethod
    def paths(self, now: Dict[str, Any], backups: Dict[str, dict]) -> ContextManager[List[str]]:
        """Local paths of ``now``'s files and ``backups``' originals, by name, for the ``with``
        block the sample reader reads them in."""


def sample(src: Source, op_id: str, side: str, plugin: str, tag: str, step: int, index: int = 0) -> tuple:
    """``(bytes, content type)`` of sample ``index`` of ``tag`` at ``step`` (``plugin``: images or
    audio) of operation ``op_id``'s run, ``before`` or ``after``; ``SampleUnavailable`` (code
    ``not_found`` / ``restored`` / ``purged``)."""
    from tb_footprint_plugin.verify import samples

    m = src.manifest(op_id)
    prefix = src.find_run(m, op_id)
    if side == "after" and m.get("restored_by"):
        raise SampleUnavailable("restored", f"{op_id} was restored: the reduced run exists no more")
    now, backups = sides(m, op_id, side, src.current(prefix), prefix, src.holds)
    with src.paths(now, backups) as paths:
        data = samples.read_sample(paths, plugin, tag, int(step), int(index))
    if data is None:
        raise SampleUnavailable("not_found", f"no {plugin} sample {index} of {tag!r} at step {step} {side}")
    return data, samples.sniff(data)


def in_order(now: Dict[str, Any], backups: Dict[str, dict]) -> Iterable[str]:
    """The names of a side's files in the order the sample reader reads them."""
    return sorted(set(now) | set(backups))


__all__ = ["SampleUnavailable", "Source", "created_by", "direct_event", "in_order", "sample", "sides"]
