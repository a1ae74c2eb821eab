"""The plan as data: actions on paths, per-run plans and their totals (what a dry run shows)."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

# a plan of 100,000 runs holds a few actions per run: without a __dict__ each (Python 3.10+), and
# the empty params/categories/writers most of them have are one shared object (64 bytes a copy)
from tb_footprint_plugin.plan import owners
from tb_footprint_plugin.scan.model import COMPACT, FrozenList, no_items, no_keys


class SharedTexts(dict):
    """A plan's like strings, one object each however many runs say them (text -> itself), and
    the lines the last run said per field, so that like runs share one list (two lists of lines
    a run are ~180 bytes; the runs of a sweep mostly say the same)."""

    def __init__(self) -> None:
        super().__init__()
        self.last: Dict[str, List[str]] = {}

    def lines(self, name: str, lines: List[str]) -> List[str]:
        """``lines`` as a list no one may change: the last run's when equal."""
        last = self.last.get(name)
        if last is not None and last == lines:
            return last
        self.last[name] = shared = FrozenList(lines)
        return shared


@dataclass(**COMPACT)
class Action:
    """One change to one path (relative to the logdir)."""

    kind: str  # 'delete' | 'compress' | 'rewrite' | 'remove_dir'
    path: str
    category: str
    bytes_before: int
    bytes_after: int
    reason: str
    new_path: Optional[str] = None  # compress: the name the new file gets
    estimated: bool = False
    params: Dict[str, object] = field(default_factory=no_keys)  # rewrite: what to keep
    #: rewrite: category -> [bytes before, bytes after] inside the file, so a change is shown
    #: under each category with that category's own bytes (not the whole file's under one name)
    categories: Dict[str, List[int]] = field(default_factory=no_keys)
    #: the original's hard links at the scan (``FileEntry.links``): more than 1, other names keep
    #: its bytes on disk when this one goes (its backup is then a copy, not a link)
    links: int = 1
    #: a sparse original's allocated bytes at the scan (``FileEntry.allocated``), below
    #: ``bytes_before`` (its logical size): what removing it frees on disk. None: as its size
    allocated: Optional[int] = None

    @property
    def disk_before(self) -> int:
        """What the original takes on disk (its allocated blocks when sparse, else its size)."""
        return self.bytes_before if self.allocated is None else self.allocated


class DirRemoval:
    """A ``remove_dir`` action in half an ``Action``'s memory: its path, category and reason
    held, every other field its one value for all of them (a plan of 100,000 runs held ~3 a run:
    an emptied session, its ``plugins/profile`` and ``plugins`` folders; ~128 bytes each as an
    ``Action``, and ~78 a string for the two folders' paths). Its path may be held as a folder
    ``up`` levels below it (the session's path: no string of its own). Read, compared, shown and
    serialized as the ``Action`` it stands for (``dataclasses.fields``/``asdict`` see an
    ``Action``'s fields); only its path, category and reason can be changed (nothing changes the
    others of a folder's removal)."""

    __slots__ = ("_below", "_up", "category", "reason")
    __dataclass_fields__ = Action.__dataclass_fields__  # type: ignore[attr-defined]
    __hash__ = None  # type: ignore[assignment]  # as an Action's: equal by value, changeable

    kind = "remove_dir"
    bytes_before = 0
    bytes_after = 0
    new_path = None
    estimated = False
    params: Dict[str, object] = no_keys()
    categories: Dict[str, List[int]] = no_keys()
    links = 1
    allocated = None
    disk_before = 0

    def __init__(self, path: str, category: str, reason: str, up: int = 0) -> None:
        """``path``: the folder, or with ``up``, a folder that many levels below it."""
        self._below, self._up = path, up
        self.category = category
        self.reason = reason

    @property
    def path(self) -> str:
        """The folder removed (relative to the logdir)."""
        p = self._below
        for _ in range(self._up):
            p = os.path.dirname(p)
        return p

    @path.setter
    def path(self, value: str) -> None:
        self._below, self._up = value, 0

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in ACTION_FIELDS)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Action, DirRemoval)):
            return self._values() == tuple(getattr(other, name) for name in ACTION_FIELDS)
        return NotImplemented

    def __repr__(self) -> str:
        return "Action(" + ", ".join(f"{n}={v!r}" for n, v in zip(ACTION_FIELDS, self._values())) + ")"

    def __reduce__(self):
        # a copy (copy, deepcopy, pickle) is the ``Action`` it stands for
        return Action, self._values()


#: an ``Action``'s fields, in order
ACTION_FIELDS = tuple(Action.__dataclass_fields__)  # type: ignore[attr-defined]


