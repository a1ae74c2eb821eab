"""The check page's sample on a bucket logdir (``BucketEngine.sample``): where its bytes come from
for the one rule of ``engine.sample`` (which a disk's ``engine.local_sample`` follows too).

Only event objects directly in the run's prefix (as TensorBoard reads a run) and the operation's
own backups of them are read: a backup is the server-side copy under the vault's prefix
(``backup``) or, with a vault of blobs, the blob of its sha256 in that folder (``kept_in``), as a
restore finds an original. Every object is read through ``BucketState`` (the ``Store``
interface: one listing of the run's prefix, one ranged read per 8 MiB of each event object) into a
scratch folder the sample reader reads. The check page asks for its samples one at a time, each
reading the whole run: what was downloaded is kept for the next sample (``Downloads``: keyed by the
object's store path, listed version and size, or the blob's sha256; at most ``Downloads.LIMIT``
bytes, the oldest let go first; removed when the process ends), so a page costs each event object
once, not once per picture. The manifest is untrusted (``engine.manifest.read``; a backup key
outside the vault's blobs is never read).
"""
from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import threading
from collections import OrderedDict
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from tb_footprint_plugin.codes import Failure
from tb_footprint_plugin.engine import manifest as manifest_schema
from tb_footprint_plugin.engine.bucket_blobs import is_blob_entry, names_our_backup
from tb_footprint_plugin.engine.bucket_objects import BucketState
from tb_footprint_plugin.engine.bucket_state import BucketVault, run_prefix, STORE_FAILURES, vault_url
from tb_footprint_plugin.engine.bucket_steps import uncommitted_ops
from tb_footprint_plugin.engine.context import TransactionError
from tb_footprint_plugin.engine import sample as one_rule
from tb_footprint_plugin.engine.sample import SampleUnavailable
from tb_footprint_plugin.engine.trust import Untrusted
from tb_footprint_plugin.storage import scratch
from tb_footprint_plugin.storage.files import CHUNK
from tb_footprint_plugin.storage.paths import is_op_id, is_sha256
from tb_footprint_plugin.storage.remote import ObjectInfo
from tb_footprint_plugin.storage.store_object import ObjectStore


def find_manifest(ostore: ObjectStore, vault: BucketVault, op_id: str) -> dict:
    """The manifest of ``op_id`` in the one schema (one read of its object), as the local
    ``catalogue.find_manifest``: ``TransactionError`` when there is none, it does not read as a
    manifest, or its reduction is not committed (a journal of the bucket still names it)."""
    st = BucketState.of(ostore)
    path = vault.manifest(op_id) if is_op_id(op_id) else None
    doc = st.read(path)[0] if path is not None else None
    if doc is None:
        raise TransactionError(f"no operation {op_id!r} in the vault", Failure.NOT_FOUND)
    try:
        m = manifest_schema.read(doc, vault_url(ostore, path))
    except Untrusted as e:
        raise TransactionError(f"no usable operation {op_id!r} in the vault ({e})") from None
    if m["op_id"] != op_id or op_id in uncommitted_ops(ostore):
        raise TransactionError(f"no operation {op_id!r} in the vault", Failure.NOT_FOUND)
    return m


def _direct_events(listing: Dict[str, ObjectInfo], prefix: str) -> Dict[str, ObjectInfo]:
    """The event objects directly in the run's prefix (``engine.sample.direct_event``)."""
    return {key: info for key, info in listing.items() if one_rule.direct_event(key, prefix)}


#: one ranged read of an event object or a server-side backup (a read is a request: a 64 MiB
#: event file costs 8 of them, not 64)
READ_BYTES = 8 * CHUNK


def _download(reader, size: int, dest: str, chunk: int = CHUNK) -> None:
    """``size`` bytes of ``reader`` into the local file ``dest`` (``chunk`` at a time)."""
    with open(dest, "wb") as out:
        left = size
        while left > 0:
            b = reader.read(min(chunk, left))
            if not b:
                raise SampleUnavailable("not_found", f"{dest}: the object is shorter than listed")
            out.write(b)
            left -= len(b)


class Downloads:
    """Local copies of the objects samples read, kept for the next sample (one per process:
    ``DOWNLOADS``). ``LIMIT`` bytes at most; the copies a sample reads are held for its whole
    read (``lock``: one bucket sample at a time in a process), so none goes while read."""

    LIMIT = 256 << 20

    def __init__(self):
        self.lock = threading.Lock()
        self._files: "OrderedDict[Tuple, Tuple[str, int]]" = OrderedDict()
        self._root: Optional[str] = None
        self._n = 0
        self._bytes = 0

    def get(self, key: Tuple, size: int, fetch: Callable[[str], None]) -> str:
        """The local copy of ``key`` (``size`` bytes), fetched into it (``fetch(path)``) unless kept;
        the caller holds ``lock``."""
        got = self._files.get(key)
        if got is not None and os.path.isfile(got[0]):
            self._files.move_to_end(key)
            return got[0]
        if self._root is None or not os.path.isdir(self._root):
            self._root = scratch.make("sample", scratch.system_root())
            self._files.clear()
            self._bytes = 0
        self._n += 1
        path = os.path.join(self._root, f"{self._n}.tfevents")
        try:
            fetch(path)
        except BaseException:
            _remove(path)
            raise
        self._files[key] = (path, size)
        self._bytes += size
        return path

    def trim(self, keep: set) -> None:
        """Let the oldest copies go, down to ``LIMIT`` bytes (those in ``keep`` stay: just read)."""
        for key in list(self._files):
            if self._bytes <= self.LIMIT:
                break
            if key in keep:
                continue
            path, size = self._files.pop(key)
            self._bytes -= size
            _remove(path)

    def close(self) -> None:
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
        self._root, self._bytes = None, 0
        self._files.clear()


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


