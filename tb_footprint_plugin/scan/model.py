"""Typed results of a scan: the same objects the CLI prints, the plugin serves and plans read.

``to_dict`` gives the documented JSON schema (``SCHEMA_VERSION``; see docs/json-schema.md).
"""
from __future__ import annotations

import bisect
import dataclasses
import stat
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple, Union

SCHEMA_VERSION = 1
UNATTRIBUTED = "(unattributed)"
#: a scan of 100,000 runs holds a few of these per run: without a __dict__ each (Python 3.10+)
#: dataclass options for the many small per-run records (slots: no per-object dict, where Python has them)
COMPACT = {"slots": True} if sys.version_info >= (3, 10) else {}


class FrozenList(list):
    """A list no one may change, so that many records can share it: the one empty default of
    the records without tags, warnings or writers (an empty list is 56 bytes, ~5 of them a run),
    the lines like runs of a plan say. Changing it raises ``TypeError``: a record whose list
    changes is given a list of its own."""

    __slots__ = ()

    def _refuse(self, *_a, **_k):
        raise TypeError("a shared empty default: assign a list of its own instead")

    append = extend = insert = remove = pop = clear = sort = reverse = _refuse

    def __reduce__(self):
        # a copy (copy, deepcopy, pickle) is a plain list: filled in, it is no one else's
        return list, (list(self),)
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse


class FrozenMap(dict):
    """``FrozenList``'s counterpart for dict fields (an action's params and categories)."""

    __slots__ = ()

    def _refuse(self, *_a, **_k):
        raise TypeError("a shared empty default: assign a dict of its own instead")

    __setitem__ = __delitem__ = __ior__ = setdefault = update = pop = popitem = clear = _refuse

    def __reduce__(self):
        return dict, (dict(self),)  # a copy is a plain dict, as ``FrozenList``'s is a list


NO_ITEMS = FrozenList()
NO_KEYS = FrozenMap()


def no_items() -> List:
    """The shared empty list (a dataclass ``default_factory``)."""
    return NO_ITEMS


def no_keys() -> Dict:
    """The shared empty dict (a dataclass ``default_factory``)."""
    return NO_KEYS


@dataclass(**COMPACT)
class _CategoryFields:
    """The fields of ``CategoryStat`` (a scan of 100,000 runs holds ~5 per run: without a
    ``__dict__`` each, ~200 bytes less)."""

    name: str
    bytes: int = 0
    files: int = 0  # files wholly or partly in this category
    records: int = 0  # event records (0 for file-level categories)
    tags: List[str] = field(default_factory=no_items)
    min_step: Optional[int] = None
    max_step: Optional[int] = None
    #: the most records one tag of this category has in the run (0: not counted), so a plan can
    #: tell without reading the run that no per-tag rule has anything to drop
    max_tag_records: int = 0


class CategoryStat(_CategoryFields):
    """Bytes of one category within a run (or a whole logdir)."""

    #: the tag index ``add`` keeps while it folds runs into a total: (the list it indexes, its set)
    __slots__ = ("_tag_set",)

    def add(self, other: "CategoryStat") -> None:
        """Fold another stat of the same category into this one."""
        self.bytes += other.bytes
        self.files += other.files
        self.records += other.records
        self.max_tag_records = max(self.max_tag_records, other.max_tag_records)
        if other.tags:
            # merged into the sorted list in place, only what is new: re-sorting the union at each
            # add was quadratic over a logdir's runs (the totals fold every run's stat)
            known = getattr(self, "_tag_set", None)
            if known is None or known[0] is not self.tags or len(known[1]) != len(self.tags):
                self.tags = sorted(set(self.tags))  # a list of its own: it is added to in place
                known = (self.tags, set(self.tags))
                self._tag_set = known
            for t in other.tags:
                if t not in known[1]:
                    known[1].add(t)
                    bisect.insort(self.tags, t)
        for s in (other.min_step, other.max_step):
            if s is None:
                continue
            self.min_step = s if self.min_step is None else min(self.min_step, s)
            self.max_step = s if self.max_step is None else max(self.max_step, s)


