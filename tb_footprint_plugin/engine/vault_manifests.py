"""Manifests (``VaultManifests``): each operation's manifest in the operation log or as an older
``ops/<op_id>.json``, read, written and listed, the blobs they reference, and ``ManifestMemo``,
the parsed manifests a process keeps between reads.

A part of ``engine.vault.Vault`` (the format is described there).
"""
from __future__ import annotations

import contextlib
import errno
import json
import marshal
import os
from typing import Callable, Dict, Iterable, List, Optional

from tb_footprint_plugin.codes import Failure, Finding
from tb_footprint_plugin.engine import oplog
from tb_footprint_plugin.engine.manifest import refused
from tb_footprint_plugin.engine.vault_base import VaultError, other_users_state_findings, set_aside_findings
from tb_footprint_plugin.storage import throttle as fsops
from tb_footprint_plugin.storage.files import fsync_dir
from tb_footprint_plugin.storage.paths import is_op_id, is_sha256
from tb_footprint_plugin.storage.private import NotPrivate
from tb_footprint_plugin.storage.regular import open_regular


def _digests_named_in(path: str) -> set:
    try:
        with open_regular(path) as f:  # a set-aside link or FIFO is never followed
            m = json.load(f)
        files = m.get("files", []) if isinstance(m, dict) and m.get("backup_purged") is not True else []
        return {f.get("sha256") for f in files if isinstance(f, dict) and is_sha256(f.get("sha256"))}
    except (OSError, ValueError, AttributeError, TypeError, RecursionError):
        return set()


class EveryBlob(set):
    """What ``Vault.referenced_blobs`` returns while a manifest may be unreadable in a way that
    hides which blobs it claimed: a set every digest is in (``in`` is always true, and so is it
    in a union with it, on either side), so no purge, rollback, forget or reset deletes a blob
    by its absence from the manifests read."""

    def __contains__(self, item) -> bool:
        return True

    def __or__(self, other) -> "EveryBlob":
        return EveryBlob(set.__or__(self, set(other)))

    __ror__ = __or__

    def __sub__(self, other) -> "EveryBlob":
        return EveryBlob(set.__sub__(self, set(other)))

    def __rsub__(self, other) -> set:
        return set()  # nothing is outside every blob

    def __rand__(self, other) -> set:
        return set(other)

    __and__ = __rand__


