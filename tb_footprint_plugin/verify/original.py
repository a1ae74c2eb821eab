"""What one reduce learns about a run's original while rewriting it, handed to its verification.

A big run's original was read three times per reduce: the rewrite's selection pass, its
copy pass, and the verifier's record pass (subsequence + tag index); and loaded twice by the
Rust data server (the selection's default view, the verifier's route crawl). ``OriginalRun``
is the one pass and the one load, shared:

* ``start_reader()`` (the engine, first thing of a big run's reduce): TensorBoard's Rust data
  server loads the original with the dashboard's own sampling, in its own process, while the
  backup and the selection pass run. (The selection pass itself is not run during the backup:
  measured, both in one interpreter take as long together as one after the other, the GIL
  passing between the backup's hashing and the pass's Python.) The selection reads its default view from it
  (``Reader.read``), the verifier crawls TensorBoard's routes over it.
* ``load_now()`` + ``park()`` (a plan's selection: ``reduce_logdir`` plans first, and makes
  the selection unless a cached plan had it): the plan's load is kept for ``PARK_S`` seconds,
  and the reduce's ``start_reader()`` takes it over when the run's files still have the stat
  it loaded; so a reduce loads its original in Rust once, plan included (it loaded it twice
  when it made its own plan: issue #28 item 3).
* ``FileFacts`` per event file, filled by the selection pass (``event_rewrite``): the file's
  sha256, every record's offset, framed size and data CRC (20 bytes a record, no payload),
  and the tag index the verifier compares (``eventfile.StatsFold``, the scan's own fold).

Trust: the facts describe bytes whose sha256 the engine compares with the backup's before it
hands them on; the Rust server read the live files, so its load is used only when every file's
``(inode, size, mtime)`` is the same before the server started, after it finished loading, and
around the selection pass (a write changes mtime; the ctime is left out because the backup's
hard link changes it). A plan's parked load is taken over only if each file's device and ctime
are unchanged too (the take-over precedes the backup's link). Otherwise the verifier loads the original from the vault itself, as
before. A write that restores the mtime is still caught: the engine re-hashes the backup (the
same inode when linked) before the commit. The record index is only a finder: every reduced
record is still compared byte for byte with the original's bytes: read from the vault, or
for the small records (scalars, mostly) taken from the bytes the scan's pass kept of them
(``scan.passes``; bytes it hashed, so the backup's when the sha256 matches), which saves a
system call per scalar (``records.records_subsequence_indexed``).
"""
from __future__ import annotations

import atexit
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, Optional

if TYPE_CHECKING:  # imported where arrays are built: the engine imports this module for warm_up
    import numpy as np

from tb_footprint_plugin.storage.files import stat_sig  # re-exported for the engine


@dataclass
class FileFacts:
    """One event file as the selection pass read it (CRCs verified, every byte hashed).

    8 bytes a record: good records are back to back from ``start``, so their offsets are the
    running sum of their sizes (``offsets()``, computed when needed, not kept)."""

    name: str
    sha256: str
    stat: tuple  # stat_sig at the start of the pass, equal at its end
    sizes: np.ndarray  # uint32 (int64 if a record is >= 4 GB): framed size of each record
    crcs: np.ndarray  # uint32: the stored (masked) data CRC of each record
    stats: object = None  # eventfile.EventFileStats of the file
    status: str = "ok"
    start: int = 0  # offset of the first record
    # the framed bytes of the pass's small records (``scan.passes``): bytes it hashed
    small: bytes = b""
    small_upto: int = 0

    def offsets(self) -> np.ndarray:
        """int64 file offset of each record's header."""
        from tb_footprint_plugin.scan.passes import offsets_of

        return offsets_of(self.start, self.sizes)

    def small_view(self) -> Optional[tuple]:
        """``(each record's offset in the small bytes or -1, those bytes)`` taken together
        (``OriginalRun.close`` may clear them), or None when there are none."""
        from tb_footprint_plugin.scan.passes import small_offsets

        small, upto = self.small, self.small_upto
        return (small_offsets(self.sizes, upto), small) if small else None

    @classmethod
    def build(cls, name: str, sha256: str, stat: tuple, starts: list, sizes: list, crcs: list,
              stats=None, status: str = "ok", small: bytes = b"",
              small_upto: int = 0) -> "FileFacts":
        """From the per-batch arrays of a pass (``starts``: file offsets of each batch's records;
        ``small``, ``small_upto``: its ``scan.passes.SmallBytes``)."""
        import numpy as np

        sz = np.concatenate(sizes) if sizes else np.zeros(0, np.int64)
        first = int(starts[0][0]) if starts and len(starts[0]) else 0
        if len(sz) and int(sz.max()) < 1 << 32:
            sz = sz.astype(np.uint32)
        return cls(name, sha256, stat, sz,
                   np.concatenate(crcs).astype(np.uint32) if crcs else np.zeros(0, np.uint32),
                   stats, status, first, small, small_upto)


