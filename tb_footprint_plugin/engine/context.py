"""What every engine operation shares: the logdir's context, outcomes, errors and cancellation.

Outcomes are values (``RunOutcome``) so one failed run never stops a batch; errors name the
file and say why.
"""
from __future__ import annotations

import contextlib
import datetime
import errno
import os
import secrets
import shutil
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, Iterable, Iterator, List, Optional

from tb_footprint_plugin.codes import Code, Failure, Outcome, StoreError
from tb_footprint_plugin.fmt import human_bytes
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.paths import check_no_symlink, contained, LinkOnTheWay, state_dir
from tb_footprint_plugin.storage.store_posix import PosixStore


class Cancelled(RuntimeError):
    """The caller cancelled the operation before its commit point. ``code``: how every engine
    codes the run it stopped (``Failure.INTERRUPTED`` for a cancel: Ctrl-C, SIGTERM, the tab's
    Cancel; ``Failure.ERROR`` for a run's own timeout)."""

    def __init__(self, message: str, code: Code = Failure.INTERRUPTED):
        super().__init__(message)
        self.code = code


class TransactionError(RuntimeError):
    """A step failed; the run was (or will be) rolled back. The message says which and why,
    ``code`` (a ``codes.Skip`` or ``codes.Failure``) says it to programs."""

    def __init__(self, message: str, code: Optional[Code] = None):
        super().__init__(message)
        self.code = code


class CancelToken:
    """Cooperative cancellation and per-run timeout, checked between steps."""

    def __init__(self, timeout: Optional[float] = None, parent: Optional["CancelToken"] = None):
        # sharing the parent's event: one cancel of a batch stops every run at its next step
        self._event = parent._event if parent is not None else threading.Event()
        self.deadline = time.monotonic() + timeout if timeout else None

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set():
            raise Cancelled("cancelled before the commit point")
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise Cancelled("timed out before the commit point", Failure.ERROR)


class Finds:
    """An outcome's ``findings`` (issue #26: a second code, never prose only): each
    ``{"code": a codes.Finding, "path": str|None}``, once, in the order found; a per-run outcome's
    (``RunOutcome``) and a recovery's (``recovery_rules.RecoveryOutcome``) alike."""

    findings: List[dict]

    def found(self, code: Code, paths: Iterable[Optional[str]] = (None,)) -> None:
        """Note finding ``code`` for each of ``paths`` (None: the run as a whole), each once."""
        for path in paths:
            f = {"code": str(code), "path": path}
            if f not in self.findings:
                self.findings.append(f)


@dataclass
class RunOutcome(Finds):
    """What happened to one run: a value with a reason, never a stray exception."""

    run: str
    status: str  # a codes.Outcome: 'verified' | 'rolled_back' | 'skipped' | 'failed' | 'dry_run' | 'restored'
    op_id: Optional[str] = None
    reason: Optional[str] = None  # for people
    code: Optional[str] = None  # for programs: a codes.Skip or codes.Failure next to ``reason``
    bytes_before: int = 0
    bytes_after: int = 0
    removed_files: List[str] = field(default_factory=list)
    created_files: List[str] = field(default_factory=list)
    verification: Optional[dict] = None
    duration_s: float = 0.0
    holder: Optional[str] = None  # ``Skip.LOCKED``: who holds the run, where known ("HOST pid PID ...")
    #: what the operation found besides its ``code`` (issue #26: a second code, never prose only):
    #: each ``{"code": a codes.Finding, "path": str|None}``, once, in the order found; ``reason``
    #: says them for people. A rollback's ``code`` is its cause; a folder it left without its
    #: recorded mode and time is a finding (``folder_not_settled``), and so is each on a restore
    findings: List[dict] = field(default_factory=list)

    @property
    def saved_bytes(self) -> int:
        return max(0, self.bytes_before - self.bytes_after) if self.status == Outcome.VERIFIED else 0

    @property
    def verified(self) -> bool:
        return self.status in (Outcome.VERIFIED, Outcome.RESTORED)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["saved_bytes"] = self.saved_bytes
        d["verified"] = self.verified
        return d


