"""The remote half of a local vault: which backups live in a bucket, and reading them back.

A local logdir given ``--backup-dir s3://…`` (``gs://``, ``az://``) keeps its transaction local
(hard links into ``.tb-footprint``, verify, swap, commit, compaction); ``engine.offload`` then
moves each committed backup into a ``storage.blobstore.BlobStore`` under that URL. What this
module keeps, in the local vault (a state folder of ours), is:

* ``remote.json``: ``{"url": <store URL>}``, the remote vault new offloads go to, so
  ``restore``, ``purge``, ``status`` and the tab work without repeating ``--backup-dir``;
* ``blobs/ab/<sha>.remote``: one record per blob the store has verified, ``{"sha", "url",
  "size", "key"}``, written (fsynced) before the local forms of that blob are unlinked.

Both are untrusted input: a record is taken only when it is a regular file (never through a
link) whose sha is its own name and whose URL is a bucket URL; anything else reads as "no
record" (the blob is then missing, which restore and purge refuse on, never guess past).

The local vault's own packs (issue #27 item 2) are the same format read through the same code:
small backups go into a ``BlobStore`` over a ``PosixStore`` at ``<vault>/packs``
(``Vault.compact_all``, ``pack_store``), whose index says which digests it holds (no record file
per blob: on a local disk that file would cost the block the pack saves). ``open_packed`` and
``check_packed`` read them as ``open_remote`` and ``check_remote`` read an offloaded one: a
``_Checked`` stream that hashes every byte, failures as ``RemoteReadError`` naming the pack file.

Why one module: the vault's blob stores other than its own files — the remote vault and the
local packs — are read through one checked stream, one failure type and one cache of stores;
apart, the local packs would need a second copy of the stream that hashes and names what it read.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import stat
import threading
import time
from typing import BinaryIO, Dict, List, Optional, Tuple

from tb_footprint_plugin.codes import BlobError, StoreError
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.blob_salvage import Salvage, salvage
from tb_footprint_plugin.storage.blobstore import BlobFailure, BlobStore
from tb_footprint_plugin.storage.files import CHUNK, atomic_write_json, fsync_dir, hash_and_count
from tb_footprint_plugin.storage import scratch, zst
from tb_footprint_plugin.storage.paths import is_sha256
from tb_footprint_plugin.storage.private import NotPrivate, check_private_dir, ensure_private_dir
from tb_footprint_plugin.storage.regular import open_regular
from tb_footprint_plugin.storage.remote import is_bucket_url
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_posix import PosixStore
from tb_footprint_plugin.storage.stores import open_store

#: suffix of the record saying a blob's bytes live in the remote vault
REMOTE_SUFFIX = ".remote"
#: the file in a vault naming its remote vault
REMOTE_CONFIG = "remote.json"
#: the folder of the vault's own pack store inside the vault
PACKS_DIR = "packs"
#: a record or config larger than this is not one of ours (never read whole)
_RECORD_LIMIT = 64 << 10

_stores: Dict[str, BlobStore] = {}
_stores_lock = threading.Lock()
#: the last read failure per (vault, sha), so a caller that only learnt "not readable" (a
#: restore's pre-check) can name the object and the store's code; bounded
_failures: Dict[tuple, "RemoteReadError"] = {}
_FAILURES_KEPT = 256
#: ``remote.json`` as last read per vault, with the file's identity then: a restore or purge
#: reads a record per blob, and each record is checked against the known URLs (read once, then
#: only ``lstat``-ed until the file changes)
_urls: Dict[str, Tuple[tuple, List[str]]] = {}
_URLS_KEPT = 64

# A remote blob read whole by a check (a restore checks every backup of a run before it replaces
# anything) is kept for the copy that follows, which then does not download it again (issue #27)
# — in memory, and only while it and the copies kept beside it fit in ``STAGE_BYTES``. Nothing is
# staged on the local disk: a restore needs no free room beyond the files it puts back, each
# streamed into a temporary name beside its target, hashed on the way, and renamed into place
# (``Vault.restore_blob``); memory stays bounded whatever the blob's size or the run count. A larger
# blob (``read_twice``) is checked by a restore by streaming it into its target's temporary, which
# the put-back renames (``engine.restore_staged``): one download too. A kept copy is a cache, never trusted:
# its reader hashes what it reads (the restore refuses a copy that does not hash to the digest);
# taken by the first read, dropped after ``STAGE_SECONDS`` otherwise.
# A lone blob (an object of its own, not packed) is kept as stored — its zstd frame, a fraction of
# its size for most backups — and decoded again by the read that takes it; a packed one (small) as
# decoded.
_staged: Dict[Tuple[str, str], Tuple[List[bytes], float, str]] = {}  # (vault, sha) -> (chunks, when, form)
#: a kept copy not read within this many seconds is dropped (a check no restore followed; a
#: restore checks a whole run before its first copy, minutes for gigabytes)
STAGE_SECONDS = 300.0
#: the bytes of every kept copy together, as kept (and so the largest kept): a fixed bound of memory
STAGE_BYTES = 32 << 20
#: at most this many kept copies at once (empty blobs weigh nothing)
STAGE_KEPT = 4096
#: vaults whose ``offload`` folder was swept of the disk stages an earlier version left
_swept: set = set()


class RemoteReadError(OSError):
    """A blob recorded remote could not be read or did not verify. ``code``: a
    ``codes.BlobError`` or ``codes.StoreError`` member; ``key``: the object the message names."""

    def __init__(self, code, key: str, message: str):
        super().__init__(errno.EIO, message)
        self.code = code
        self.key = key

    def __str__(self) -> str:
        return self.strerror


def _code_of(e: Exception):
    """The most specific code of a blob store failure: the store's own (``archived`` for an
    object in an archive class the store will not read yet, ``not_found``, …) when the blob store
    wrapped one."""
    inner = e.__cause__ or e.__context__
    if isinstance(e, BlobFailure) and e.code == BlobError.STORE and isinstance(inner, StoreFailure):
        return inner.code
    return e.code


def archived_words(name: str) -> str:
    """What a reader says of the object ``name`` (``<store URL>/<key>``) its store keeps in an
    archive class (``StoreError.ARCHIVED``: S3 GLACIER or DEEP_ARCHIVE, Azure's Archive tier; R24
    F8, where a restore said "backup damaged or missing … permission_denied"): nothing is lost, the
    store serves it once restored (rehydrated), and how to ask for that."""
    scheme, _, rest = name.partition("://")
    bucket, _, key = rest.partition("/")
    if scheme in ("az", "abfs", "abfss"):
        how = (f"Azure: rehydrate it to the Hot or Cool tier, e.g. az storage blob set-tier --container-name {bucket} "
               f"--name {key} --tier Hot --rehydrate-priority Standard; up to 15 h")
    elif scheme in ("s3", "s3a"):
        how = (f"aws s3api restore-object --bucket {bucket} --key {key} --restore-request Days=7; "
               "minutes to 48 h by the class and tier")
    else:
        how = "aws s3api restore-object …; Azure: rehydrate it to the Hot or Cool tier"
    return (f"{name}: archived (the store keeps it in an archive storage class): ask the store to restore it "
            f"({how}), then restore again; the backup is not damaged, nothing was lost")


def _read_error(vault_root: str, sha: str, name: str, e: Exception) -> "RemoteReadError":
    """The ``RemoteReadError`` of a blob store failure reading ``sha`` (remembered for
    ``last_failure``): its most specific code, naming the object; an archived one with
    ``archived_words`` (the failing object's key where the failure names one)."""
    code = _code_of(e)
    if code == StoreError.ARCHIVED:
        key = getattr(e, "key", "") or getattr(e.__cause__ or e.__context__, "key", "")
        rec = read_record(vault_root, sha)
        if key and rec is not None and not name.endswith("/" + key):
            name = f"{rec['url'].rstrip('/')}/{key}"
        return _remember(vault_root, sha, RemoteReadError(code, name, archived_words(name)))
    return _remember(vault_root, sha, RemoteReadError(code, name, f"{name}: {e}"))


def _remember(vault_root: str, sha: str, e: "RemoteReadError") -> "RemoteReadError":
    with _stores_lock:
        if len(_failures) >= _FAILURES_KEPT:
            _failures.pop(next(iter(_failures)))
        _failures[(vault_root, sha)] = e
    return e


def last_failure(vault_root: str, sha: str) -> Optional["RemoteReadError"]:
    """The last ``RemoteReadError`` reading ``sha`` from ``vault_root``'s remote vault met in
    this process (its code and the object it names), None when none."""
    return _failures.get((vault_root, sha))


def record_path(vault_root: str, sha: str) -> str:
    """``<vault>/blobs/ab/<sha>.remote`` (the digest is checked by the caller's ``blob_path``)."""
    return os.path.join(vault_root, "blobs", sha[:2], sha + REMOTE_SUFFIX)


def _read_small_json(path: str):
    with open_regular(path) as f:  # a planted link or FIFO is never followed
        data = f.read(_RECORD_LIMIT + 1)
    if len(data) > _RECORD_LIMIT:
        raise ValueError(f"{path} is larger than any file of ours")
    return json.loads(data.decode("utf-8"))


def read_record(vault_root: str, sha: str) -> Optional[dict]:
    """The record that ``sha`` lives in the remote vault, or None (absent, or not a record of
    ours: malformed, a link, a sha that is not its name, a URL that is not one of the remote
    vaults this vault offloaded to, ``remote.json``)."""
    if not is_sha256(sha):
        return None
    try:
        rec = _read_small_json(record_path(vault_root, sha))
    except (OSError, ValueError, RecursionError):
        return None
    if (not isinstance(rec, dict) or rec.get("sha") != sha or not isinstance(rec.get("url"), str)
            or not is_bucket_url(rec["url"]) or isinstance(rec.get("size"), bool)
            or not isinstance(rec.get("size"), int) or rec["size"] < 0):
        return None
    if rec["url"] not in known_urls(vault_root):
        return None  # a store this vault never offloaded to: never read from, never pruned
    return rec


def has_record(vault_root: str, sha: str) -> bool:
    """Whether a record file stands for ``sha`` (present as a regular file; not parsed)."""
    with contextlib.suppress(OSError):
        return stat.S_ISREG(os.lstat(record_path(vault_root, sha)).st_mode)
    return False


def write_record(vault_root: str, sha: str, url: str, size: int, key: str,
                 mtime_ns: Optional[int] = None) -> None:
    """Record durably (temp, fsync, rename, folder fsync) that the store at ``url`` holds a
    verified copy of ``sha``: the step that must precede any unlink of the local blob.
    ``mtime_ns``: the local blob's modification time (a salvaged backup's restore takes it: its
    late writer's last write), which the store does not keep."""
    doc = {"sha": sha, "url": url, "size": int(size), "key": key}
    if isinstance(mtime_ns, int) and not isinstance(mtime_ns, bool):
        doc["mtime_ns"] = mtime_ns
    for attempt in range(4):
        try:
            atomic_write_json(record_path(vault_root, sha), doc, compact=True)
            return
        except (FileNotFoundError, NotPrivate) as e:
            # its shard folder, empty while the blob was only packed, removed meanwhile by a
            # compaction's ``Vault.prune_shards`` (a folder of ours found missing when checked):
            # made again (``atomic_write_json``) and tried again
            if attempt == 3 or (isinstance(e, NotPrivate) and os.path.lexists(e.path)):
                raise  # a folder there that is not ours: refused as ever


def drop_record(vault_root: str, sha: str) -> bool:
    """Remove ``sha``'s record (after the store forgot the blob); True when one was there."""
    with _stores_lock:
        _drop_staged((vault_root, sha))  # a staged copy of a blob no longer backed up
    p = record_path(vault_root, sha)
    try:
        if not stat.S_ISREG(os.lstat(p).st_mode):
            return False
        os.unlink(p)
    except FileNotFoundError:
        return False
    with contextlib.suppress(FileNotFoundError):  # the emptied shard folder pruned meanwhile: gone with it
        fsync_dir(os.path.dirname(p))
    return True


def configured_url(vault_root: str) -> Optional[str]:
    """The remote vault's URL this vault offloads to (``remote.json``), None when it has none
    or the file is not one of ours."""
    try:
        d = _read_small_json(os.path.join(vault_root, REMOTE_CONFIG))
    except (OSError, ValueError, RecursionError):
        return None
    url = d.get("url") if isinstance(d, dict) else None
    return url if isinstance(url, str) and is_bucket_url(url) else None


def known_urls(vault_root: str) -> List[str]:
    """Every remote vault this vault has offloaded to: the current one and the earlier ones
    (``remote.json``'s ``previous``). Only these are ever asked to forget a blob, whatever URL
    a record names. Read once per process while the file stays the same (its inode, size,
    mtime and ctime): ``read_record`` asks it for every blob."""
    path = os.path.join(vault_root, REMOTE_CONFIG)
    try:
        st = os.lstat(path)
    except OSError:
        return []
    sig = (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)
    with _stores_lock:
        got = _urls.get(vault_root)
    if got is not None and got[0] == sig:
        return list(got[1])
    try:
        d = _read_small_json(path)
    except (OSError, ValueError, RecursionError):
        return []
    if not isinstance(d, dict):
        return []
    urls = [d.get("url")] + (d.get("previous") if isinstance(d.get("previous"), list) else [])
    urls = [u for u in urls if isinstance(u, str) and is_bucket_url(u)]
    with _stores_lock:
        if len(_urls) >= _URLS_KEPT and vault_root not in _urls:
            _urls.pop(next(iter(_urls)))
        _urls[vault_root] = (sig, urls)
    return list(urls)


def set_configured_url(vault_root: str, url: str) -> None:
    """Remember ``url`` as the remote vault (the vault folder must exist and be ours); the one it
    replaces stays listed as ``previous`` (its blobs are still read, and forgotten by purge)."""
    if not is_bucket_url(url):
        raise ValueError(f"{url!r} is not an s3://, gs:// or az:// URL naming a bucket")
    previous = [u for u in known_urls(vault_root) if u != url]
    atomic_write_json(os.path.join(vault_root, REMOTE_CONFIG), {"url": url, "previous": previous})


def blobstore(url: str, fresh: bool = False) -> BlobStore:
    """The ``BlobStore`` at ``url``, one per process (its index is loaded once); ``fresh``
    reloads it (another process may have added blobs since)."""
    with _stores_lock:
        bs = _stores.get(url)
        if bs is None or fresh:
            store = open_store(url)
            # a vault writes with conditions: its client is made now, not at the first large blob
            # (since abcb9ea made it lazy for scans), so a process's memory does not step up with
            # the size of what it offloads
            store.prepare_writes()
            bs = _stores[url] = BlobStore(store)
        return bs


def hidden_words(names: List[str]) -> str:
    """Why a backup reads as missing while only the damaged index objects ``names`` may list it:
    a restore or verify says it (``Failure.BACKUP_INDEX_DAMAGED`` where it has a code) for a
    disk's packs (``vault_reads.hidden_by_index``), a bucket's blob folder
    (``engine.bucket_blob_index``) and a remote vault alike."""
    return (f"listed by no index object of the vault's packs that reads; {', '.join(names)} does not read and may "
            "list it: `tb-footprint recover` looks for it in the packs (each slice hashed) and lists it anew")


#: (vault root, URL) whose remote index this process looked through already
#: (``rebuild_remote_index``): a blob still missing after one walk of the packs is missing, not
#: looked for again at every read of the same restore or verify
_rebuilt: set = set()


def _recorded(vault_root: str, url: str, skip=lambda sha: False) -> Dict[str, int]:
    """sha256 -> size of the records of this vault (``read_record``'s checks) naming ``url``,
    but those whose digest ``skip`` says (asked of the file's name, before its record is read)."""
    out: Dict[str, int] = {}
    base = os.path.join(vault_root, "blobs")
    try:
        shards = sorted(os.listdir(base))
    except OSError:
        return out
    for sub in shards:
        if len(sub) != 2:
            continue
        try:
            names = os.listdir(os.path.join(base, sub))
        except OSError:
            continue
        for n in names:
            sha = n[:-len(REMOTE_SUFFIX)]
            if not n.endswith(REMOTE_SUFFIX) or skip(sha):
                continue
            rec = read_record(vault_root, sha)
            if rec is not None and rec["url"] == url:
                out[rec["sha"]] = rec["size"]
    return out


def recorded_blobs(vault_root: str, url: str) -> Dict[str, int]:
    """sha256 -> size of every record of this vault (``read_record``'s checks) naming ``url``:
    the blobs the vault offloaded there and has not forgotten (a forget drops the record)."""
    return _recorded(vault_root, url)


def unlisted_records(vault_root: str, url: str, bs: BlobStore) -> Dict[str, int]:
    """sha256 -> size of the blobs this vault's records say it offloaded to ``url`` that no valid
    index object of ``bs`` (that remote vault, as last read) lists: what a lost or removed index
    object leaves (review R24 F2, R23 T13's remote twin). A record is named by its digest, so a
    vault whose every record is listed costs one listing of its ``blobs/`` folders and no read;
    only an unlisted digest's record is read (its URL must be ``url``)."""
    return _recorded(vault_root, url, skip=lambda sha: not is_sha256(sha) or bs.has(sha))


def rebuild_remote_index(vault_root: str, url: str) -> Optional[Salvage]:
    """While an index object of the remote vault at ``url`` is damaged, or a blob this vault's
    records say it holds there is listed by no index object (one lost or removed:
    ``unlisted_records``), the blobs its records name (``recorded_blobs``) that no valid index
    object lists, found again in its packs and listed anew (``storage.blob_salvage.salvage``: every slice
    hashed and matched to a record's sha256 and size; nothing deleted, the damaged object kept,
    and while it stands no forget deletes anything). None when nothing is damaged, ``url`` is
    not a remote vault this vault offloaded to (``known_urls``) or the vault is not a folder of
    ours (its records and ``remote.json`` are then no word of ours). Costs a fresh listing of the
    remote index (a GET per index object this process has not read): called for ``recover``
    (``pack_index_rebuilt.rebuild_remote_indexes``) and where a read found a blob missing, which
    reloaded that index anyway (``open_remote``), never at every start. The walk over the vault's
    records (``recorded_blobs``) is paid on that rare path only.
    ``BlobFailure``/``StoreFailure`` as the store fails."""
    if url not in known_urls(vault_root):
        return None
    try:
        check_private_dir(vault_root)
    except (NotPrivate, OSError):
        return None
    bs = blobstore(url, fresh=True)
    wanted = recorded_blobs(vault_root, url) if bs.damaged_index() else unlisted_records(vault_root, url, bs)
    if not wanted:
        return None
    got = salvage(bs, wanted)
    with _stores_lock:
        _rebuilt.add((vault_root, url))
    return got


#: ``BlobStore`` step -> the engine's failpoint for the vault's own packs (``faults.STEPS``): adds
#: happen in a reduce's compaction, forgets in a purge (or a restore's release)
#: the pack store's own steps of an add, under the engine's names; a forget names its steps itself
#: (``Vault``'s release passes ``purge.pack_*``/``repack.*``, the batch end's merge ``merge.*``)
PACK_STEPS = {"add.data_written": "reduce.pack_written", "add.verified": "reduce.pack_verified",
              "add.index_written": "reduce.pack_indexed"}


def _pack_failpoint(step: str) -> None:
    name = PACK_STEPS.get(step)
    if name is not None:
        faults.hit(name)


#: every blob given to the vault's pack store goes into a pack (the vault chose it as small)
_PACK_ALL = 1 << 62


def packs_root(vault_root: str) -> str:
    """``<vault>/packs``: the folder of the vault's own pack store."""
    if isinstance(vault_root, str) and vault_root.startswith("/"):
        return _abs_packs_root(vault_root)  # no cwd involved: the same answer every time
    return os.path.join(os.path.abspath(vault_root), PACKS_DIR)


@functools.lru_cache(maxsize=64)
def _abs_packs_root(vault_root: str) -> str:
    # a restore asks this ~35 times a blob (packed_ref, pack_store, has_packs): abspath each time
    # was a tenth of the packed restore's extra time; bounded, so no growth with vaults seen
    return os.path.join(os.path.abspath(vault_root), PACKS_DIR)


def _is_real_dir(p: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(p).st_mode)  # a link is S_IFLNK under lstat: not a real folder
    except OSError:
        return False


def has_packs(vault_root: str) -> bool:
    """Whether the vault has a pack store (a real folder, not a link)."""
    return _is_real_dir(packs_root(vault_root))


def pack_store(vault_root: str, fresh: bool = False, create: bool = False) -> Optional[BlobStore]:
    """The vault's own pack store (``<vault>/packs``), one per process and vault (its index
    listed once; ``fresh`` lists it again); None when the vault has none and ``create`` is not
    given (a reader makes nothing). ``create`` makes the folder (0700, checked ours from the
    vault down) first."""
    root = packs_root(vault_root)
    if create:
        for sub in ("data", "index"):  # made 0700 here: the store would make them with the umask's mode
            ensure_private_dir(os.path.join(root, sub), os.path.abspath(vault_root))
    elif not has_packs(vault_root):
        return None
    key = "packs:" + root
    with _stores_lock:
        bs = _stores.get(key)
        if bs is None or fresh:
            bs = _stores[key] = BlobStore(PosixStore(root), pack_below=_PACK_ALL, failpoint=_pack_failpoint)
        return bs


def tighten_pack_dirs(vault_root: str, keys) -> None:
    """The folders (``data/xx``) the pack store made for ``keys`` made 0700, as every folder of
    the vault is (the store makes them with the umask's mode); only real folders of ours."""
    root = packs_root(vault_root)
    for folder in sorted({os.path.dirname(k) for k in keys if isinstance(k, str)}):
        p = os.path.join(root, folder)
        with contextlib.suppress(OSError):
            st = os.lstat(p)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and st.st_mode & 0o077:
                os.chmod(p, 0o700)  # inside the vault, a folder of ours: no one else can swap it


def packed_ref(vault_root: str, sha: str):
    """The ``BlobRef`` of ``sha`` in the vault's packs, or None (no packs, not listed, or the
    index unreadable: a reader then finds the blob missing, never guesses). The cached index is
    listed again whenever ``<vault>/packs/index`` changed since (another process packed or
    forgot blobs; index objects already parsed are not read again): one ``lstat`` a look-up."""
    try:
        bs = pack_store(vault_root)
        if bs is None:
            return None
        sig = _index_signature(vault_root)
        with _stores_lock:
            seen = _listed_at.get(id(bs))
        if seen != sig:
            bs.reload()  # the signature was taken first: a change during the listing is seen next time
            with _stores_lock:
                if len(_listed_at) >= _URLS_KEPT:
                    _listed_at.clear()
                _listed_at[id(bs)] = sig
        return bs.ref(sha)
    except (BlobFailure, StoreFailure, OSError):
        return None


#: the signature of ``<vault>/packs/index`` each cached pack store (by id) was listed at
_listed_at: Dict[int, tuple] = {}


def _index_signature(vault_root: str) -> tuple:
    try:
        st = os.lstat(os.path.join(packs_root(vault_root), "index"))
        return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_nlink)
    except OSError:
        return ()


