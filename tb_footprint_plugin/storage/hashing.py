"""Readers that hash what is read through them: one pass proves a streamed input is the file that
was backed up (its sha256) while the caller parses or copies it, with no second read.

``HashingReader`` hashes on the caller's thread; ``ThreadedHashingReader`` on one of its own
(``hashlib`` releases the GIL on big buffers), so a pass that parses records in Python is not
slowed by hashing them, in bounded memory (a few MB wait to be hashed at most).
"""
from __future__ import annotations

import hashlib
from typing import Optional

from tb_footprint_plugin.storage.files import CHUNK


class HashingReader:
    """A read-only binary file that hashes what is read through it (proves a streamed input
    is the file that was backed up, without a second pass)."""

    def __init__(self, f):
        self._f = f
        self.sha = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        b = self._f.read(n)
        self.sha.update(b)
        return b

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._f.tell()

    def fileno(self) -> int:
        return self._f.fileno()

    def seekable(self) -> bool:
        return False


class ThreadedHashingReader(HashingReader):
    """``HashingReader`` whose sha256 runs on another thread (``hashlib`` releases the GIL on
    big buffers): a pass that parses records in Python is not slowed by hashing them on a
    second core. At most ``depth`` MB wait to be hashed (bounded memory); ``hexdigest()``
    waits for the rest."""

    def __init__(self, f, depth: int = 32):
        import queue
        import threading

        super().__init__(f)
        self._q: "queue.Queue" = queue.Queue()
        # at most ``depth`` MB wait to be hashed (reads may be bigger than a chunk)
        self._room = threading.Condition()
        self._waiting = 0
        self._max_waiting = depth * CHUNK
        self._in_use: dict = {}  # id of a caller's buffer -> its views waiting to be hashed
        self._failed: Optional[BaseException] = None  # what stopped the hashing thread
        self._t = threading.Thread(target=self._run, name="footprint-sha256", daemon=True)
        self._t.start()

    def _run(self) -> None:
        try:
            self._hash_all()
        except BaseException as e:  # noqa: BLE001 - e.g. MemoryError: readers must not wait forever
            with self._room:
                self._failed = e
                self._room.notify_all()

    def _hash_all(self) -> None:
        while True:
            b = self._q.get()
            if b is None:
                return
            if isinstance(b, tuple):  # a view of the caller's buffer (``readinto``)
                view, key = b
                n = len(view)
                self.sha.update(view)
                view.release()
            else:
                n, key = len(b), None
                self.sha.update(b)
            with self._room:
                self._waiting -= n
                if key is not None:
                    self._in_use[key] -= 1
                self._room.notify_all()

    def _wait_room(self, n: int) -> None:
        with self._room:
            while self._waiting and self._waiting + n > self._max_waiting and self._failed is None:
                self._room.wait()
            if self._failed is not None:
                raise OSError(f"hashing failed: {self._failed!r}")
            self._waiting += n

    def read(self, n: int = -1) -> bytes:
        b = self._f.read(n)
        if b:
            self._wait_room(len(b))
            self._q.put(b)
        return b

    def readinto(self, b) -> int:
        """Read into ``b`` (a view of the caller's buffer), which is hashed in place: no copy
        and no buffer allocated per read (a fresh buffer of a few MB per read cost its page
        faults and a copy, ~0.6 s per GB). The caller calls ``before_reuse(buffer)`` before
        writing into that buffer again."""
        readinto = getattr(self._f, "readinto", None)
        if readinto is None:
            data = self.read(len(b))
            b[:len(data)] = data
            return len(data)
        n = readinto(b)
        if n:
            view = memoryview(b)[:n]
            key = id(view.obj)
            self._wait_room(n)
            with self._room:
                self._in_use[key] = self._in_use.get(key, 0) + 1
            self._q.put((view, key))
        return n

    def before_reuse(self, buf) -> None:
        """Wait until nothing read into ``buf`` still waits to be hashed."""
        key = id(buf)
        with self._room:
            while self._in_use.get(key) and self._failed is None:
                self._room.wait()
            if self._failed is not None:
                raise OSError(f"hashing failed: {self._failed!r}")

    def hexdigest(self) -> str:
        """The sha256 of everything read so far (and no further reads)."""
        if self._t.is_alive():
            self._q.put(None)
            self._t.join()
        if self._failed is not None:
            raise OSError(f"hashing failed: {self._failed!r}")
        return self.sha.hexdigest()

    def close(self) -> None:
        """Stop the hashing thread (the digest is then final)."""
        self.hexdigest()


__all__ = ["HashingReader", "ThreadedHashingReader"]
