"""One read of a vault's manifests shared by a command's passes (issue #28): ``status`` lists,
checks and counts them, and the end of a batch counts what a purge would free; each pass used to
read every manifest again. A slim read keeps of each manifest what counting and checking blobs
need, not its verification (the series the check page draws: ~46 KB of a rewritten run's ~52 KB).
"""
from __future__ import annotations

import errno
import os
import stat
from typing import Callable, Iterable, List, NamedTuple, Optional, Tuple

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine import manifest, trust
from tb_footprint_plugin.engine.remote_vault import hidden_words, last_failure
from tb_footprint_plugin.engine.vault import ManifestMemo, Vault


class VaultRead(NamedTuple):
    """One read of a vault's manifests (``Vault.manifests``, every logdir's; the object's
    ``problems`` and ``unread`` go with them)."""

    vault: Vault
    manifests: List[dict]


#: what a slim read leaves out of each well-formed manifest: its verification, plan, policy and
#: retired tree (nothing that says which blobs it claims, whose it is or how it ended)
HEAVY = ("verification", "plan", "policy", "tree")
#: what a slim read keeps of a manifest's plan: the counts ``usage.freed_by_op`` subtracts, so that
#: the tab's "freed now" (a slim read) is status's (a full one): review R17 F2
PLAN_COUNTS = ("bytes_before", "linked_bytes", "hole_bytes", "twin_bytes")


def manifest_file(root: str, op_id) -> str:
    """How a refusal names a manifest of the vault at ``root`` (its records are in the oplog)."""
    return f"{root}: the manifest of operation {op_id}"


def slim(root: str) -> Callable[[dict], dict]:
    """``Vault.manifests``' projection of a slim read: a manifest the one schema takes, as a full
    read has it without ``HEAVY``; one it refuses, whole and marked ``manifest.REFUSED`` (refused
    again where it is used, named, and its blobs kept the same way). Never the schema's reading of
    it: a slim read answers what a full one does (a disk manifest carrying a bucket's
    ``status``/``purged`` aliases read as restored or purged by the one and not the other let a
    release free a blob another operation still claimed — review R3 F1)."""
    def keep(m: dict) -> dict:
        try:
            manifest.read(m, manifest_file(root, m.get("op_id")))
        except trust.Untrusted:
            # never taken for a restored or purged operation (``manifest.refused``)
            return dict(m, **{manifest.REFUSED: True})
        out = {k: v for k, v in m.items() if k not in HEAVY and k != manifest.REFUSED}
        plan = m.get("plan")
        if isinstance(plan, dict):
            out["plan"] = {k: plan[k] for k in PLAN_COUNTS if k in plan}
        return out
    keep.memo_name = "slim"  # a ``Vault.ManifestMemo`` holds it apart from full reads
    return keep


def read_roots(roots: Iterable[str], slim_read: bool = False,
               memo: Optional[ManifestMemo] = None, where=None) -> List[VaultRead]:
    """The vaults at ``roots`` read once each; ``slim_read``: each manifest projected by ``slim``
    as it is read, so a pass over thousands holds no verification. ``memo``: the command's
    (``Vault.manifests``), so what did not change since its last read is not read again;
    ``where(run, kind)``: only the manifests it takes are listed (``Vault.manifests``)."""
    out = []
    for root in roots:
        v = Vault(root)
        # a plain read passes nothing: what a caller (or a test counting reads) wraps is the bare call
        kw = {"memo": memo} if memo is not None else {}
        if where is not None:
            kw["where"] = where
        out.append(VaultRead(v, v.manifests(slim(v.root), **kw) if slim_read else v.manifests(**kw)))
    return out


class StateUnreadable(PermissionError):
    """This user's own state folder or vault exists but this user cannot list or enter it (its
    mode): its backups, journals and records are out of sight, so no verb may say "nothing to
    restore" or "no changes recorded" of it (review R16 F16). ``code`` is ``StoreError.PERMISSION``;
    the message names the folder, its mode and what gives it back."""

    code = StoreError.PERMISSION

    def __init__(self, path: str, what: str, err: OSError, mode: Optional[int]):
        shown = f"mode {stat.S_IMODE(mode):04o}, " if mode is not None else ""
        bits = "rw" if mode is not None and not stat.S_ISDIR(mode) else "rwx"
        super().__init__(err.errno or errno.EACCES,
                         f"{what} {path} cannot be read ({shown}{err.strerror or err}): what it records is "
                         f"out of sight, so nothing is said of it and nothing is changed; "
                         f"`chmod u+{bits} {path}` gives it back")
        self.filename = path

    def __str__(self) -> str:  # the message alone (OSError's default adds "[Errno 13]")
        return self.strerror or ""