class SharedStat(CategoryStat):
    """A run's ``CategoryStat`` that like runs share (a sweep's runs mostly have the same bytes,
    records and tags per category: ~120 bytes a stat, ~4 a run at 100,000 runs). Changing it
    raises ``TypeError``: fold it into a stat of its own (``CategoryStat.add``). Equal to, and
    shown as, the ``CategoryStat`` it stands for; ``type(stat)(name=...)`` makes a plain one."""

    __slots__ = ()

    def __new__(cls, *args, **kwargs):
        # a caller making "another of the same type" (a total to fold runs into) gets a stat of its own
        return CategoryStat(*args, **kwargs)

    @staticmethod
    def share(stat: CategoryStat) -> "SharedStat":
        """``stat`` itself, made shared (no one may change it from now on)."""
        stat.__class__ = SharedStat
        return stat  # type: ignore[return-value]

    def _refuse(self, *_a, **_k):
        raise TypeError("a category stat like runs share: fold it into a stat of its own (CategoryStat.add)")

    __setattr__ = __delattr__ = _refuse

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _CategoryFields):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in _STAT_FIELDS)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self):
        # a copy (copy, deepcopy, pickle) is a plain stat of its own, with equal fields
        return CategoryStat, tuple(getattr(self, f) for f in _STAT_FIELDS)

    def __repr__(self) -> str:
        r = CategoryStat.__repr__(self)
        return "CategoryStat" + r[r.index("("):]


_STAT_FIELDS = tuple(f.name for f in dataclasses.fields(_CategoryFields))


#: ``FileEntry``'s categories as kept: one category holding the whole file (its name), or the
#: pairs flattened (name, bytes, name, bytes, ...)
_Cats = Union[str, Tuple[Union[str, int], ...]]


class FileEntry:
    """One file (or symlink) under the logdir, with its bytes split by category.

    ``categories`` (category -> bytes; sums to ``size``) is kept as a tuple, or as just the
    category's name when one category holds the whole file, and handed out as a new dict: a
    small dict is 184 bytes, and a scan of 100,000 runs holds a few files a run."""

    __slots__ = ("path", "size", "mtime", "kind", "_cats", "warning", "links", "allocated", "uid")

    def __init__(self, path: str, size: int, mtime: float, kind: str,
                 categories: Optional[Dict[str, int]] = None, warning: Optional[str] = None,
                 links: int = 1, allocated: Optional[int] = None, uid: Optional[int] = None) -> None:
        self.path = path  # relative to the logdir, '/'-separated
        self.size = size  # lstat st_size
        self.mtime = mtime
        self.kind = kind  # 'event', 'file' or 'symlink'
        self.categories = categories or {}
        self.warning = warning
        #: lstat st_nlink as the walk found it (1 in a bucket): more than 1, the file has other
        #: names (a ``cp -al`` or ``rsync --link-dest`` snapshot), which keep its bytes on disk
        #: when this name goes. Read afresh by every walk, never from the scan cache (one slot:
        #: a small int, shared)
        self.links = links
        #: a sparse file's allocated bytes (``st_blocks * 512``, what ``du`` counts) when below
        #: ``size``, else None (the shared None: memory flat for every other file). ``size`` is
        #: its logical bytes ("removable"); this is what removing it frees on disk ("freed now").
        #: Read afresh by every walk, as ``links``
        self.allocated = allocated
        #: lstat st_uid when the file is ANOTHER user's than the one who scanned (``os.geteuid()``),
        #: else None (the shared None: memory flat for one's own files; a bucket has no owners):
        #: the plan leaves another user's run alone unless asked (``plan.owners``). Read afresh by
        #: every walk, as ``links``
        self.uid = uid

    @property
    def categories(self) -> Dict[str, int]:
        """Category -> bytes (a new dict: changing it changes nothing; assign one instead)."""
        c = self._cats
        if isinstance(c, str):
            return {c: self.size}
        return dict(zip(c[0::2], c[1::2]))

    @categories.setter
    def categories(self, value: Dict[str, int]) -> None:
        if len(value) == 1:
            (name, nbytes), = value.items()
            if nbytes == self.size and isinstance(name, str):
                self._cats = name
                return
        self._cats = tuple(x for kv in value.items() for x in kv)

    def to_dict(self) -> dict:
        """JSON-ready dict in the documented schema."""
        d = {"path": self.path, "size": self.size, "mtime": self.mtime, "kind": self.kind,
             "categories": self.categories, "warning": self.warning}
        if self.links != 1:  # only a file with other hard links says it (the schema's files stay as they were)
            d["links"] = self.links
        if self.allocated is not None:  # only a sparse file says it
            d["allocated"] = self.allocated
        if self.uid is not None:  # only another user's file says it
            d["uid"] = self.uid
        return d

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FileEntry):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it replaces

    def __repr__(self) -> str:
        return "FileEntry(" + ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items()) + ")"