def open_packed(vault_root: str, sha: str, ref=None) -> BinaryIO:
    """The original bytes of a backup in the vault's packs, streamed and hashed as they are read
    (``RemoteReadError`` naming the pack file, with the store's code, when the pack is damaged
    or gone); ``FileNotFoundError`` when the packs do not list it. ``ref``: the caller's
    ``packed_ref`` of ``sha`` just taken (not looked up twice; only its key and size are used:
    the store's ``open`` reads the blob from its own index, hashed as read)."""
    if ref is None:
        ref = packed_ref(vault_root, sha)
    if ref is None:
        raise FileNotFoundError(errno.ENOENT, f"no backup of sha256 {sha[:12]}… in {vault_root}")
    bs = pack_store(vault_root)
    name = os.path.join(packs_root(vault_root), ref.key)
    try:
        return _Checked(bs.open(sha), name, vault_root, sha, ref.size)
    except (BlobFailure, StoreFailure) as e:
        raise _remember(vault_root, sha, RemoteReadError(_code_of(e), name, f"{name}: {e}")) from None


def check_packed(vault_root: str, sha: str) -> Optional[RemoteReadError]:
    """None when the packed backup reads back whole and hashes to ``sha``; else why (coded)."""
    try:
        with open_packed(vault_root, sha) as f:
            got, _n = hash_and_count(f)
    except RemoteReadError as e:
        return e
    except FileNotFoundError as e:
        return RemoteReadError(BlobError.MISSING, packs_root(vault_root), str(e))
    if got != sha:
        name = packs_root(vault_root)
        return _remember(vault_root, sha, RemoteReadError(BlobError.CORRUPT, name,
                                                          f"{name}: sha256 {sha[:12]}… reads back as other bytes"))
    return None


