"""Failpoints: named places in the transactions where tests inject a failure, a crash or a SIGKILL.

Set ``TB_FOOTPRINT_FAILPOINTS="step=action[,step=action]"`` with action one of ``raise`` (a
failure, ``InjectedFault``: rolled back as any failure is, on every store), ``crash`` (the
process stopped at that instant, in-process: ``InjectedCrash``, a ``BaseException`` nothing of
the engine catches, nothing rolled back, on every store; weaker than a kill: Python still runs
the ``finally`` blocks and context exits it passes, so a lock released or a file closed there is
released or closed, which is why the crash matrix keeps its SIGKILL cases), ``enospc``, ``eacces``, ``kill``
(SIGKILL to the own process, as a power cut would stop it at that instant) or ``wait`` (hold the step until the file named by
``TB_FOOTPRINT_FAILPOINT_GATE`` exists, at most ``GATE_WAIT`` seconds: a test acting on a step
held open in another process, such as the tab's Cancel in a real TensorBoard). Unset, ``hit`` is
two dictionary lookups. Tests may also call ``arm``.

One vocabulary for every engine: ``STEPS`` below declares each name, ``<verb>.<step>`` in the
order a transaction passes them, and which engines hit it (``local`` = a logdir on a disk,
``bucket`` = an object-store logdir). Where both engines take the same step they hit the same
name, so one crash matrix (``tests/contract/test_crash_matrix.py``) runs over every store; a
step only one engine has is listed for that engine alone. A name not declared here is refused
at once, by ``hit`` and ``arm`` and in the environment variable: a misspelt failpoint must fail
its test, not silently never fire.

The vault's own names (``compact_*`` and ``restore_copied``, hit in ``engine/vault.py`` and ``engine/vault_blobs.py``) are part
of this vocabulary under their historical spelling; ``offload.*`` is the vault offload's;
``repack.*`` and ``merge.*`` are the vault's packs' own (a repack inside a forget, a batch's end
merging the pack index), outside the crash matrix's verbs.
"""
from __future__ import annotations

import errno
import os
import signal
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple, Union

LOCAL = "local"
BUCKET = "bucket"
#: the steps only a bucket logdir whose backups go to a vault of blobs takes (``--backup-dir <folder>``)
BLOBS = "bucket_blobs"
_BOTH = (LOCAL, BUCKET)
ACTIONS = ("raise", "crash", "enospc", "eacces", "kill", "wait")
#: the longest a ``wait`` holds its step (a test that never opens the gate still ends)
GATE_WAIT = 120.0


class Step(NamedTuple):
    """One declared failpoint: its name, the engines that hit it, and the instant it marks."""

    name: str
    engines: Tuple[str, ...]
    where: str

    @property
    def verb(self) -> str:
        """The operation the step belongs to (``reduce``, ``restore``, ...)."""
        return self.name.split(".", 1)[0] if "." in self.name else self.name.split("_", 1)[0]