class ProfileSession:
    """One ``plugins/profile/<session>`` directory (or one PyTorch trace file).

    ``name`` is the last part of ``path`` (the session's folder, the trace's file name) and is
    not kept twice: it is read from the path (a session name is ~70 bytes a run at 100,000 runs);
    a name that is not (from JSON written elsewhere) is kept as given."""

    __slots__ = ("path", "mtime", "bytes", "files", "hosts", "kind", "_name")

    def __init__(self, name: str, path: str, mtime: float, bytes: int, files: int,
                 hosts: Optional[List[str]] = None, kind: str = "xprof") -> None:
        self.path = path  # relative to the logdir
        self.mtime = mtime
        self.bytes = bytes
        self.files = files
        self.hosts = no_items() if hosts is None else hosts
        self.kind = kind  # 'xprof' or 'torch'
        self.name = name

    @property
    def name(self) -> str:
        """The session's name (its folder's, or the trace file's)."""
        return self._name if self._name is not None else self.path.rsplit("/", 1)[-1]

    @name.setter
    def name(self, value: str) -> None:
        self._name = None if value == self.path.rsplit("/", 1)[-1] else value

    def to_dict(self) -> dict:
        """JSON-ready dict in the documented schema."""
        return {"name": self.name, "path": self.path, "mtime": self.mtime, "bytes": self.bytes,
                "files": self.files, "hosts": list(self.hosts), "kind": self.kind}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProfileSession):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it replaces

    def __repr__(self) -> str:
        return "ProfileSession(" + ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items()) + ")"


@dataclass(**COMPACT)
class RunFootprint:
    """Everything the scan attributes to one run directory."""

    name: str  # run name as TensorBoard shows it: path relative to the logdir, '.' for the root
    path: str  # same as name, or UNATTRIBUTED
    total_bytes: int = 0
    newest_mtime: float = 0.0
    categories: Dict[str, CategoryStat] = field(default_factory=dict)
    files: List[FileEntry] = field(default_factory=list)
    sessions: List[ProfileSession] = field(default_factory=list)
    warnings: List[str] = field(default_factory=no_items)
    has_event_files: bool = False
    #: the run folder's lstat st_uid when it is another user's than the scanner's, else None (as
    #: ``FileEntry.uid``; in the JSON only when set)
    uid: Optional[int] = None

    def biggest_category(self) -> Optional[str]:
        """The category holding the most bytes, or None for an empty run."""
        if not self.categories:
            return None
        return max(self.categories.values(), key=lambda c: (c.bytes, c.name)).name


#: st_blocks is counted in 512-byte units on every Unix, whatever the filesystem's block
BLOCK = 512


@dataclass
class DiskTally:
    """What the scan's walk of a local logdir found allocated on disk, counted as ``du`` counts
    (``st_blocks * 512``, each inode with several links once), so "disk in use now" needs no
    second walk of the logdir (``engine.usage.disk_usage_after_scan`` walks only what the scan
    set aside: its state folders and a vault inside it). Memory: only the inodes with several
    links are remembered, as ``du`` does (with a small count each); never part of the scan's JSON.

    Besides, ``outside_by_device``: the blocks of the inodes whose other names no walk into this
    tally has met (a ``cp -al`` snapshot beside the logdir): ``du`` counts them here, but removing
    the names met frees none of them, so "freed now" leaves them out (``engine.usage``)."""

    bytes: int = 0
    by_device: Dict[int, int] = field(default_factory=dict)
    #: the logdir's own filesystem (its folder's ``st_dev``)
    device: Optional[int] = None
    #: (st_dev, st_ino) of every file met with several links (a restored hard link, a snapshot's)
    #: -> how many of its names (``st_nlink``) no walk has met yet
    linked: Dict[Tuple[int, int], int] = field(default_factory=dict)
    #: per ``st_dev``: blocks of the linked inodes with names not met (``linked`` value > 0)
    outside_by_device: Dict[int, int] = field(default_factory=dict)
    #: folders the walk did not enter (absolute paths): state folders, a vault inside the logdir
    set_aside: List[str] = field(default_factory=list)
    #: folders it could not read: ``{"path", "why"}``, as ``DiskUsage.skipped`` says them
    skipped: List[Dict[str, str]] = field(default_factory=list)
    #: when the walk started (``time.time()``)
    started: float = 0.0

    def count(self, st) -> None:
        """Add one lstat result: a file with several links only the first time it is met (its
        blocks counted ``outside`` until every one of its names has been met)."""
        b = st.st_blocks * BLOCK
        if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
            key = (st.st_dev, st.st_ino)
            left = self.linked.get(key)
            if left is not None:
                if left > 0:  # another of its names: once all are met, none is outside
                    self.linked[key] = left - 1
                    if left == 1:
                        self.outside_by_device[st.st_dev] = self.outside_by_device.get(st.st_dev, 0) - b
                return
            self.linked[key] = st.st_nlink - 1
            self.outside_by_device[st.st_dev] = self.outside_by_device.get(st.st_dev, 0) + b
        self.bytes += b
        self.by_device[st.st_dev] = self.by_device.get(st.st_dev, 0) + b

    def copy(self) -> "DiskTally":
        """A tally to go on counting from (another walk's), this one left as its walk left it."""
        return DiskTally(bytes=self.bytes, by_device=dict(self.by_device), device=self.device,
                         linked=dict(self.linked), outside_by_device=dict(self.outside_by_device),
                         started=self.started)