class _Checked:
    """A blob store stream whose failures are ``RemoteReadError``s naming the object (readers of
    the vault catch ``OSError``). With ``stage`` (an empty list) the chunks read are also kept
    there (as read: never joined, so never held twice); a stream read to its end — the blob store's stream has then hashed it to ``sha``
    — leaves them kept for the next read of the blob (``_take``)."""

    def __init__(self, f: BinaryIO, name: str, vault_root: str, sha: str, size: int = -1,
                 stage: Optional[List[bytes]] = None):
        self.f, self.name, self.at = f, name, (vault_root, sha)
        self.size, self.n, self.stage = size, 0, stage
        self.served = False  # the store served bytes of it: a failure remembered before is over

    def read(self, n: int = -1) -> bytes:
        try:
            data = self.f.read(n)
        except (BlobFailure, StoreFailure) as e:
            self.stage = None
            raise _read_error(*self.at, self.name, e) from None
        if data and not self.served:
            # the store serves it now (an archived object restored since, a connection back):
            # ``last_failure`` no longer says why it does not read (a later failure is remembered anew)
            self.served = True
            with _stores_lock:
                _failures.pop(self.at, None)
        if self.stage is not None:
            if data:
                self.n += len(data)
                if self.n > min(self.size, STAGE_BYTES):
                    self.stage = None  # more than the blob's size: never kept (the reader is told by the hash)
                else:
                    self.stage.append(bytes(data))
            elif n != 0:
                self._staged()
        return data

    def _staged(self) -> None:
        chunks, self.stage = self.stage, None
        if self.n == self.size:
            _keep(self.at, chunks, "raw")

    def seek(self, *a):  # readers seek only to rewind a local blob; a remote one is read once
        raise OSError(errno.ESPIPE, "a remote blob's stream is read once")

    def close(self) -> None:
        self.stage = None  # not read to its end: nothing kept
        with contextlib.suppress(Exception):
            self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _staged_bytes() -> int:
    """Bytes of every kept copy (hold ``_stores_lock``)."""
    return sum(len(c) for chunks, _t, _f in _staged.values() for c in chunks)