class ManifestMemo:
    """The manifests one command read, each with the key of the records it was read from
    (``Vault.manifests(memo=…)``): a restore of N runs re-reads, at each run's checks and under
    the blob locks of its release, only what changed since (issue #28: N full reads each).

    The key of an operation is everything its state is derived from: its entries in the log's
    index (sequence, segment, line, offset, length of each: records are only appended, and a
    seal or a re-indexed segment changes them) and the stat of an older version's file of it.
    A pass after the first asks the log's change feed (``oplog.Index.changed_since``) which
    operations had a record indexed since the last pass, and reads only those (and any older
    version's file, and any manifest not held): the others' keys cannot have changed, so a pass
    costs what changed, not one look-up per operation. When the feed cannot tell (the index was
    reset: a segment sealed, went or was replaced), the pass looks at every key, as the first.
    While the index holds a damaged line nothing is reused; a manifest refused is never held
    (it is read, and refused, again).
    Held marshalled, so no caller's change to a manifest it was given reaches the next one;
    memory is one full read's worth (and one slim read's: a projection with a ``memo_name``,
    such as ``vault_reads.slim``, is held apart), for the length of the command."""

    def __init__(self) -> None:
        self._held: Dict[tuple, tuple] = {}
        #: vault root -> whether it had no older version's manifest files when the pass began
        self._no_files: Dict[str, bool] = {}
        #: (vault root, projection) -> (the feed's mark when the last pass began, its op ids)
        self._passes: Dict[tuple, tuple] = {}
        #: reads answered from the memo (for tests)
        self.hits = 0

    def usable(self, vault: "Vault", keep) -> bool:
        """Whether this pass may reuse: a full read, or a projection with a ``memo_name``, of a
        log without damage."""
        if keep is not None and not isinstance(getattr(keep, "memo_name", None), str):
            return False
        idx = oplog.index(vault.root)
        if any(idx.damaged.values()) or oplog.hiding_damage(vault.root):
            return False
        # no folder of older-version files (none is written now): no file to look for per operation
        self._no_files[vault.root] = not os.path.lexists(vault.ops)
        return True

    def since(self, vault: "Vault", keep) -> tuple:
        """``(mark, changed, logged)`` for a pass beginning now: the feed's mark (give it to
        ``passed``), the op ids whose records changed since the last pass in ``keep``'s
        projection and the op ids the log held a state of then — ``changed`` None when every
        key must be looked at (no earlier pass, or the feed cannot tell)."""
        idx = oplog.index(vault.root)
        mark = idx.mark()
        last = self._passes.get((vault.root, getattr(keep, "memo_name", None)))
        changed = idx.changed_since(last[0]) if last is not None else None
        return mark, changed, (last[1] if last is not None else None)

    def passed(self, vault: "Vault", keep, mark: tuple, ids: Iterable[str]) -> None:
        """Remember a pass that began at ``mark``, when the log held a state of each of ``ids``."""
        self._passes[(vault.root, getattr(keep, "memo_name", None))] = (mark, frozenset(ids))

    def key(self, vault: "Vault", op_id: str) -> Optional[tuple]:
        """What ``op_id``'s manifest is read from now (None: it cannot be told, read it)."""
        if not is_op_id(op_id):
            return None
        legacy = None
        if not self._no_files.get(vault.root):
            try:
                st = os.lstat(vault.manifest_path(op_id))
                legacy = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            except FileNotFoundError:
                legacy = None
            except OSError:
                return None
        return tuple(oplog.index(vault.root).entries(op_id)), legacy

    #: what ``get`` answers for a manifest held that ``where`` does not take (not copied out)
    PASSED_OVER: dict = {}

    def get(self, root: str, op_id: str, key: Optional[tuple], keep=None, where=None) -> Optional[dict]:
        """What was held of ``op_id`` (in ``keep``'s projection) if read from ``key`` (None: as
        last read, the caller knowing nothing of it changed since), else None; ``PASSED_OVER``
        when ``where(run, kind)`` does not take it (judged on its fields held beside it)."""
        held = self._held.get((root, op_id, getattr(keep, "memo_name", None)))
        if held is None or (key is not None and held[0] != key):
            return None
        self.hits += 1
        if where is not None and not where(*held[2]):
            return self.PASSED_OVER
        return marshal.loads(held[1])

    def forget(self, root: str, op_id: str, keep=None) -> None:
        """Hold nothing of ``op_id`` (in ``keep``'s projection): it is being read again."""
        self._held.pop((root, op_id, getattr(keep, "memo_name", None)), None)

    def put(self, root: str, op_id: str, key: tuple, m: dict, keep=None) -> None:
        """Hold ``m`` (``op_id``'s manifest, in ``keep``'s projection) as read from ``key``."""
        name = (root, op_id, getattr(keep, "memo_name", None))
        try:
            self._held[name] = (key, marshal.dumps(m), (m.get("run"), m.get("kind")))
        except ValueError:
            self._held.pop(name, None)