def refuse_unreadable(folder: str, what: str = "state folder") -> None:
    """``StateUnreadable`` naming ``folder`` when it is a folder of this user's that this user
    cannot list or enter; nothing when it is absent, or not ours (``check_private`` says that)."""
    try:
        st = os.lstat(folder)
    except OSError:
        return
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return
    try:
        with os.scandir(folder):  # listing needs read permission
            pass
        os.lstat(os.path.join(folder, "."))  # a name in it needs search permission
    except PermissionError as e:
        raise StateUnreadable(folder, what, e, st.st_mode) from None


def unreadable_file(path: str, what: str, err: PermissionError) -> StateUnreadable:
    """``StateUnreadable`` for a state file this user may not read (``err``: the refusal)."""
    try:
        mode: Optional[int] = os.lstat(path).st_mode
    except OSError:
        mode = None
    return StateUnreadable(path, what, err, mode)


def blob_unreadable(vault: Vault, sha: str) -> Optional[str]:
    """Why this user cannot read the backup of ``sha`` although it is there (the file refused,
    with the system's words), or None: readable, or missing or damaged (``Vault.check_blob``
    says those). A backup this user may not read is never called damaged (review R16 F16)."""
    try:
        with vault.open_blob(sha):
            return None
    except PermissionError as e:
        return f"{e.filename or vault.blob_path(sha)}: {e.strerror or e}"
    except (OSError, ValueError):
        return None


def hidden_by_index(vault: Vault, sha: str) -> Optional[str]:
    """Why the backup of ``sha`` reads as missing when only a damaged index object of the vault's
    packs may list it (``Vault.hidden_by_damaged_index``): the words naming those objects and
    saying that ``recover`` looks for it in the packs; None otherwise (missing or damaged as
    ``Vault.check_blob`` says). A restore or verify says it with ``Failure.BACKUP_INDEX_DAMAGED``."""
    names = vault.hidden_by_damaged_index(sha)
    if not names:
        return None
    return hidden_words(names)


#: kinds of ``missing_backup``: the four ways a backup that does not check is said
DAMAGED, UNREADABLE, HIDDEN, ARCHIVED = "damaged", "unreadable", "hidden", "archived"


def archived_backup(vault: Vault, sha: str) -> Optional[str]:
    """What the read of ``sha``'s offloaded backup just met when its remote object is in an
    archive storage class (``StoreError.ARCHIVED``: S3 GLACIER/DEEP_ARCHIVE, Azure's Archive
    tier): ``remote_vault.archived_words`` naming the object and what to ask the store for; None
    otherwise. Told by the code of the last read of it in this process (``remote_vault.last_failure``,
    which each new read of a remote blob clears first), never by words: an archived backup is
    not damaged (helper S's note on R24 F8)."""
    if vault.blob_form(sha) != "remote":
        return None
    e = last_failure(vault.root, sha)
    if e is None or e.code != StoreError.ARCHIVED:
        return None
    return str(e)


def missing_backup(vault: Vault, path: str, sha: str) -> Tuple[str, str]:
    """How the backup of ``path`` (``sha``), which did not check, is said: ``(kind, entry)``, kind
    ``UNREADABLE`` (there, but this user may not read it: never called damaged, review R16 F16),
    ``ARCHIVED`` (offloaded to a remote object its store keeps in an archive class: readable once
    the store restores it, never called damaged; the entry names the object and what to ask for),
    ``HIDDEN`` (only a damaged pack index may list it, named: review R22 F3) or ``DAMAGED``; entry
    the path with the reason where there is one. The one rule for verify and restore alike."""
    why = blob_unreadable(vault, sha)
    if why is not None:
        return UNREADABLE, f"{path} ({why})"
    archived = archived_backup(vault, sha)
    if archived is not None:
        return ARCHIVED, f"{path} ({archived} [{StoreError.ARCHIVED}])"
    hid = hidden_by_index(vault, sha)
    if hid is not None:
        return HIDDEN, f"{path} ({hid})"
    return DAMAGED, path


__all__ = ["ARCHIVED", "DAMAGED", "HEAVY", "HIDDEN", "StateUnreadable", "UNREADABLE", "VaultRead", "archived_backup", "blob_unreadable",
           "hidden_by_index", "manifest_file", "missing_backup", "read_roots", "refuse_unreadable", "slim",
           "unreadable_file"]