def _keep(at: Tuple[str, str], chunks: List[bytes], form: str) -> None:
    """Keep a blob read whole and verified (``chunks`` as stored in ``form``), the oldest kept
    copies let go first to stay within ``STAGE_BYTES`` and ``STAGE_KEPT``."""
    n = sum(map(len, chunks))
    if n > STAGE_BYTES:
        return
    with _stores_lock:
        _staged.pop(at, None)
        while _staged and (len(_staged) >= STAGE_KEPT or _staged_bytes() + n > STAGE_BYTES):
            _staged.pop(next(iter(_staged)))
        _staged[at] = (chunks, time.monotonic(), form)
    _expire_later()


#: stored bytes one ranged read of a lone blob asks for (as the blob store's reads)
STORED_READ = 4 << 20


class _Stored:
    """The stored bytes of a lone blob (``ref``: its whole object) in ranged reads of
    ``STORED_READ``, each also appended to ``keep`` while they stay within ``STAGE_BYTES``."""

    def __init__(self, store, ref, keep: Optional[List[bytes]]):
        self.store, self.ref, self.keep = store, ref, keep
        self.at, self.buf, self.pos = 0, b"", 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if self.pos >= len(self.buf):
            left = self.ref.length - self.at
            if left <= 0:
                return b""
            start = self.ref.offset + self.at
            data = self.store.read_range(self.ref.key, start, start + min(left, STORED_READ))
            if not data:  # shorter than the index says: the verification below names it
                raise BlobFailure(BlobError.CORRUPT, f"ends after {self.at} of its {self.ref.length} stored bytes",
                                  sha=self.ref.sha, key=self.ref.key)
            self.at += len(data)
            self.buf, self.pos = data, 0
            if self.keep is not None:
                self.keep.append(data)
        end = len(self.buf) if n is None or n < 0 else min(len(self.buf), self.pos + n)
        out = self.buf if (self.pos, end) == (0, len(self.buf)) else self.buf[self.pos:end]
        self.pos = end
        return out

    def close(self) -> None:
        self.buf = b""