@dataclass
class LogdirFootprint:
    """The scan of a whole logdir."""

    logdir: str
    scanned_at: float
    total_bytes: int
    runs: List[RunFootprint]
    categories: Dict[str, CategoryStat]
    vault_bytes: int = 0
    warnings: List[str] = field(default_factory=list)
    files_read: int = 0  # event files parsed in this scan (not served from the cache)
    files_cached: int = 0
    #: requests the scan issued to an object store, per verb, and bytes downloaded (None on disk)
    requests: Optional[Dict[str, int]] = None
    schema_version: int = SCHEMA_VERSION
    #: folders the walk could not enter, each ``{path, run, code, why}`` (``discovery.unreadable_entry``):
    #: the plan lists them left alone, never drops them (``warnings`` says them too, as prose)
    unreadable: List[Dict[str, Optional[str]]] = field(default_factory=list)
    #: folders left out as another logdir's (``scan.set_aside``), each ``{path, run, code, why}``:
    #: a retirement of the run holding one is refused by the plan (review R13 F5)
    set_aside: List[Dict[str, Optional[str]]] = field(default_factory=list)

    # Not fields: neither in the JSON schema nor compared (set by the scan that walked or listed).
    #: what the walk found allocated on disk (``DiskTally``: a local scan's own walk); None when
    #: not walked here (read back from JSON, a bucket)
    disk = None
    #: a bucket scan's listing summed (int): every object under the logdir's prefix, its state
    #: folder and a vault inside it included, as stored; None when not listed here
    listed_bytes = None
    #: a bucket scan's listing of a vault in another prefix: (its store path, bytes it stores)
    listed_vault = None

    def run(self, name: str) -> Optional[RunFootprint]:
        """The run with this exact name, or None. Indexed: callers look up every run of a logdir
        of 100,000 runs (a scan per lookup made a plan quadratic)."""
        idx = self.__dict__.get("_by_name")
        if idx is None or idx[0] is not self.runs or idx[1] != len(self.runs):
            by_name: Dict[str, RunFootprint] = {}
            for r in self.runs:
                by_name.setdefault(r.name, r)  # the first of a name, as a scan in order finds it
            idx = self.__dict__["_by_name"] = (self.runs, len(self.runs), by_name)
        r = idx[2].get(name)
        if r is not None and r.name == name:
            return r
        # renamed or replaced in place since the index was made: the list is the truth
        return next((r for r in self.runs if r.name == name), None)

    def to_dict(self, with_files: bool = True) -> dict:
        """JSON-ready dict in the documented schema."""
        d = {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "runs"}
        d["runs"] = [{f.name: _plain(getattr(r, f.name)) for f in dataclasses.fields(r)
                      if (with_files or f.name != "files") and (f.name != "uid" or r.uid is not None)}
                     for r in self.runs]
        return {f.name: d[f.name] for f in dataclasses.fields(self)}  # in the schema's order


def _plain(v):
    """``dataclasses.asdict`` of one field's value, ``FileEntry`` included (not a dataclass)."""
    if isinstance(v, (FileEntry, ProfileSession)):
        return v.to_dict()
    if dataclasses.is_dataclass(v):
        return {f.name: _plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def footprint_from_dict(d: dict) -> LogdirFootprint:
    """Inverse of ``LogdirFootprint.to_dict`` (used by the cache and by tests)."""

    def cats(m):
        return {k: CategoryStat(**v) for k, v in m.items()}

    runs = []
    for r in d["runs"]:
        runs.append(
            RunFootprint(
                name=r["name"],
                path=r["path"],
                total_bytes=r["total_bytes"],
                newest_mtime=r["newest_mtime"],
                categories=cats(r["categories"]),
                files=[FileEntry(**f) for f in r.get("files", [])],
                sessions=[ProfileSession(**s) for s in r["sessions"]],
                warnings=list(r["warnings"]),
                has_event_files=r.get("has_event_files", False),
                uid=r.get("uid"),
            )
        )
    return LogdirFootprint(
        logdir=d["logdir"],
        scanned_at=d["scanned_at"],
        total_bytes=d["total_bytes"],
        runs=runs,
        categories=cats(d["categories"]),
        vault_bytes=d.get("vault_bytes", 0),
        warnings=list(d.get("warnings", [])),
        files_read=d.get("files_read", 0),
        files_cached=d.get("files_cached", 0),
        requests=d.get("requests"),
        schema_version=d.get("schema_version", SCHEMA_VERSION),
        unreadable=[dict(u) for u in d.get("unreadable", [])],
        set_aside=[dict(u) for u in d.get("set_aside", [])],
    )