@dataclass(**COMPACT)
class RunPlan:
    """What a policy does to one run."""

    run: str
    bytes_before: int
    expected_after_bytes: int
    actions: List[Action] = field(default_factory=list)
    #: one short line per change, the loss first (at most ``content.LINE_MAX`` characters)
    fidelity: List[str] = field(default_factory=list)
    #: parallel to ``fidelity``: what explains each line ("" where nothing more is said)
    fidelity_details: List[str] = field(default_factory=list)
    skipped: Optional[str] = None  # why nothing will be done, if so (for people)
    code: Optional[str] = None  # the same as a codes.Skip, or a codes.UNREAD_SKIPS code (for programs)
    newest_mtime: float = 0.0
    #: processes holding a file of the run open for writing: {pid, command, path, access, fd}
    writers: List[dict] = field(default_factory=no_items)
    planned_at: float = 0.0  # when the scan behind this plan was made
    #: originals of this run's actions whose bytes stay on disk after the swap: other hard links
    #: (a snapshot's, or another run's this plan leaves) keep their inode (code
    #: ``hard_linked_elsewhere``); their count and ``bytes_before``. "Freed now" leaves them out
    linked_files: int = 0
    linked_bytes: int = 0
    #: logical bytes of this run's changed originals that take no disk (sparse files' holes:
    #: ``bytes_before - allocated``): "removable" counts them (the data the plan removes), "freed
    #: now / after purge" do not (``disk_removable_bytes``, what ``du`` sees go)
    hole_bytes: int = 0
    #: bytes of this run's originals that are one more name of an inode the plan removes under
    #: another name too (``engine.plan_notes.linked_cut``'s twins): "removable" counts each name,
    #: the disk frees the inode once (``disk_removable_bytes`` leaves them out); set by the engine
    twin_bytes: int = 0
    #: another user's uid owning the run's folder or a file it changes (``plan.owners``): left
    #: alone with ``Skip.OTHERS_RUN``, or planned on request (``include_others_runs``); None: yours
    owner_uid: Optional[int] = None
    #: the plan was made with ``include_others_runs``: the engine, which asks the owner rule again
    #: under the run's lock, takes the run even if it became another user's since (``plan.owners``)
    include_others_runs: bool = False

    @property
    def owner_said(self) -> Optional[str]:
        """Before anyone says yes: whose run this is, when the plan takes another user's on request."""
        if self.owner_uid is None or self.skipped:
            return None
        return owners.taken_ahead(self.owner_uid)

    @property
    def removable_bytes(self) -> int:
        """Logical bytes the plan removes from the run (apparent sizes, as ``ls -l`` counts)."""
        return self.bytes_before - self.expected_after_bytes

    @property
    def disk_removable_bytes(self) -> int:
        """What the plan removes from the disk, what ``du`` sees go (allocated blocks: sparse holes
        and hard-linked twins' second names left out)."""
        return self.removable_bytes - self.hole_bytes - self.twin_bytes

    def to_dict(self) -> dict:
        d = asdict(self)
        d["removable_bytes"] = self.removable_bytes
        d["disk_removable_bytes"] = self.disk_removable_bytes
        return d


@dataclass
class Plan:
    """A policy applied to a logdir: per-run plans and totals."""

    logdir: str
    policy: dict
    created_at: float
    total_bytes: int
    runs: List[RunPlan]
    notes: List[str] = field(default_factory=list)
    #: bucket logdirs: requests and bytes per phase (plan.cost.request_cost); None on disk
    cost: Optional[Dict[str, dict]] = None
    #: disk in use now by the logdir and its vault(s), as ``du`` counts it (``engine.usage``, the
    #: count the reduce's report, ``status`` and the tab give); None where not measured (a bucket)
    disk_in_use_bytes: Optional[int] = None
    #: originals whose other hard links keep their bytes on disk (``RunPlan.linked_*`` summed,
    #: with the code ``hard_linked_elsewhere``), as the engine's note counted them; None: none
    hard_links: Optional[Dict[str, object]] = None
    #: originals whose bytes the vault holds already when their backup comes (an earlier one of
    #: this plan, or a blob there now: ``engine.plan_notes.content_dups``), found by hashing only
    #: the originals of a colliding size: their counts and which figures rest on that hashing
    #: (``figures``); None when nothing was hashed
    content_dups: Optional[Dict[str, object]] = None
    #: the plans (by ``run``) that are folders outside every run the scan could not enter
    #: (``planner.leave_unread_alone``): named and left alone; not runs of the logdir seen in part
    unread_folders: List[str] = field(default_factory=list)
    #: the local vault is on another disk than the logdir (``engine.plan_notes.vault_note``): a
    #: "freed now" is then the logdir's disk's alone, and is said so (review R17 F14)
    vault_elsewhere: bool = False

    @property
    def removable_bytes(self) -> int:
        return sum(r.removable_bytes for r in self.runs if not r.skipped)

    @property
    def disk_removable_bytes(self) -> int:
        """``removable_bytes`` as the disk counts it: sparse files' holes and hard-linked twins left
        out (``RunPlan.hole_bytes``, ``RunPlan.twin_bytes``)."""
        return sum(r.disk_removable_bytes for r in self.runs if not r.skipped)

    @property
    def expected_after_bytes(self) -> int:
        return self.total_bytes - self.removable_bytes

    def run(self, name: str) -> Optional[RunPlan]:
        """The plan of the run with this exact name, or None. Indexed: ``leave_alone`` looks up
        each run an unfinished operation or a writer names (a search each was quadratic)."""
        idx = self.__dict__.get("_by_name")
        if idx is None or idx[0] is not self.runs or idx[1] != len(self.runs):
            by_name: Dict[str, RunPlan] = {}
            for r in self.runs:
                by_name.setdefault(r.run, r)  # the first of a name, as the search found it
            idx = self.__dict__["_by_name"] = (self.runs, len(self.runs), by_name)
        r = idx[2].get(name)
        if r is not None and r.run == name:
            return r
        # renamed or replaced in place since the index was made: the list is the truth
        return next((r for r in self.runs if r.run == name), None)

    def to_dict(self) -> dict:
        return {
            "logdir": self.logdir,
            "policy": self.policy,
            "created_at": self.created_at,
            "total_bytes": self.total_bytes,
            "removable_bytes": self.removable_bytes,
            "disk_removable_bytes": self.disk_removable_bytes,
            "expected_after_bytes": self.expected_after_bytes,
            "runs": [r.to_dict() for r in self.runs],
            "notes": self.notes,
            "cost": self.cost,
            "disk_in_use_bytes": self.disk_in_use_bytes,
            "hard_links": self.hard_links,
            "content_dups": self.content_dups,
            "unread_folders": self.unread_folders,
        }