DOWNLOADS = Downloads()
atexit.register(DOWNLOADS.close)


class BucketSource(one_rule.Source):
    """A bucket logdir's run prefix and its operation's backups (server-side copies, or blobs of a
    local vault folder), through ``Downloads``."""

    def __init__(self, ostore: ObjectStore, vault: BucketVault):
        self.ostore, self.vault = ostore, vault
        self.st = BucketState.of(ostore)
        self.listed: Dict[str, ObjectInfo] = {}

    def manifest(self, op_id: str) -> dict:
        return find_manifest(self.ostore, self.vault, op_id)

    def find_run(self, m: dict, op_id: str) -> str:
        prefix = run_prefix(m["run"])
        try:  # one listing of the run's prefix: a bucket has no folders, a run is its objects
            self.listed = _direct_events(self.st.tree(prefix.rstrip("/"), missing_ok=True), prefix)
        except (*STORE_FAILURES, ValueError):
            self.listed = {}
        if not self.listed:
            raise SampleUnavailable("not_found", f"the run of {op_id} is not in the logdir")
        return prefix

    def current(self, prefix: str) -> Dict[str, ObjectInfo]:
        return dict(self.listed)

    def holds(self, f: dict) -> bool:
        # a backup this vault does not hold is never read
        return names_our_backup(self.vault, f) and (not is_blob_entry(f) or is_sha256(f.get("sha256")))

    @contextlib.contextmanager
    def paths(self, now: Dict[str, ObjectInfo], backups: Dict[str, dict]) -> Iterator[List[str]]:
        ostore, st, vault = self.ostore, self.st, self.vault
        with DOWNLOADS.lock:
            paths, used = [], set()
            for key in one_rule.in_order(now, backups):
                f, info = backups.get(key), now.get(key)
                if f is not None:  # an original: its copy under the vault's prefix, or its blob
                    ident = ("blob", f["sha256"]) if is_blob_entry(f) else ("copy", f["backup"], f["size"])
                    size = f["size"]

                    def fetch(dest, f=f):
                        _original(st, vault, f, dest)
                else:
                    ident = ("object", ostore.path(key), info.version_token, info.size)
                    size = info.size

                    def fetch(dest, key=key, info=info):
                        _download(st.open_read(ostore.path(key), info.size), info.size, dest, READ_BYTES)
                try:
                    paths.append(DOWNLOADS.get(ident, size, fetch))
                except (*STORE_FAILURES, OSError, ValueError) as e:
                    raise SampleUnavailable("not_found", f"{ostore.url_of(key)} could not be read ({e})") from None
                used.add(ident)
            try:
                yield paths
            finally:
                DOWNLOADS.trim(used)


def sample(ostore: ObjectStore, vault: BucketVault, op_id: str, side: str, plugin: str, tag: str, step: int,
           index: int = 0) -> tuple:
    """``(bytes, content type)`` of sample ``index`` of ``tag`` at ``step`` (``plugin``: images or
    audio) of operation ``op_id``'s run, ``before`` or ``after`` (``engine.sample.sample``, the
    rule a disk's follows); ``TransactionError`` for an operation the vault does not hold."""
    return one_rule.sample(BucketSource(ostore, vault), op_id, side, plugin, tag, step, index)


def _original(st: BucketState, vault: BucketVault, f: dict, dest: str) -> None:
    """The original bytes of entry ``f`` into ``dest``: its server-side copy in the vault's prefix,
    or its blob in the vault's folder (``SampleUnavailable`` ``not_found`` when neither is there)."""
    if is_blob_entry(f):
        from tb_footprint_plugin.storage.blobstore import BlobFailure

        if vault.blobs is None or not os.path.isdir(vault.blobs.folder):
            raise SampleUnavailable("not_found", f"{f['path']}: its backup is in a local vault folder; give that "
                                    "folder with --backup-dir")
        try:
            with vault.blobs.store.open(f["sha256"]) as src:
                _download(src, f["size"], dest)
        except BlobFailure as e:
            raise SampleUnavailable("not_found", f"{f['path']}: its backup does not read back ({e})") from None
        return
    _download(st.open_read(f["backup"], f["size"]), f["size"], dest, READ_BYTES)


__all__ = ["BucketSource", "DOWNLOADS", "Downloads", "find_manifest", "sample"]
