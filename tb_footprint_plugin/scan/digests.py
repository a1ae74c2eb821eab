"""The sha256 of files a plan read whole, kept across plans, 48 bytes each.

To count each content once, a plan hashes the originals whose size collides with another's
(``engine.plan_notes.content_dups``). A sweep of copied runs has many such files, and the tab
plans the logdir again and again: each plan read them all whole. This table keeps each digest
under a key of the file as it was opened and read (``file_key``: run, path, size, mtime_ns,
ctime_ns, inode, device — a write since changes the ctime, which no user can set back), so a
second plan of an unchanged file reads nothing. Only files of at least ``MIN_FILE_BYTES`` are
kept: the reads worth saving are the big ones.

Memory is the reason for its form: a record is 16 bytes of the key's sha256 and the file's 32-byte
digest, the stored table one ``bytes`` object sorted by key (looked up by bisection), the new
records one ``bytearray`` — 48 bytes a file, where a JSON table of dicts took ~1.3 KB. The
table keeps at most ``MAX_RECORDS`` (those of the last plan first).

The file (``plan-digests.bin``) lives beside the scan and selection caches
(``storage.paths.cache_dir``), written like them: atomically, under the scan cache's lock, in a
folder of ours, never through a symlink. Read back, it is untrusted input, but a record can only
be served for exactly its key, and a digest served is a figure of the plan only (the reduce
hashes every backup it makes): a damaged file is only a slower plan.
"""
from __future__ import annotations

import bisect
import hashlib
import os
from typing import Optional

from tb_footprint_plugin.scan.selcache import write_cache_file
from tb_footprint_plugin.storage.lock import exclusive
from tb_footprint_plugin.storage.ours_read import open_ours
from tb_footprint_plugin.storage.private import ensure_private_dir

DIGESTS_NAME = "plan-digests.bin"
#: files below this are read again rather than kept: their read costs about what a look-up does,
#: and a sweep of many small runs would otherwise hold a record (and its sorting at the save) for
#: each (a plan of small runs peaked ~600 bytes a run higher, test_scale_memory_records)
MIN_FILE_BYTES = 1024 * 1024
_MAGIC = b"TBFPDG01"
_KEY = 16
_REC = _KEY + 32
#: records kept at most (48 MB): the newest plan's first, then the stored ones in key order
MAX_RECORDS = 1_000_000
#: the scan cache's lock: one writer at a time for every file of the folder
_LOCK_NAME = "scan-cache.lock"


def file_key(run: str, path: str, st: os.stat_result) -> bytes:
    """The key of ``path`` of ``run`` as ``st`` (an ``fstat`` of the opened file) describes it."""
    ident = f"{run}\0{path}\0{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}:{st.st_dev}"
    return hashlib.sha256(ident.encode("utf-8", "surrogateescape")).digest()[:_KEY]


class _Keys:
    """The keys of a sorted record table, as a sequence ``bisect`` can search."""

    def __init__(self, buf: bytes):
        self.buf = buf

    def __len__(self) -> int:
        return len(self.buf) // _REC

    def __getitem__(self, i: int) -> bytes:
        return self.buf[i * _REC:i * _REC + _KEY]


def _merged(new: list, stored: bytes) -> bytes:
    """``new`` (sorted records, each key once) merged into ``stored`` (a sorted table): one
    record a key, the new one where both have it; at most ``MAX_RECORDS``, the new first."""
    room = max(0, MAX_RECORDS - len(new))
    out = bytearray()
    i, n = 0, len(stored)
    last = None
    for r in new:
        key = r[:_KEY]
        if key == last:
            continue
        last = key
        while i < n and stored[i:i + _KEY] < key:
            if room:
                out += stored[i:i + _REC]
                room -= 1
            i += _REC
        if i < n and stored[i:i + _KEY] == key:
            i += _REC  # replaced by the new record
        out += r
    while i < n and room:
        out += stored[i:i + _REC]
        room -= 1
        i += _REC
    return bytes(out)


class DigestCache:
    """``get(key)`` / ``put(key, sha256)`` of file digests, ``save()`` once the plan is done."""

    def __init__(self, folder: Optional[str]):
        self.folder = folder
        self._stored: Optional[bytes] = None  # read at the first look-up: most plans hash nothing
        self.new = bytearray()

    @property
    def stored(self) -> bytes:
        """The stored table (read once; a file or folder not ours is never read)."""
        if self._stored is None:
            self._stored = self._read() if self.folder else b""
        return self._stored

    @property
    def path(self) -> Optional[str]:
        return os.path.join(self.folder, DIGESTS_NAME) if self.folder else None

    def _read(self) -> bytes:
        f = open_ours(self.path)  # a file or folder not ours is never read
        if f is None:
            return b""
        try:
            with f:
                # at most MAX_RECORDS: a longer table's first ones are still a sorted table
                data = f.read(len(_MAGIC) + MAX_RECORDS * _REC)
        except OSError:
            return b""
        body = data[len(_MAGIC):]
        if not data.startswith(_MAGIC) or len(body) % _REC:
            return b""  # damaged or another version: only a slower plan
        return body

    @staticmethod
    def _find(table: bytes, key: bytes) -> Optional[str]:
        i = bisect.bisect_left(_Keys(table), key)
        if i * _REC < len(table) and table[i * _REC:i * _REC + _KEY] == key:
            return table[i * _REC + _KEY:(i + 1) * _REC].hex()
        return None

    def get(self, key: bytes) -> Optional[str]:
        """The hex sha256 stored under exactly ``key``, or None."""
        return self._find(self.stored, key)

    def put(self, key: bytes, sha256: str) -> None:
        self.new += key + bytes.fromhex(sha256)

    def save(self) -> Optional[str]:
        """Write the new records merged with those stored (read again, under the lock: another
        process may have written meanwhile); returns a warning string instead of raising."""
        if not self.new or not self.folder:
            return None
        new = sorted(bytes(self.new[i:i + _REC]) for i in range(0, len(self.new), _REC))
        try:
            ensure_private_dir(self.folder, tighten_root=True)
            with exclusive(os.path.join(self.folder, _LOCK_NAME)):
                data = _MAGIC + _merged(new, self._read())
                del new
                refused = write_cache_file(self.folder, DIGESTS_NAME, data, "plan digests")
                if refused:
                    return refused
        except OSError as e:
            return f"plan digests not saved in {self.folder}: {e.strerror or e}"
        self._stored, self.new = data[len(_MAGIC):], bytearray()
        return None


__all__ = ["DIGESTS_NAME", "DigestCache", "MAX_RECORDS", "file_key"]