class _Lone:
    """A lone blob read from its object, decoded and hashed: at the end (or past its size)
    ``BlobFailure(CORRUPT)`` unless the bytes are exactly the blob's, as the blob store's own
    stream; read whole and verified, its stored bytes are kept (``_keep``)."""

    def __init__(self, store, ref, at: Tuple[str, str]):
        self.ref, self.at = ref, at
        self.raw = _Stored(store, ref, [] if ref.length <= STAGE_BYTES else None)
        self.dec = zst.open_decompressed(self.raw) if ref.form == "zst" else self.raw
        self.h, self.n, self.ended = hashlib.sha256(), 0, False

    def _corrupt(self, why: str) -> BlobFailure:
        return BlobFailure(BlobError.CORRUPT, why, sha=self.ref.sha, key=self.ref.key)

    def read(self, n: int = -1) -> bytes:
        if self.ended:
            return b""
        try:
            data = self.dec.read(CHUNK if n is None or n < 0 else n)
        except zst.DecodeError as e:
            raise self._corrupt(f"does not decode: {e}") from None
        if data:
            self.n += len(data)
            if self.n > self.ref.size:
                raise self._corrupt(f"decodes to more than its {self.ref.size} bytes")
            self.h.update(data)
            return data
        if n == 0:
            return data
        self.ended = True
        if self.n != self.ref.size or self.h.hexdigest() != self.ref.sha:
            raise self._corrupt(f"decodes to {self.n} bytes that do not hash to its sha256")
        if self.raw.keep is not None:
            _keep(self.at, self.raw.keep, self.ref.form)
        return b""

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.dec.close()