@dataclass
class OriginalRun:
    """The original of one run during one reduce (see the module docstring)."""

    run_dir: str
    files: Dict[str, FileFacts] = field(default_factory=dict)
    reader: Optional[object] = None  # readers.Reader (rust), loading or loaded
    # every FileFacts ever handed here (``add_file``), even if replaced in ``files``: their
    # record bytes are dropped at ``close``
    _handed: list = field(default_factory=list)
    _thread: Optional[threading.Thread] = None
    _stat_before: Dict[str, Optional[tuple]] = field(default_factory=dict)
    _stat_loaded: Dict[str, Optional[tuple]] = field(default_factory=dict)
    # (device, ctime) of each file before and after the load: a parked load is taken over only
    # if they are unchanged (a same-size rewrite that restores the mtime, `cp -p` over the file,
    # changes the ctime; the backup's hard link, which changes it too, comes after the take-over)
    _ctime_before: Dict[str, Optional[tuple]] = field(default_factory=dict)
    _ctime_loaded: Dict[str, Optional[tuple]] = field(default_factory=dict)
    _python_side: Optional[object] = None  # pyside.PythonSide started early, not yet told its run

    def start_reader(self, timeout_s: float = 900.0) -> "OriginalRun":
        """Start TensorBoard's Rust data server loading the run (default sampling), or take
        over the load the plan's selection made of the very same files (``park``)."""
        from tb_footprint_plugin.formats import views

        if self.reader is not None or views.data_server_binary() is None:
            return self
        from tb_footprint_plugin.verify import routes
        from tb_footprint_plugin.verify.pyside import PythonSide

        routes.prewarm()  # the route crawl's imports, while the backup runs
        parked = _unpark(self.run_dir)
        if parked is not None and parked.loaded_as_now():
            # the plan's load, of files whose (inode, size, mtime, device, ctime) are still those it loaded:
            # ``rust_reader`` holds it to the selection pass's and the engine to the backup's
            # sha256, as it would a load of its own
            self.reader, self._thread = parked.reader, parked._thread
            self._stat_before, self._stat_loaded = parked._stat_before, parked._stat_loaded
            parked.reader = parked._thread = None
        else:
            if parked is not None:
                parked.close()
            self._load(timeout_s)
        # last (nothing after it can fail and leave it behind): for a run over
        # ``EARLY_CHILD_BYTES`` the Python loader's child imports TensorBoard meanwhile too
        # (~0.5 s of a core that the verification's own start needs); the verification tells it
        # its run, ``close`` stops it otherwise. A smaller run's side is lazy: its reduced run
        # (a thinned copy, mostly) is read in this process, or a child is started then
        self._python_side = PythonSide(
            None, timeout_s, lazy=_event_bytes(self.run_dir) <= EARLY_CHILD_BYTES).start()
        return self

    def _load(self, timeout_s: float) -> None:
        """Start the Rust load on a thread of its own, noting each file's stat before and after."""
        from tb_footprint_plugin.verify.readers import Reader
        from tb_footprint_plugin.verify.records import event_file_names

        names = event_file_names(self.run_dir)
        self._stat_before = {n: stat_sig(os.path.join(self.run_dir, n)) for n in names}
        self._ctime_before = {n: _dev_ctime(os.path.join(self.run_dir, n)) for n in names}
        self.reader = Reader(self.run_dir, "rust", None, store_all=False, timeout_s=timeout_s)

        def load() -> None:
            self.reader.open()
            self._stat_loaded = {n: stat_sig(os.path.join(self.run_dir, n))
                                 for n in event_file_names(self.run_dir)}
            self._ctime_loaded = {n: _dev_ctime(os.path.join(self.run_dir, n))
                                  for n in event_file_names(self.run_dir)}

        self._thread = threading.Thread(target=load, name="footprint-original-rust", daemon=True)
        self._thread.start()

    def load_now(self, timeout_s: float = 900.0,
                 meanwhile: Optional[Callable[[], None]] = None) -> Optional[object]:
        """Load the run in TensorBoard's Rust data server (default sampling) and wait for it:
        a plan's selection reads the default view from it, then ``park``s it for the reduce that
        may follow. The loaded ``readers.Reader`` (``view.fatal`` says a failure), or None
        without the data server binary. ``meanwhile`` is called once the load is under way,
        before the wait (what the caller would otherwise start only after it), once this thread
        has imported what the load needs to reach its server (``views.rust_client_imports``)."""
        from tb_footprint_plugin.formats import views

        if self.reader is None:
            if views.data_server_binary() is None:
                return None
            self._load(timeout_s)
        if meanwhile is not None:
            # gRPC and TensorBoard's provider first: the load needs them to reach its server,
            # which is up 20-50 ms after its spawn. Imported beside ``meanwhile``'s imports
            # (TensorBoard's app, ~0.2 s of a core), the two sharing the GIL, they took
            # 0.13-0.17 s instead of ~0.05 s, and this wait took as long (issue #28 item 3).
            # The load thread's own import of them waits for this one, and says a failure.
            try:
                views.rust_client_imports()
            except Exception:  # noqa: BLE001 - the load's reader reports it (``view.fatal``)
                pass
            meanwhile()
        self._thread.join()
        return self.reader

    def loaded_as_now(self) -> bool:
        """Whether the load finished, without a reader failure, over files whose stat is the
        same now as before it started and after it finished (and no file came or went)."""
        from tb_footprint_plugin.verify.records import event_file_names

        if self.reader is None or self._thread is None:
            return False
        self._thread.join()
        if self.reader.view.fatal or not self._stat_before:
            return False
        names = event_file_names(self.run_dir)
        now = {n: stat_sig(os.path.join(self.run_dir, n)) for n in names}
        ctimes = {n: _dev_ctime(os.path.join(self.run_dir, n)) for n in names}
        return now == self._stat_before == self._stat_loaded and ctimes == self._ctime_before == self._ctime_loaded

    def rust_reader(self):
        """The loaded Reader if its load provably saw the bytes the pass hashed, else None."""
        if self.reader is None:
            return None
        self._thread.join()
        if self.reader.view.fatal or not self.files:
            return None
        if set(self._stat_before) != set(self.files) or self._stat_loaded != self._stat_before:
            return None
        if any(f.stat != self._stat_before[n] for n, f in self.files.items()):
            return None
        return self.reader

    def take_reader(self):
        """``rust_reader()``, now owned by the caller (who closes it)."""
        r = self.rust_reader()
        if r is not None:
            self.reader = None
        return r

    def index(self) -> Optional[tuple]:
        """The run's tag index (``dashboard.run_index``) from the pass, if every file was read."""
        from tb_footprint_plugin.verify import dashboard
        from tb_footprint_plugin.verify.records import event_file_names

        names = event_file_names(self.run_dir)
        if not self.files or sorted(self.files) != names:
            return None
        if any(self.files[n].stats is None for n in names):
            return None
        return dashboard.index_from_stats([self.files[n].stats for n in names])

    def take_python_side(self):
        """The started ``pyside.PythonSide`` child (now the caller's), or None."""
        side, self._python_side = self._python_side, None
        return side

    def abort(self) -> None:
        """End the load of the original and the Python loader's child now, from any thread (the
        verification they serve was stopped); ``close`` still collects them."""
        reader, side = self.reader, self._python_side
        if reader is not None:
            reader.abort()
        if side is not None:
            side.kill()

    def close(self) -> None:
        """Stop the data server and the Python loader's child if nobody took them."""
        side = self.take_python_side()
        if side is not None:
            side.cancel()
        if self.reader is not None:
            if self._thread is not None:
                self._thread.join()
            self.reader.close()
            self.reader = None
        for f in self._handed:
            # the reduce is over: a cached selection sharing these facts keeps no record bytes
            f.small, f.small_upto = b"", 0

    def add_file(self, name: str, facts: FileFacts) -> None:
        """What the rewrite's selection learnt of event file ``name``."""
        self.files[name] = facts
        self._handed.append(facts)