@dataclass
class Context:
    """Where one logdir keeps its state and backups, and how verification runs."""

    logdir: str
    backup_dir: Optional[str] = None
    verify_backends: tuple = ("python", "rust")
    quiet_period: float = 600.0
    #: files the caller's own job wrote and closed: logdir-relative path -> mtime when closed;
    #: exempt from the quiet period while unchanged (see ``plan.planner.newest_write``)
    closed_files: Dict[str, float] = field(default_factory=dict)
    #: the logdir's ``Store``, made on first use (``store``)
    _store: Optional[PosixStore] = field(default=None, init=False, repr=False, compare=False)
    #: operations whose manifest a vault was found to hold during this command
    #: (``catalogue.missing_manifests``): not looked for again at each run of a batch
    manifests_seen: set = field(default_factory=set, init=False, repr=False, compare=False)

    def __post_init__(self):
        self.logdir = os.path.abspath(self.logdir)
        self.state = state_dir(self.logdir)
        self.vault = Vault(self.backup_dir or self.state)
        self.journal_dir = os.path.join(self.state, "journal")
        self.lock_dir = os.path.join(self.state, "locks")

    def abs(self, rel: str) -> str:
        """The absolute path of ``rel``, checked to stay inside the logdir (``UnsafePath``):
        paths come from plans and from journals and manifests read back from disk."""
        return contained(self.logdir, rel)

    def key(self, rel: str) -> str:
        """``rel`` as a key of ``store`` (normalized: 'a/./b' is 'a/b'), checked to stay inside
        the logdir (``UnsafePath``) as ``abs`` checks it."""
        return os.path.relpath(self.abs(rel), self.logdir)

    @property
    def store(self) -> PosixStore:
        """The logdir as a ``Store`` (a ``PosixStore`` rooted at it: no symlink below the
        logdir followed, no FIFO or device opened), made once, when first asked: a context that
        never asks makes no system call for it. ``StoreFailure`` when the logdir is gone."""
        if self._store is None:
            self._store = PosixStore(self.logdir)  # two threads may each make one: either serves
        return self._store


def new_op_id() -> str:
    ts = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{ts}-{secrets.token_hex(3)}"


Progress = Callable[[str, float], None]


class NoSpace(TransactionError):
    """A write failed for want of space (``ENOSPC``) or quota (``EDQUOT``): the message names
    the file being written and the bytes it needed; ``code`` is ``Failure.NO_SPACE``."""

    def __init__(self, path: str, need: int, err: OSError, at: Optional[str] = None):
        try:
            free = human_bytes(shutil.disk_usage(at or os.path.dirname(path) or ".").free) + " free"
        except OSError:
            free = "free space unknown"
        what = "quota exceeded" if err.errno == getattr(errno, "EDQUOT", -1) else "disk full"
        super().__init__(f"{what} writing {path}: it needed {human_bytes(need)} more ({free} on its filesystem; "
                         f"{err.strerror or err})", Failure.NO_SPACE)
        self.path = path
        self.need = need
        self.errno = err.errno


def is_no_space(e: BaseException) -> bool:
    """Whether ``e`` is a write refused for want of space or quota."""
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))


def failure_code(e: Optional[BaseException]) -> Failure:
    """The ``codes.Failure`` a failed run is coded with, on every store (review R r20 R6: one
    rule where five mappers disagreed on a bare ``ENOSPC``): the ``Failure`` the exception
    carries as its ``code`` (a ``TransactionError``'s, ``NoSpace``'s ``NO_SPACE``, a
    ``Cancelled``'s, a lost journal's); ``Failure.NO_SPACE`` for a write refused for want of
    space or quota; else ``Failure.ERROR`` (a bug, a library's error, a ``Skip`` code: a skip
    is not a failure). A bucket's ``bucket_state.failure_code`` adds its store codes."""
    code = getattr(e, "code", None)
    if isinstance(code, Failure):
        return code
    if e is not None and is_no_space(e):
        return Failure.NO_SPACE
    return Failure.ERROR


@contextlib.contextmanager
def writing(path: str, need: int, at: Optional[str] = None) -> Iterator[None]:
    """Turn a full disk or quota met while writing ``path`` into ``NoSpace`` naming it and the
    ``need`` bytes the write needed (free space looked up at ``at``, else ``path``'s folder);
    other errors pass as they are."""
    try:
        yield
    except OSError as e:
        if is_no_space(e):
            raise NoSpace(path, max(0, int(need)), e, at) from e
        raise


def reason_of(e: BaseException) -> str:
    if is_no_space(e):
        where = f" writing {e.filename}" if getattr(e, "filename", None) else ""
        return f"{'quota exceeded' if e.errno != errno.ENOSPC else 'disk full'}{where}: {e}"
    if isinstance(e, PermissionError):
        return f"permission denied: {e}"
    return str(e) or type(e).__name__


FREE_SPACE_MARGIN = 16 << 20


def check_space(path: str, need: int) -> None:
    """Refuse (``TransactionError``, ``Failure.NO_SPACE``) unless ``path``'s filesystem has
    ``need`` bytes free and a margin: checked before anything is written, never half-way."""
    if need <= 0:
        return
    free = shutil.disk_usage(path).free
    if free < need + FREE_SPACE_MARGIN:
        raise TransactionError(
            f"not enough free space on {path}: needs {human_bytes(need + FREE_SPACE_MARGIN)}, "
            f"has {human_bytes(free)}; nothing was changed", Failure.NO_SPACE
        )


def no_symlink(ctx: Context, rel: str) -> None:
    """Refuse (``TransactionError``) a path of the logdir with a link on its way, coded
    ``StoreError.SYMLINK`` (review R22 F1: uncoded, a restore took it for an interruption the next
    start would finish, though every start meets the link until someone removes it)."""
    try:
        check_no_symlink(ctx.logdir, rel)
    except LinkOnTheWay as e:
        raise TransactionError(str(e), StoreError.SYMLINK) from None
    except ValueError as e:
        raise TransactionError(str(e)) from None