class _Kept:
    """A kept copy read back: its chunks served in order, each let go as it is read."""

    def __init__(self, chunks: List[bytes]):
        self._chunks, self._at = list(chunks), 0

    def read(self, n: int = -1) -> bytes:
        if not self._chunks:
            return b""
        cur = self._chunks[0]
        end = len(cur) if n is None or n < 0 else min(len(cur), self._at + n)
        out = cur if (self._at, end) == (0, len(cur)) else cur[self._at:end]
        self._at = end
        if end >= len(cur):
            self._chunks.pop(0)
            self._at = 0
        return out

    def seek(self, *a):
        raise OSError(errno.ESPIPE, "a remote blob's stream is read once")

    def close(self) -> None:
        self._chunks = []

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _drop_staged(at: Tuple[str, str]) -> None:
    """Forget one kept copy (hold ``_stores_lock``)."""
    _staged.pop(at, None)


def _expire_staged() -> None:
    now = time.monotonic()
    with _stores_lock:
        for at in [a for a, (_d, t, _f) in _staged.items() if now - t > STAGE_SECONDS]:
            _drop_staged(at)


_expiry: List[threading.Timer] = []


def _expire_later() -> None:
    """Expire staged copies even when no read follows (a verify in a long-lived TensorBoard):
    one daemon timer at a time, running again while copies are staged."""
    def run() -> None:
        _expire_staged()
        with _stores_lock:
            _expiry.clear()
            more = bool(_staged)
        if more:
            _expire_later()

    with _stores_lock:
        if _expiry:
            return
        t = threading.Timer(STAGE_SECONDS / 2, run)
        t.daemon = True
        _expiry.append(t)
    t.start()