#: Every failpoint, per verb in the order a transaction passes it. ``where`` says what is done
#: (and durable) when it fires; nothing after it has started.
STEPS: Tuple[Step, ...] = (
    # reduce: journal, backups, staging, verification, the swap (commit point), commit
    Step("reduce.journal", _BOTH, "the begin record / journal object is written; nothing copied yet"),
    Step("reduce.backup_record", (LOCAL,), "a file's backup record is journaled, its blob not yet in the vault"),
    Step("reduce.backup_copy", (BUCKET,), "one server-side backup copy is made (hit after each)"),
    Step("reduce.blobs_added", (BLOBS,), "bucket, vault of blobs: the originals are added to it and read back; "
                                         "no manifest names them yet"),
    Step("reduce.backup", _BOTH, "every backup of the run is made (bucket: no manifest yet)"),
    Step("reduce.stage_record", (LOCAL,), "a file's stage record is journaled, its temp not yet written"),
    Step("reduce.stage", _BOTH, "every new file is staged (and checked by TensorBoard's readers)"),
    Step("reduce.upload", (BUCKET,), "the staged objects are uploaded beside the originals and read back"),
    Step("reduce.verify", _BOTH, "the verification is recorded (bucket: the manifest is written); "
                                 "the last look at the run before the swap is still to come"),
    Step("reduce.swap_record", _BOTH, "the swap record (bucket: step 'swapping') is durable; nothing replaced yet"),
    Step("reduce.mid_swap", _BOTH, "one staged file has replaced its original (also when recovery "
                                   "finishes a swap)"),
    Step("reduce.swap", _BOTH, "every original is replaced or removed"),
    Step("reduce.commit", (LOCAL,), "the manifest is written and the commit record appended"),
    # restore of a reduction
    Step("restore.journal", (LOCAL,), "the begin record is written (big remote backups not yet streamed in and "
                                      "checked); nothing put back"),
    Step("restore.dirs", (LOCAL,), "removed folders are made again; no file put back yet"),
    Step("restore_copied", (LOCAL,), "vault.py: a backup is copied beside its original, not yet in its place "
         "(renamed onto it, or copied over it where the folder does not rename)"),
    Step("restore.file", _BOTH, "one original is back in the run (hit after each)"),
    Step("restore.check", (LOCAL,), "every original is back and checked; the manifest not yet marked"),
    # purge of the vault
    Step("purge.intent", _BOTH, "the purge is recorded before any blob goes (local: each operation's "
                                "intent, a retired run's manifest marked purged; bucket: the manifest "
                                "marked purged)"),
    Step("purge.blob", _BOTH, "a backup is deleted (local: each blob, each retired run's files; bucket: "
                              "each operation's blobs)"),
    Step("purge.forget", (BLOBS,), "bucket, vault of blobs: what no manifest or journal names is forgotten"),
    Step("purge.marked", (LOCAL,), "an operation's manifest is marked purged after its blobs went"),
    # retire: the whole run into the vault
    Step("retire.journal", _BOTH, "the begin record / journal object is written; nothing moved"),
    Step("retire.move_record", (LOCAL,), "the move record is journaled; nothing moved yet"),
    Step("retire.mid_move", _BOTH, "the first file is in the vault (local: moved or copied; bucket: copied)"),
    Step("retire.move", _BOTH, "every file is in the vault"),
    Step("retire.mid_delete", (LOCAL,), "vault on another filesystem: the first original is unlinked"),
    Step("retire.delete_record", (BUCKET,), "the step 'swapping' is durable; no original deleted yet"),
    Step("retire.delete", _BOTH, "the run is gone from the logdir (local: its folders removed)"),
    Step("retire.manifest", _BOTH, "the retirement's manifest is written (local: after the delete; "
                                   "bucket: before it)"),
    # unretire: a retired run put back
    Step("unretire.journal", _BOTH, "the restore's begin record is written; nothing put back"),
    Step("unretire.mid_move", _BOTH, "the first file is back in the logdir"),
    Step("unretire.move", _BOTH, "every file is back in the logdir"),
    Step("unretire.manifest", _BOTH, "the manifest is marked restored (bucket: with the copies it releases "
                                     "named, under a purge's journal; none deleted yet)"),
    # compact (vault.py, historical names): a backup rewritten compressed in the vault
    Step("compact_written", (LOCAL,), "vault.py: the compressed copy is written beside the blob"),
    Step("compact_verified", (LOCAL,), "vault.py: the compressed copy decompresses to the blob's sha256"),
    Step("compact_renamed", (LOCAL,), "vault.py: the compressed copy has its final name"),
    Step("compact_before_unlink", (LOCAL,), "vault.py: the plain blob is about to be unlinked"),
    # offload (vault offload to another store)
    Step("offload.note", (LOCAL,), "the offload's intent is recorded; nothing uploaded"),
    Step("offload.uploaded", (LOCAL,), "the blob is uploaded and read back"),
    Step("offload.recorded", (LOCAL,), "the blob's new home is recorded"),
    Step("offload.unlinked", (LOCAL,), "the local blob is unlinked"),
    # the local vault's packs (vault_compaction.py compact_all / vault_delete.py delete_blobs through remote_vault.pack_store)
    Step("reduce.pack_written", (LOCAL,), "after the commit: a pack of small backups is written, not yet read back"),
    Step("reduce.pack_verified", (LOCAL,), "every blob of the pack is read back and hashed; no index names it"),
    Step("reduce.pack_indexed", (LOCAL,), "the pack's index object is durable; the plain blobs are all still there"),
    Step("reduce.pack_unlinked", (LOCAL,), "a packed backup's plain blob is unlinked (hit after each)"),
    # a forget of packed blobs (vault_packs.py ``_forget_packed``: a purge, a restore's release, a
    # rollback, an offload's forget of the pack copies); only the index objects listing a
    # forgotten blob are written anew
    Step("purge.pack_index_written", (LOCAL,), "the packs' index objects that listed the purged blobs are written "
                                               "anew without them, durable; the ones they replace are all still there"),
    Step("purge.pack_old_index_deleted", (LOCAL,), "the index objects they replace are deleted"),
    Step("purge.pack_objects_deleted", (LOCAL,), "the packs no live blob needs are deleted"),
    # a half-dead pack's live blobs copied out, in a forget of packed blobs or a batch's merge
    # (not in the crash matrix: a clean purge of a whole run leaves no half-dead pack; covered
    # by tests/test_vault_packs.py)
    Step("repack.pack_written", (LOCAL,), "the live blobs of half-dead packs are in a new, verified pack; "
                                          "no index names it yet"),
    # a batch's end (vault_packs.py ``merge_pack_index``): the small index objects its compactions
    # wrote merged, and the packs' leftovers past their grace swept (tests/test_vault_packs.py)
    Step("merge.pack_index_written", (LOCAL,), "the merged index object is durable; the ones it replaces are all "
                                               "still there"),
    Step("merge.pack_old_index_deleted", (LOCAL,), "the index objects the merged one replaces are deleted"),
    Step("merge.pack_swept", (LOCAL,), "the packs no index lists, older than their grace, are deleted (the "
                                       "batch's end is done with the packs)"),
)