class VaultManifests:
    """Operation manifests (a part of ``engine.vault.Vault``)."""

    # --- manifests ------------------------------------------------------------------
    def manifest_path(self, op_id: str) -> str:
        """Where an older version kept ``op_id``'s manifest (``ops/<op_id>.json``: read, never
        written now; the op id is checked, so no name leads out of the vault)."""
        if not is_op_id(op_id):
            raise VaultError(errno.EINVAL, f"{str(op_id)[:80]!r} is not an operation id; refusing it as a file name")
        return os.path.join(self.ops, f"{op_id}.json")

    def manifest_where(self, op_id: str) -> str:
        """The file that holds ``op_id``'s manifest, for messages: its segment, else its old file."""
        return oplog.segment_file(self.root, op_id) or self.manifest_path(op_id)

    def has_manifest(self, op_id: str) -> bool:
        """Whether the vault records a manifest of ``op_id`` (readable or not): a state in the
        operation log's segments (or a damaged line naming it), or an older version's file."""
        return oplog.has_state(self.root, op_id) or os.path.lexists(self.manifest_path(op_id))

    def seal_log(self) -> bool:
        """Compress the manifests this process logged here so far (a batch's end: ``oplog.seal``),
        and merge the pack index objects the batch's compactions wrote (``merge_pack_index``);
        never raises. True when there was a segment to seal and it was."""
        sealed = oplog.seal(self.root)
        self.merge_pack_index()
        return sealed

    def manifest_damage(self, op_id: str) -> Optional[str]:
        """A damaged log line that may have been one of ``op_id``'s states (file and line), or None."""
        return oplog.segment_state(self.root, op_id)[1] if oplog.has_state(self.root, op_id) else None

    def write_manifest(self, manifest: dict) -> None:
        """Record the manifest's new state in the vault's operation log (``oplog.record_manifest``:
        one fsynced line in this process's segment, its only durable record — no file of its
        own). Only in a vault of ours (``NotPrivate``)."""
        self.check_private()
        oplog.record_manifest(self.root, manifest)
        # an older version's file of it is superseded (the log now holds its whole state): it
        # goes, so a stale state of it (say, "verified" after a restore) can never come back
        old = self.manifest_path(manifest["op_id"])
        if os.path.isfile(old) and not os.path.islink(old) and oplog.segment_state(self.root, manifest["op_id"])[0]:
            with contextlib.suppress(FileNotFoundError):
                fsops.unlink(old)
                fsync_dir(self.ops)

    def read_manifest(self, op_id: str) -> dict:
        """The manifest of ``op_id``, checked (``trust.check_manifest``: ``Untrusted``, a ValueError);
        ``FileNotFoundError`` when the vault has none. A state the segments hold wins over an
        older version's file (later changes were logged there). A damaged line that may have been
        one of its records does not hide it: its last readable state is listed, restored from
        and verified (nothing a lost change said can lose a byte: a restore keeps what it
        displaces, a purged backup is refused as missing), the line is named by ``health``, the
        digests it spells out stay claimed (``referenced_blobs``), and recovery does not replay a
        journal over it (``manifest_damage``). None readable: ``Untrusted`` (``damaged_line``)."""
        from tb_footprint_plugin.engine.trust import DAMAGED_LINE, Untrusted, check_manifest

        state = None
        if oplog.has_state(self.root, op_id):
            state, damage = oplog.segment_state(self.root, op_id)
        if state is None and oplog.has_state(self.root, op_id) and oplog.manifest_readable(
                self.manifest_path(op_id), op_id):
            # only a damaged line names it in the log: an older version's readable file of it is
            # its record still (a state logged after it would have removed that file)
            path = self.manifest_path(op_id)
            with open(path, "r", encoding="utf-8") as f:
                m = json.load(f)
            check_manifest(m, path, op_id)
        elif oplog.has_state(self.root, op_id):
            where = self.manifest_where(op_id)
            if state is None:
                raise Untrusted(DAMAGED_LINE, where, f"manifest of {op_id}: no readable state ({damage}); its backups "
                                "are kept")
            m = oplog.derived(state)
            check_manifest(m, where, op_id)
        else:
            path = self.manifest_path(op_id)
            with open(path, "r", encoding="utf-8") as f:
                m = json.load(f)
            check_manifest(m, path, op_id)
        m["vault"] = self.root  # where it was found, not where the file says
        return m

    def manifest_ids(self) -> List[str]:
        """Every op id the vault records a manifest of (segments and older files), sorted."""
        ids = {op for op in oplog.index(self.root).op_ids() if oplog.has_state(self.root, op)}
        ids.update(self._legacy_ids())
        return sorted(ids)

    def _legacy_ids(self) -> List[str]:
        """The op ids of an older version's manifest files (``ops/<op_id>.json``)."""
        if not os.path.isdir(self.ops):
            return []
        return [n[:-5] for n in os.listdir(self.ops) if n.endswith(".json") and not n.startswith(".")]

    def manifests(self, keep: Optional[Callable[[dict], dict]] = None,
                  memo: Optional["ManifestMemo"] = None,
                  where: Optional[Callable[[object, object], bool]] = None) -> List[dict]:
        """Every well-formed manifest, oldest first; refused ones are listed in ``problems``
        (and counted in ``unread``: a caller deciding what no manifest claims must see 0).
        ``keep``: what of each is held, applied as it is read (a projection keeping ``op_id``
        and ``started_at``), so a pass needing a few fields of thousands holds only those.
        ``memo`` (one command's, e.g. a restore of many runs): a manifest whose records did not
        change since it was last read through it is not read again — the list is what a fresh
        read gives (the log's index is brought up to date first; while it holds a damaged line
        every one is read afresh). ``where(run, kind)``: only the manifests it takes (by their
        ``run`` and ``kind`` fields as stored) are listed — one the memo holds is judged before it
        is copied out; every refusal is still listed and counted, whatever its run."""
        from tb_footprint_plugin.engine.trust import Untrusted

        out: List[dict] = []
        self.problems = []
        self.unread = 0
        self.refused_ops = []  # the ops of those refusals: every digest their records spell out is kept
        try:
            self.check_private()
        except NotPrivate as e:
            # another user's folder, a symlink, writable by others: what it holds could be
            # anyone's; never listed as ours, so never restored from, purged or replayed
            self.problems.append(Untrusted(Failure.STATE_NOT_OURS, self.root, e.why))
            self.unread = 1
            return out
        if not os.path.isdir(self.ops) and not os.path.isdir(oplog.oplog_dir(self.root)):
            self.problems += other_users_state_findings(self.root)
            return out
        with oplog.snapshot(self.root):  # one look at the log's files for all of them
            self._read_all(out, keep, memo, where)
            # a damaged log line may have been a manifest no one can read now (its blobs claimed)
            self.unread += oplog.lost_lines(self.root)
            # one that may have been a whole manifest no readable line names is said, with its file
            for where in oplog.hiding_damage(self.root):
                file, _sep, why = where.partition(" line ")
                self.problems.append(Untrusted(Finding.DAMAGED_LINE, file, f"line {why}; a manifest may have been "
                                               f"on it: {oplog.DAMAGED_LINE_ADVICE}"))
        out.sort(key=lambda m: (m.get("started_at", 0), m.get("op_id", "")))
        self.problems += set_aside_findings(self.root)
        self.problems += other_users_state_findings(self.root)
        return out

    def manifests_of(self, op_ids: Iterable[object]) -> List[dict]:
        """The well-formed manifests of ``op_ids`` the vault records, oldest first: what
        ``manifests`` lists of them, each read alone (a page of the history reads the manifests
        it shows, not the vault's every one: issue #28). The ids are untrusted (a change log's
        lines): one that is not of the op-id format names no file and is passed over, so no id
        leads out of the vault. Nothing is read in a vault not ours (``manifests`` names it);
        a manifest refused is left out and named in ``problems``, as ``manifests`` does."""
        from tb_footprint_plugin.engine.trust import BAD_MANIFEST, Untrusted

        out: List[dict] = []
        self.problems = []
        self.unread = 0
        self.refused_ops = []  # the ops of those refusals: every digest their records spell out is kept
        wanted = sorted({op for op in op_ids if is_op_id(op)})
        if not wanted or not self.is_private():
            return out
        if not os.path.isdir(self.ops) and not os.path.isdir(oplog.oplog_dir(self.root)):
            return out
        with oplog.snapshot(self.root):  # one look at the log's files for all of them
            for op_id in wanted:
                if not self.has_manifest(op_id):
                    continue
                try:
                    out.append(self.read_manifest(op_id))
                except FileNotFoundError:
                    continue  # gone meanwhile, as ``manifests`` passes it over
                except Untrusted as e:
                    self.problems.append(e)
                    self.unread += 1
                    self.refused_ops.append(op_id)
                except (OSError, ValueError, RecursionError) as e:
                    self.problems.append(Untrusted(BAD_MANIFEST, self.manifest_where(op_id), f"unreadable ({e})"))
                    self.unread += 1
                    self.refused_ops.append(op_id)
        out.sort(key=lambda m: (m.get("started_at", 0), m.get("op_id", "")))
        return out

    def _read_all(self, out: List[dict], keep: Optional[Callable[[dict], dict]] = None,
                  memo: Optional["ManifestMemo"] = None,
                  where: Optional[Callable[[object, object], bool]] = None) -> None:
        from tb_footprint_plugin.engine.trust import BAD_MANIFEST, BAD_OP_ID, Untrusted

        if memo is not None and not memo.usable(self, keep):
            memo = None
        changed = None
        files = self._legacy_ids()
        if memo is not None:
            mark, changed, logged = memo.since(self, keep)
            if changed is not None:
                # only what the log's feed says changed, and older-version files (few: none is
                # written now), are looked at again; the rest is as the last pass read it (a
                # state, once logged, stays until the index is reset, which the feed reports)
                logged = set(logged) | {op for op in changed if oplog.has_state(self.root, op)}
                changed = set(changed) | set(files)
            else:
                logged = {op for op in oplog.index(self.root).op_ids() if oplog.has_state(self.root, op)}
            memo.passed(self, keep, mark, logged)
            ids = sorted(logged.union(files))
        else:
            ids = sorted({op for op in oplog.index(self.root).op_ids()
                          if oplog.has_state(self.root, op)}.union(files))
        for op_id in ids:
            try:
                got = None
                if changed is not None and op_id not in changed:
                    got = memo.get(self.root, op_id, None, keep, where)
                key = memo.key(self, op_id) if memo is not None and got is None else None
                if got is None and key is not None:
                    got = memo.get(self.root, op_id, key, keep, where)
                if got is None:
                    if memo is not None:
                        memo.forget(self.root, op_id, keep)  # unread, it is never taken as read
                    m = self.read_manifest(op_id)
                    got = keep(m) if keep is not None else m
                    if key is not None:
                        memo.put(self.root, op_id, key, got, keep)
                    if where is not None and not where(got.get("run"), got.get("kind")):
                        got = ManifestMemo.PASSED_OVER
                if got is not ManifestMemo.PASSED_OVER:
                    out.append(got)
            except Untrusted as e:
                self.problems.append(e)
                self.unread += 1
                self.refused_ops.append(op_id)
            except VaultError as e:
                self.problems.append(Untrusted(BAD_OP_ID, os.path.join(self.ops, op_id + ".json"), str(e)))
                self.unread += 1
                self.refused_ops.append(op_id)
            except FileNotFoundError:
                continue  # gone meanwhile (a rebuild set a corrupt one aside)
            except (OSError, ValueError, RecursionError) as e:
                self.problems.append(Untrusted(BAD_MANIFEST, self.manifest_where(op_id), f"unreadable ({e})"))
                self.unread += 1
                self.refused_ops.append(op_id)

    def unreadable_manifests(self) -> List[str]:
        """Op ids whose older-version manifest file does not parse and that the segments hold
        no state of (reported, never silently skipped)."""
        if not os.path.isdir(self.ops) or not self.is_private():
            return []
        return [n[:-5] for n in sorted(os.listdir(self.ops))
                if n.endswith(".json") and not n.startswith(".") and is_op_id(n[:-5])
                and not oplog.has_state(self.root, n[:-5])
                and not oplog.manifest_readable(os.path.join(self.ops, n), n[:-5])]

    def referenced_blobs(self, exclude_ops: Iterable[str] = (), manifests: Optional[List[dict]] = None) -> set:
        """Blob hashes that some manifest still needs: the backups of operations not purged nor
        excluded, and the blobs any manifest kept for content it displaced (``displaced``,
        ``restore_displaced``: bytes a rollback or restore found in an original's place, which
        exist nowhere else) — those of excluded and purged operations too: only their backups
        are let go, never what they kept. ``manifests``: what this object's ``manifests()``
        returned a moment ago (its ``problems`` go with them; one read shared by a command's
        passes), else read now."""
        ex = set(exclude_ops)
        refs = set()
        for m in (self.manifests() if manifests is None else manifests):
            for key in ("displaced", "restore_displaced"):
                kept = m.get(key)
                if isinstance(kept, list):
                    refs.update(d["sha256"] for d in kept if isinstance(d, dict) and is_sha256(d.get("sha256")))
            # only a manifest's own ``True`` lets its backups go: a malformed one's "no" or 1 (refused
            # by the one schema, never acted on) keeps them, as does a slim read's refused mark
            if m["op_id"] in ex or (m.get("backup_purged") is True and not refused(m)):
                continue
            refs.update(f["sha256"] for f in m.get("files", []) if f.get("sha256"))
        # a manifest refused as malformed is never acted on, but the blobs it names are kept:
        # keeping is the safe direction, and it may be a real backup in a damaged file
        segments = oplog.segments_dir(self.root) + os.sep
        for problem in self.problems:
            if not problem.file.startswith(segments):  # a segment's are the damaged_digests below
                refs |= _digests_named_in(problem.file)
        # and so are those a damaged log line spells out, or any record of an operation it may
        # have been about (its last readable state may be older than the lost one)
        with oplog.snapshot(self.root):
            # (a manifest refused as it was read, in a segment or a file, is one of them)
            refs |= oplog.damaged_digests(self.root, set(oplog.index(self.root).damaged_ops()) | set(self.refused_ops))
            if oplog.hiding_damage(self.root):
                # a damaged line that may have been a whole manifest no readable line names: the
                # blobs it claimed are unknown, so none is let go by its absence
                return EveryBlob(refs)
        return refs