def _take(vault_root: str, sha: str) -> Optional[BinaryIO]:
    """The kept copy of ``sha`` as a stream, forgotten at once (read once); None when there is
    none. Its reader hashes it, as any copy of a backup."""
    _expire_staged()
    with _stores_lock:
        got = _staged.pop((vault_root, sha), None)
    if got is None:
        return None
    kept = _Kept(got[0])
    return zst.open_decompressed(kept) if got[2] == "zst" else kept


def _sweep_disk_stages(vault_root: str) -> None:
    """Remove the disk stages (``<vault>/offload/tbfp-stage-…``) an earlier version of this
    module left when its process was killed mid-restore (copies of remote blobs): once per vault
    and process, only folders of processes gone, only in a real folder of ours."""
    with _stores_lock:
        if vault_root in _swept:
            return
        _swept.add(vault_root)
    with contextlib.suppress(OSError):
        scratch.sweep(os.path.join(vault_root, "offload"))


def object_name(rec: dict, bs: Optional[BlobStore] = None) -> str:
    """``<store URL>/<key>`` of a recorded blob (the store's ref when it knows one)."""
    ref = bs.ref(rec["sha"]) if bs is not None else None
    key = ref.key if ref is not None else rec.get("key")
    return f"{rec['url'].rstrip('/')}/{key}" if isinstance(key, str) else rec["url"]