DECLARED: Dict[str, Step] = {s.name: s for s in STEPS}
if len(DECLARED) != len(STEPS):  # pragma: no cover - a duplicate in the table above
    raise RuntimeError("faults.STEPS declares a name twice")

_armed: Dict[str, Union[str, Callable[[], None]]] = {}
_env_cache: Tuple[Optional[str], Dict[str, str]] = (None, {})


class InjectedFault(RuntimeError):
    """The failure a ``raise`` failpoint throws: a failure as any other, on every store (a
    transaction rolls it back where it rolls any failure back)."""


class InjectedCrash(BaseException):
    """What a ``crash`` failpoint throws: the process stopped at that instant, on every store (no
    handler of the engine catches it, no rollback runs; what it left is the next start's, as a
    ``kill`` leaves it, in-process)."""


class UnknownFailpoint(ValueError):
    """A failpoint name (or action) that the vocabulary does not declare."""


def steps(verb: str, engine: Optional[str] = None) -> List[str]:
    """The declared names of ``verb`` in table order, only those ``engine`` hits if given."""
    return [s.name for s in STEPS if s.verb == verb and (engine is None or engine in s.engines)]


def _check(name: str) -> None:
    if name not in DECLARED:
        raise UnknownFailpoint(f"unknown failpoint {name!r}: not declared in engine/faults.py STEPS")


def _from_env() -> Dict[str, str]:
    global _env_cache
    spec = os.environ.get("TB_FOOTPRINT_FAILPOINTS", "")
    if _env_cache[0] == spec:
        return _env_cache[1]
    out = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, action = part.partition("=")
        name, action = name.strip(), action.strip() or "raise"
        if name not in DECLARED:
            raise UnknownFailpoint(f"TB_FOOTPRINT_FAILPOINTS names an unknown step {name!r} "
                                   f"(declared: see engine/faults.py STEPS)")
        if action not in ACTIONS:
            raise UnknownFailpoint(f"TB_FOOTPRINT_FAILPOINTS: unknown action {action!r} for {name!r} "
                                   f"(one of {', '.join(ACTIONS)})")
        if action == "wait" and not os.environ.get("TB_FOOTPRINT_FAILPOINT_GATE"):
            # refused as the variable is read, not in the middle of the transaction it would hold
            raise UnknownFailpoint(f"TB_FOOTPRINT_FAILPOINTS: {name}=wait needs TB_FOOTPRINT_FAILPOINT_GATE "
                                   f"(the file whose creation lets the step go on)")
        out[name] = action
    _env_cache = (spec, out)
    return out


def check_env() -> None:
    """Refuse a ``TB_FOOTPRINT_FAILPOINTS`` naming an undeclared step or action (``UnknownFailpoint``)."""
    _from_env()


def arm(name: str, action: Union[str, Callable[[], None]] = "raise") -> None:
    """Make failpoint ``name`` fire (tests); a callable is called there instead."""
    _check(name)
    if not callable(action) and action not in ACTIONS:
        raise UnknownFailpoint(f"unknown failpoint action {action!r} for {name!r}")
    _armed[name] = action


def disarm_all() -> None:
    """Disarm every failpoint armed by ``arm``."""
    _armed.clear()


def _wait_for_gate() -> None:
    gate = os.environ.get("TB_FOOTPRINT_FAILPOINT_GATE")
    if not gate:
        raise UnknownFailpoint("failpoint action 'wait' needs TB_FOOTPRINT_FAILPOINT_GATE (a file path)")
    deadline = time.monotonic() + GATE_WAIT
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)


def hit(name: str) -> None:
    """Fire failpoint ``name`` if it is armed; an undeclared name raises ``UnknownFailpoint``."""
    _check(name)
    action = _armed.get(name)
    if action is None and "TB_FOOTPRINT_FAILPOINTS" in os.environ:
        action = _from_env().get(name)
    if action is None:
        return
    if callable(action):
        action()
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "wait":
        _wait_for_gate()
        return
    if action == "crash":
        raise InjectedCrash(f"injected crash at {name}")
    if action == "enospc":
        raise OSError(errno.ENOSPC, f"No space left on device (injected at {name})")
    if action == "eacces":
        raise PermissionError(errno.EACCES, f"Permission denied (injected at {name})")
    raise InjectedFault(f"injected failure at {name}")