#: Runs of more event bytes than this have the Python loader's child started with the reduce
#: (``start_reader``): their reduced run is likelier too big to read in the engine's process,
#: and a child started late would add its start (~0.3 s) to a long verification anyway.
EARLY_CHILD_BYTES = 256 * 1024 * 1024


def _event_bytes(run_dir: str) -> int:
    from tb_footprint_plugin.verify import dashboard

    return dashboard.event_bytes(run_dir)


#: How long a plan's Rust load of a run waits for the reduce of that run (``park``) before its
#: data server is stopped: a reduce starts right after its plan (``tb-footprint reduce``, the
#: tab's reduce of what it just planned); a plan shown and never reduced pays one idle server
#: for this long, no more.
PARK_S = 30.0
_PARK_LOCK = threading.Lock()
_parked: Optional[tuple] = None  # (OriginalRun, its expiry Timer): the newest plan-time load


def park(run: OriginalRun) -> None:
    """Keep ``run``'s Rust load (``load_now``) for the reduce of the same run that may follow
    this plan: its ``start_reader`` takes it over instead of loading the original again (each
    load is a data server started and the run read: ~0.2 s and a core on a 20 MB run). Only
    the newest is kept (one idle data server at most: memory stays one run's), for ``PARK_S``
    seconds; a reduce of another run stops it."""
    global _parked
    timer = threading.Timer(PARK_S, _expire, args=(run,))
    timer.daemon = True
    with _PARK_LOCK:
        old, _parked = _parked, (run, timer)
    if old is not None:
        old[1].cancel()
        old[0].close()
    timer.start()