def open_remote(vault_root: str, sha: str) -> BinaryIO:
    """The original bytes of a blob recorded remote, streamed from its store; reading raises
    ``RemoteReadError`` (code, object named) when the store fails or the bytes do not hash to
    ``sha``. ``FileNotFoundError`` when there is no record.

    A read to the end of a blob of at most ``STAGE_BYTES`` as stored keeps those bytes in memory,
    and the next open of the blob in this process reads them from there: a restore checks every backup
    of a run before it replaces anything, then copies each. The kept copy is hashed by its
    reader like any other (a restore refuses one that does not hash to ``sha``); nothing is
    written to the local disk here."""
    rec = read_record(vault_root, sha)
    if rec is None:
        raise FileNotFoundError(errno.ENOENT, f"no backup of sha256 {sha[:12]}… in {vault_root}")
    staged = _take(vault_root, sha)
    if staged is not None:
        return staged
    _sweep_disk_stages(vault_root)
    try:
        bs = blobstore(rec["url"])
        if bs.ref(sha) is None:
            bs = blobstore(rec["url"], fresh=True)
        if bs.ref(sha) is None and (vault_root, rec["url"]) not in _rebuilt:
            # a damaged index object may hide it (review R22 F3), or a lost one (R24 F2): the index
            # was just read anyway, so the packs are looked through here, once per process and
            # remote vault
            rebuild_remote_index(vault_root, rec["url"])
            bs = blobstore(rec["url"])
        name = object_name(rec, bs)
        if bs.ref(sha) is None:
            damaged = [f"{rec['url'].rstrip('/')}/{d['key']}" for d in bs.damaged_index()]
            raise _remember(vault_root, sha, RemoteReadError(
                BlobError.MISSING, name,
                f"{name}: the remote vault's index does not list sha256 {sha[:12]}… "
                f"(recorded in {record_path(vault_root, sha)})" + (f"; {hidden_words(damaged)}" if damaged else "")))
        ref = bs.ref(sha)
        if not ref.packed and len(bs.candidates(sha)) == 1:
            # read here rather than through ``bs.open`` so that its stored bytes (a zstd frame,
            # mostly) are what is kept, not the decoded ones: a blob many times the bound is
            # still downloaded once
            return _Checked(_Lone(bs.store, ref, (vault_root, sha)), name, vault_root, sha, ref.size)
        return _Checked(bs.open(sha), name, vault_root, sha, ref.size, [] if ref.size <= STAGE_BYTES else None)
    except (BlobFailure, StoreFailure) as e:
        raise _read_error(vault_root, sha, object_name(rec), e) from None


def read_twice(vault_root: str, sha: str) -> bool:
    """Whether a check's read of ``sha`` from the remote vault would not be kept for the copy that
    follows (``open_remote``: its stored bytes, or for a packed one its decoded bytes, above
    ``STAGE_BYTES``), so a check and a copy would each download it. False when it is not a
    remote blob this vault recorded, or the store cannot say (the restore then checks it as any
    other: a failure is found by that read)."""
    rec = read_record(vault_root, sha)
    if rec is None:
        return False
    try:
        bs = blobstore(rec["url"])
        if bs.ref(sha) is None:
            bs = blobstore(rec["url"], fresh=True)
        ref = bs.ref(sha)
        if ref is None:
            return False
        lone = not ref.packed and len(bs.candidates(sha)) == 1
    except (BlobFailure, StoreFailure, OSError):
        return False
    return (ref.length if lone else ref.size) > STAGE_BYTES


def check_remote(vault_root: str, sha: str) -> Optional[RemoteReadError]:
    """None when the recorded remote blob reads back whole and hashes to ``sha``; else why."""
    try:
        with open_remote(vault_root, sha) as f:
            got, n = hash_and_count(f)
    except RemoteReadError as e:
        return e
    except FileNotFoundError as e:
        return RemoteReadError(BlobError.MISSING, record_path(vault_root, sha), str(e))
    if got != sha:
        rec = read_record(vault_root, sha) or {"url": "", "sha": sha}
        return _remember(vault_root, sha, RemoteReadError(BlobError.CORRUPT, object_name(rec),
                                                          f"{object_name(rec)} does not hash to sha256 {sha[:12]}…"))
    return None


__all__ = ["archived_words", "PACKS_DIR", "PACK_STEPS", "tighten_pack_dirs", "packs_root", "has_packs", "pack_store", "packed_ref",
           "open_packed", "check_packed", "REMOTE_SUFFIX", "REMOTE_CONFIG", "RemoteReadError", "record_path", "read_record", "has_record",
           "write_record", "drop_record", "configured_url", "known_urls", "set_configured_url", "blobstore", "open_remote",
           "check_remote", "object_name", "last_failure", "read_twice", "hidden_words", "recorded_blobs",
           "rebuild_remote_index", "unlisted_records"]