def _expire(run: OriginalRun) -> None:
    global _parked
    with _PARK_LOCK:
        if _parked is None or _parked[0] is not run:
            return  # taken over or replaced meanwhile: no longer ours to stop
        _parked = None
    run.close()


def _unpark(run_dir: str) -> Optional[OriginalRun]:
    """The parked load of ``run_dir``, now the caller's; a parked load of another run is
    stopped (the reduce of another run started: it will not be taken)."""
    global _parked
    with _PARK_LOCK:
        got, _parked = _parked, None
    if got is None:
        return None
    run, timer = got
    timer.cancel()
    if os.path.realpath(run.run_dir) != os.path.realpath(run_dir):
        run.close()
        return None
    return run


def release_parked(run_dir: Optional[str] = None) -> None:
    """Stop the parked load now, if any (of ``run_dir`` only, when given: a plan of a private
    copy that no reduce takes, about to be deleted; tests; a process about to exit)."""
    global _parked
    with _PARK_LOCK:
        got = _parked
        if got is not None and (run_dir is None or
                                os.path.realpath(got[0].run_dir) == os.path.realpath(run_dir)):
            _parked = None
        else:
            got = None
    if got is not None:
        got[1].cancel()
        got[0].close()


atexit.register(release_parked)


_WARM_LOCK = threading.Lock()
_WARM: Optional[threading.Thread] = None


def warm_up() -> Optional[threading.Thread]:
    """Start, once per process, on a thread of its own, the imports a reduce's verification
    waits for, so they overlap what comes before them (a reduce's recovery and scan) instead of
    following it: gRPC and TensorBoard's provider (the plan's load of the original reaches its
    data server through them, ``load_now``), then TensorBoard's app (``routes.prewarm``, which the route crawl waits for). In that order on
    one thread: the client first, since the plan needs it first, and the app's imports not
    beside it (sharing the GIL, each took 2-3x as long: ``load_now``). TensorBoard's file layer is
    imported here, in the caller's thread (``views.import_tensorboard_io``: only before any other
    thread runs can it defer gfile's S3 and fsspec clients). Nothing is read or written. The
    thread (None when it was started before)."""
    global _WARM
    from tb_footprint_plugin.formats import views
    from tb_footprint_plugin.verify import routes

    with _WARM_LOCK:
        if _WARM is not None:
            return None
        views.import_tensorboard_io()

        def imports() -> None:
            try:
                views.rust_client_imports()
            except Exception:  # noqa: BLE001 - the load that needs them reports it
                pass
            routes.prewarm()

        _WARM = threading.Thread(target=imports, name="footprint-warm-up", daemon=True)
        _WARM.start()
        return _WARM


def _dev_ctime(path: str) -> Optional[tuple]:
    """``(st_dev, st_ctime_ns)`` of ``path`` (symlinks followed), or None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ctime_ns)


def read_facts(path: str, name: Optional[str] = None) -> FileFacts:
    """``FileFacts`` of one event file read on its own (the rewrite folds the same into its
    selection pass; this is for callers without one, e.g. ``verify`` of a committed run)."""
    from tb_footprint_plugin.scan import eventfile
    from tb_footprint_plugin.scan.tfrecord import RecordReader
    from tb_footprint_plugin.storage.files import CHUNK
    from tb_footprint_plugin.storage.hashing import HashingReader
    from tb_footprint_plugin.storage.regular import open_regular

    name = name or os.path.basename(path)
    fold = eventfile.StatsFold(name)
    offsets, sizes, crcs = [], [], []
    with open_regular(path, buffering=0, follow_symlinks=True) as raw:
        before = stat_sig(path)
        hin = HashingReader(raw)
        reader = RecordReader(hin, verify=True, display_name=name)
        for batch in reader.batches():
            fold.add(batch)
            if not offsets:  # only where the first record is: the rest follow back to back
                offsets.append(batch.starts[:1] + batch.base)
            sizes.append(batch.sizes)
            crcs.append(batch.crcs())
        while hin.read(CHUNK):
            pass
    return FileFacts.build(name, hin.sha.hexdigest(), before, offsets, sizes, crcs,
                           fold.finish(reader), reader.status)


__all__ = ["FileFacts", "OriginalRun", "PARK_S", "park", "read_facts", "release_parked", "stat_sig", "warm_up"]
