"""The legacy Python loader's view of a reduced run, read in a child process.

TensorBoard's Python loader (``--load_fast=false``) costs ~0.3 ms per record in pure Python
whatever the record's size: a reduced run that keeps 50,000 scalar records takes ~15 s to
load, longer than everything else verification does on a 1 GB original. The loader is
single-threaded and holds the GIL, so it runs in its own interpreter, started before the
Rust side and the original's index pass, and its answer is collected when they are done:
on two cores the two halves overlap instead of adding up.

What comes back is what ``dashboard.python_against_index`` needs, nothing the size of the
data: per plugin, per tag, the steps the loader serves (``read_*`` through TensorBoard's
``MultiplexerDataProvider``), plus the reader's fatal error, errors and warnings.

The child reads only the run directory it is given (through ``Reader``'s private logdir of
links, as in-process); it writes nothing but its temporary logdir, removed on exit.

**The probe** (``python_probe``). A reduce keeps scalars, hparams and text whole, so a reduced
1 GB run still holds tens of thousands of scalar records, each ~0.2-0.3 ms in this loader:
longer than everything else verification does. What this loader would show of a tag whose
records are all still there, byte for byte and in order (the "identical" contract, proven by
the record subsequence and the tag index), is already decided by those records — provided
nothing else the loader reads depends on them. That holds for v2 event files: there the loader
purges only at a ``SessionLog.START`` restart (by that record's step), whereas for older files
it purges by the step order of *all* summaries. So for a run of v2 files the loader reads a
thinned copy of the reduced run: every record, except that a tag of an "identical" plugin keeps
only its first and last records and every record carrying summary metadata (the loader binds
the tag there). The loader still lists every tag, reads every point of every reduced tag, and
checks its CRCs; the line says how many records of whole tags it was spared.

Why one module: the loader's answer crosses a process boundary one way (``PythonListing`` as
JSON, written by ``_main`` in the child, read by ``PythonSide`` in the parent) and is made by one
``read_listing`` in either process (a reduce reads a small input in its own, ``PythonSide.lazy``);
the probe writes the copy that same reader is given. Split, the child's entry point, the
parent's side and the wire format would each import the others.
"""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Optional

from tb_footprint_plugin.storage.spawn import popen_out_of_reach, python_child, python_env

#: Seconds added to the caller's timeout for the child's interpreter start and imports.
START_SLACK_S = 30.0

#: A lazy ``PythonSide`` reads its run in this process, on a thread, when what the loader is
#: given is at most this many bytes and records (``go``): a child costs an interpreter and
#: TensorBoard's imports (~0.25 s of a core, ~45 MB), measured the largest single CPU cost of
#: a 20 MB run's reduce, while the loader read that run's thinned copy (~1,300 records) in
#: ~0.07 s here, where a reduce has TensorBoard's loader imported already (``routes.prewarm``).
#: Memory stays flat: the loader keeps at most these bytes (store_all) for the check's time.
IN_PROCESS_BYTES = 4 * 1024 * 1024
IN_PROCESS_RECORDS = 5_000
#: Without a record count (no thinned copy), only this many bytes are read in this process.
IN_PROCESS_UNCOUNTED_BYTES = 512 * 1024


@dataclass
class PythonListing:
    """The Python loader's view of one run: steps per tag, and its problems."""

    fatal: Optional[str] = None
    errors: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    #: ``{plugin: {tag: [step, ...]}}`` in the order the provider returns the points.
    plugins: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"fatal": self.fatal, "errors": self.errors, "warnings": self.warnings,
                "plugins": self.plugins}

    @classmethod
    def from_json(cls, d: dict) -> "PythonListing":
        return cls(fatal=d.get("fatal"), errors=list(d.get("errors") or []),
                   warnings=list(d.get("warnings") or []),
                   plugins={p: {t: [int(s) for s in steps] for t, steps in tags.items()}
                            for p, tags in (d.get("plugins") or {}).items()})


class ProbeTap:
    """``python_probe``'s first pass (each record's class), folded into another pass over the
    reduced run (``records.ReducedPass``): ``add`` each batch with its decode, ``end_file``
    after each file, then hand it to ``python_probe(tap=...)``."""

    def __init__(self, exp) -> None:
        self.probe = _Probe(exp)
        self.classes: list = []
        self.error: Optional[str] = None
        self._cur: list = []

    def add(self, batch, dec) -> None:
        if self.error is None:
            try:
                self._cur.append(self.probe._batch(batch, dec))
            except ValueError as e:
                self.error = str(e)

    def end_file(self, status: str) -> None:
        import numpy as np

        if status != "ok" and self.error is None:
            self.error = status
        self.classes.append(np.concatenate(self._cur) if self._cur else np.zeros(0, np.int32))
        self._cur = []


def python_probe(reduced_dir: str, exp, dest_dir: str, vectorised: bool = True,
                 tap: Optional[ProbeTap] = None) -> Optional[dict]:
    """Write the thinned copy of ``reduced_dir`` the loader reads (see the module docstring)
    into ``dest_dir``; ``{"thinned": {tag: records left out}, "records": records written}``,
    or None when it does not apply (pre-v2 files, nothing to thin, an unreadable record).
    ``vectorised=False`` parses every record (tests check both ways write the same copy);
    ``tap``: the first pass, already made (a ``ProbeTap`` shown every file of the run)."""
    import numpy as np

    from tb_footprint_plugin.scan.tfrecord import RecordReader
    from tb_footprint_plugin.verify.records import event_file_names

    names = event_file_names(reduced_dir)
    if not names or not exp.records_subsequence:
        return None  # without the record subsequence, nothing proves a thinned tag whole
    if tap is not None and (tap.error is not None or len(tap.classes) != len(names)):
        return None if tap.error is not None else python_probe(reduced_dir, exp, dest_dir)
    probe = tap.probe if tap is not None else _Probe(exp, vectorised)
    try:
        # pass 1: every record's class (a thinnable tag's id, or -1: kept), and each thinnable
        # tag's last record (kept, so the loader still sees the tag end where it ends)
        classes = (tap.classes if tap is not None
                   else [probe.file(os.path.join(reduced_dir, n), n) for n in names])
        if not probe.tags:
            return None
        last = np.full(len(probe.tags), -1, dtype=np.int64)
        pos0 = 0
        for cls in classes:
            idx = np.flatnonzero(cls >= 0)
            last[cls[idx]] = idx + pos0  # in order: the last assignment of a tag wins
            pos0 += len(cls)
        thinned = np.zeros(len(probe.tags), dtype=np.int64)
        written = 0
        pos0 = 0
        # pass 2: the copy, every record but the thinned ones, consecutive ones in one write
        for n, cls in zip(names, classes):
            keep = cls < 0
            drop_idx = np.flatnonzero(~keep)
            keep[drop_idx[last[cls[drop_idx]] == drop_idx + pos0]] = True
            np.add.at(thinned, cls[~keep], 1)
            written += int(keep.sum())
            at = 0
            with RecordReader(os.path.join(reduced_dir, n), verify=True, display_name=n) as r, \
                    open(os.path.join(dest_dir, n), "xb") as out:
                for batch in r.batches():
                    k = keep[at:at + len(batch)]
                    at += len(batch)
                    for a, b in _runs(k):
                        s = int(batch.starts[a])
                        e = int(batch.starts[b - 1] + batch.sizes[b - 1])
                        out.write(batch.buf[s:e])
            if r.status != "ok" or at != len(keep):
                return None  # changed since pass 1
            pos0 += len(cls)
    except (OSError, ValueError):
        return None
    out_thinned = {probe.tags[i]: int(c) for i, c in enumerate(thinned.tolist()) if c}
    if not out_thinned:
        return None
    return {"thinned": out_thinned, "records": written}


def _runs(keep) -> list:
    """``[(a, b), ...]``: the maximal runs of True in ``keep`` as half-open ranges."""
    import numpy as np

    if not len(keep):
        return []
    k = keep.astype(np.int8)
    edges = np.flatnonzero(np.diff(np.concatenate(([0], k, [0]))))
    return list(zip(edges[0::2].tolist(), edges[1::2].tolist()))


class _Probe:
    """Classifies a reduced run's records for ``python_probe``, in file order: record by
    record (a full parse) where needed, and runs of one-value summaries without metadata of
    tags already bound (most of a run's records) from the scan's vectorised decode
    (``eventfile.StatsFold.decoded``), as the rewrite's selection does."""

    def __init__(self, exp, vectorised: bool = True) -> None:
        from tensorboard.compat.proto import event_pb2

        self.exp = exp
        self.vectorised = vectorised
        self.parse = event_pb2.Event.FromString
        self.binding: dict = {}  # tag -> plugin, from its first value (as the rewrite's selection)
        self.seen_version = False
        self.tags: list = []  # thinnable tags by id
        self.tag_id: dict = {}

    def file(self, path: str, name: str):
        """Each record's class (``int32``): a thinnable tag's id, or -1 (kept). Raises
        ``ValueError`` when the probe does not apply."""
        import numpy as np

        from tb_footprint_plugin.scan import eventfile
        from tb_footprint_plugin.scan.tfrecord import RecordReader

        fold = eventfile.StatsFold(name)
        out = []
        with RecordReader(path, verify=True, display_name=name) as r:
            for batch in r.batches():
                fold.add(batch)
                out.append(self._batch(batch, fold.decoded()))
        if r.status != "ok":
            raise ValueError(f"{name}: {r.status}")
        return np.concatenate(out) if out else np.zeros(0, np.int32)

    def _batch(self, batch, dec):
        import numpy as np

        from tb_footprint_plugin.scan import eventfile

        n = len(batch)
        cls = np.full(n, -1, dtype=np.int32)

        def slow(a: int, b: int) -> None:
            for i in range(a, b):
                cls[i] = self._record(batch.payload(i))

        if not self.vectorised:
            slow(0, n)
            return cls
        for a, b, plain in eventfile.plain_runs(dec, n, self.binding.__contains__):
            if not plain:
                slow(a, b)
                continue
            if not self.seen_version:
                raise ValueError("a summary before any file version")
            # an unparseable record: the probe is not the run's twin (parsed in one C-level
            # loop: a call per record from Python cost as much as the parse)
            try:
                collections.deque(map(self.parse, batch.payloads(a, b)), maxlen=0)
            except Exception:  # noqa: BLE001
                raise ValueError("an unparseable record") from None
            _, tag_id, names, _, _ = dec
            uniq, inv = np.unique(tag_id[a:b], return_inverse=True)
            ids = np.array([self._thinnable(names[t]) for t in uniq.tolist()], dtype=np.int32)
            cls[a:b] = ids[inv]
        return cls

    def _thinnable(self, tag: str) -> int:
        """The id of a bound tag whose one-value, metadata-free records may be thinned, or -1."""
        from tb_footprint_plugin.verify import contract as c

        plugin = self.binding[tag]
        if not plugin or self.exp.mode_for(plugin) != c.IDENTICAL:
            return -1
        i = self.tag_id.get(tag)
        if i is None:
            i = self.tag_id[tag] = len(self.tags)
            self.tags.append(tag)
        return i

    def _record(self, data: bytes) -> int:
        """The class of one record by a full parse (``_batch``); raises ``ValueError`` when
        the probe does not apply."""
        from tb_footprint_plugin.scan import categories as cat

        try:
            ev = self.parse(data)
        except Exception:  # noqa: BLE001 - unparseable: the probe is not the run's twin
            raise ValueError("an unparseable record") from None
        what = ev.WhichOneof("what")
        if what == "file_version":
            try:
                if float(ev.file_version.split(":", 1)[1]) < 2:
                    raise ValueError("a pre-v2 event file")
            except (IndexError, ValueError):
                raise ValueError("a pre-v2 event file") from None
            self.seen_version = True
            return -1
        if not self.seen_version:
            raise ValueError("a record before any file version")  # the pre-v2 purge rules
        if what != "summary" or len(ev.summary.value) != 1:
            for v in ev.summary.value if what == "summary" else ():
                self.binding.setdefault(v.tag, "")  # bound from a shared record: never thinned
            return -1
        v = ev.summary.value[0]
        if v.tag not in self.binding:
            kind = v.WhichOneof("value")
            self.binding[v.tag] = cat.LEGACY_PLUGIN.get(kind) or (
                v.metadata.plugin_data.plugin_name if v.HasField("metadata") else "")
            return -1  # a tag's first record is always kept
        if v.HasField("metadata"):
            return -1
        return self._thinnable(v.tag)


def read_listing(run_dir: str, timeout_s: float) -> PythonListing:
    """Load ``run_dir`` with the Python loader in this process; every point's step.

    The plugins' own calls (``list_*`` then ``read_*`` of every point; every blob of a blob
    sequence fetched), keeping only the steps: no per-point payload is built."""
    from tb_footprint_plugin.formats import views
    from tb_footprint_plugin.verify.readers import Reader

    out = PythonListing()
    with Reader(run_dir, "python", None, store_all=True, timeout_s=timeout_s) as r:
        if r.provider is not None and not r.view.fatal and r.view.run_present:
            ctx = views.request_context()
            plugins = sorted(p for p in r.provider.list_plugins(
                ctx, experiment_id=views.EXPERIMENT_ID) if p)
            for plugin in plugins:
                for kind in views.KINDS:
                    try:
                        _read_steps(out, r.provider, ctx, plugin, kind)
                    except Exception as e:  # noqa: BLE001 - a reader failure is a finding
                        out.errors.append(f"{plugin} ({kind}s): {type(e).__name__}: {e}")
    view = r.view  # closed: the loader's own log problems are collected
    out.fatal = view.fatal
    out.errors = list(view.errors) + out.errors
    out.warnings = list(view.warnings)
    return out


def _read_steps(out: PythonListing, provider, ctx, plugin: str, kind: str) -> None:
    from tb_footprint_plugin.formats import views

    list_fn, read_fn = views.provider_calls(provider, kind)
    kw = dict(experiment_id=views.EXPERIMENT_ID, plugin_name=plugin, run_tag_filter=views.run_filter())
    listing = list_fn(ctx, **kw).get(views.RUN_NAME, {})
    if not listing:
        return
    data = read_fn(ctx, downsample=views.READ_ALL, **kw).get(views.RUN_NAME, {})
    tags = out.plugins.setdefault(plugin, {})
    for tag in sorted(listing):
        points = data.get(tag, [])
        if kind == views.BLOB_SEQUENCE:
            try:  # what the dashboard fetches next: a blob that cannot be read is a finding
                views.read_points(provider, ctx, kind, points, 1)
            except Exception as e:  # noqa: BLE001
                out.errors.append(f"{plugin}/{tag}: {type(e).__name__}: {e}")
        tags[tag] = [d.step for d in points]


class PythonSide:
    """``read_listing`` of one run in a child interpreter: ``start()`` now, ``result()`` later.

    Without a ``run_dir``, the child starts and imports TensorBoard's loader while the caller
    prepares what it will read (``python_probe``), and ``go(run_dir)`` then tells it.

    ``lazy`` (a reduce's verification): ``start()`` starts nothing; ``go`` reads a small input
    (``IN_PROCESS_BYTES``, ``IN_PROCESS_RECORDS``) with the same ``read_listing`` on a thread of
    this process, and starts the child, told its run, for anything bigger."""

    def __init__(self, run_dir: Optional[str], timeout_s: float, *, lazy: bool = False) -> None:
        self.run_dir = os.path.abspath(run_dir) if run_dir is not None else None
        self.timeout_s = timeout_s
        self.lazy = lazy
        #: "child" or "in-process" once ``go`` chose (a started child: "child")
        self.where: Optional[str] = None
        self._proc: Optional[subprocess.Popen] = None
        self._out = None
        self._err = None
        self._thread: Optional[threading.Thread] = None
        self._answer: Optional[PythonListing] = None

    def start(self) -> "PythonSide":
        if self.lazy and self.run_dir is None:
            return self  # ``go`` decides where the loader runs
        self.where = "child"
        # Output goes through files, not pipes: a child blocked on a full pipe would stall.
        self._out = tempfile.TemporaryFile()
        self._err = tempfile.TemporaryFile()
        try:
            # Its own session: the terminal's Ctrl-C signals the foreground process group, and a
            # loader killed by it was a failed verification, not the interrupt it was (review
            # R16 F13). Our end of its stdin is its lifeline (``LIFELINE``): the kernel closes it
            # when this process ends, however it ends, and the child then ends too.
            # It imports this very package (a worktree may shadow an installed copy) and TensorBoard
            # from where this process does, never from the current folder (review R11 G9: ``python
            # -m`` ran a package planted in a shared logdir one stands in).
            self._proc = popen_out_of_reach(  # the instant before its ``setsid`` too
                python_child(__name__, "child_main", [self.run_dir or "-", str(self.timeout_s), LIFELINE]),
                stdin=subprocess.PIPE, stdout=self._out, stderr=self._err, env=python_env(), cwd="/")
        except OSError:
            self._proc = None  # no interpreter to start: result() reads in this process
        return self

    def go(self, run_dir: str, records: Optional[int] = None) -> "PythonSide":
        """The run a child started without one reads (see the class docstring); ``records``:
        how many records it holds, if known (a lazy side reads a small run in this process)."""
        self.run_dir = os.path.abspath(run_dir)
        if self.lazy and self.where is None:
            if small_input(self.run_dir, records):
                self.where = "in-process"
                self._thread = threading.Thread(target=self._read_here, daemon=True,
                                                name="footprint-python-loader")
                self._thread.start()
                return self
            return self.start()  # a child told its run on its command line
        if self._proc is not None and self._proc.stdin is not None and not self._proc.stdin.closed:
            try:  # stdin stays open: it is the child's lifeline (closed by ``_close``)
                self._proc.stdin.write(os.fsencode(self.run_dir) + b"\n")
                self._proc.stdin.flush()
            except OSError:  # the child is gone: result() reports how it exited
                pass
        return self

    def _read_here(self) -> None:
        try:
            self._answer = read_listing(self.run_dir, self.timeout_s)
        except Exception as e:  # noqa: BLE001 - a loader that breaks proves nothing: a failure
            self._answer = PythonListing(fatal=f"python reader: {type(e).__name__}: {e}")

    def result(self) -> PythonListing:
        """The child's listing (or this process's own read if the child could not run)."""
        if self._thread is not None:
            self._thread.join(self.timeout_s + START_SLACK_S)
            if self._thread.is_alive() or self._answer is None:
                return PythonListing(fatal=f"python reader: no answer within "
                                           f"{self.timeout_s + START_SLACK_S:.0f}s")
            return self._answer
        if self._proc is None:
            self._close()
            return read_listing(self.run_dir, self.timeout_s)
        try:
            rc = self._proc.wait(timeout=self.timeout_s + START_SLACK_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
            self._close()
            return PythonListing(fatal=f"python reader: no answer within "
                                       f"{self.timeout_s + START_SLACK_S:.0f}s")
        self._out.seek(0)
        self._err.seek(0)
        out = self._out.read().decode("utf-8", "replace").strip().splitlines()
        err = self._err.read().decode("utf-8", "replace").strip()
        self._close()
        if rc != 0 or not out:
            tail = err.splitlines()[-1] if err else "no output"
            return PythonListing(fatal=f"python reader process exited with {rc}: {tail}")
        try:
            return PythonListing.from_json(json.loads(out[-1]))
        except (ValueError, TypeError, AttributeError) as e:
            return PythonListing(fatal=f"python reader process: unreadable answer ({e})")

    def cancel(self) -> None:
        """Stop the child (the caller is failing for another reason); an in-process read is
        waited for (a small run: it reads the folder the caller is about to remove)."""
        if self._thread is not None:
            self._thread.join(self.timeout_s + START_SLACK_S)
        if self._proc is not None and self._proc.stdin is not None and not self._proc.stdin.closed:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._close()

    def kill(self) -> None:
        """End the child now, from any thread (its verification was stopped): ``result`` then
        returns at once; an in-process read is left to end on its own (a small input)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    def _close(self) -> None:
        if self._proc is not None and self._proc.stdin is not None and not self._proc.stdin.closed:
            try:  # the lifeline: a child still running ends at its end of file
                self._proc.stdin.close()
            except OSError:
                pass
        for f in (self._out, self._err):
            if f is not None:
                f.close()
        self._out = self._err = None


def small_input(run_dir: str, records: Optional[int] = None) -> bool:
    """Whether the loader's input ``run_dir`` is small enough to be read in this process
    (``IN_PROCESS_BYTES``; ``IN_PROCESS_RECORDS`` when ``records`` is known, else
    ``IN_PROCESS_UNCOUNTED_BYTES``)."""
    from tb_footprint_plugin.verify.records import event_file_names

    size = 0
    for n in event_file_names(run_dir):
        try:
            size += os.stat(os.path.join(run_dir, n)).st_size
        except OSError:
            return False  # read where a failure cannot touch this process: the child
    if records is None:
        return size <= IN_PROCESS_UNCOUNTED_BYTES
    return size <= IN_PROCESS_BYTES and records <= IN_PROCESS_RECORDS


def _c_crc32c() -> None:
    """TensorBoard's TensorFlow stub checks record CRCs with a CRC-32C table in pure Python
    (~0.5 us a byte: most of this loader's time on histogram records); the same function
    in C (``readers.fast_stub_crc``): the loader's logic is untouched, and a CRC it would
    reject it still rejects."""
    from tb_footprint_plugin.verify.readers import fast_stub_crc

    fast_stub_crc()


#: What TensorBoard's file layer (``tensorflow_stub.io.gfile``) imports only to offer S3 and
#: fsspec paths (~0.25 s of a core at every child's start, a fifth of the child's work on a
#: 20 MB run): the child reads a local scratch folder, which gfile serves with its
#: ``LocalFileSystem`` whether they are there or not.
REMOTE_CLIENTS = ("botocore", "boto3", "fsspec")


def local_only_imports() -> None:
    """Make TensorBoard's file layer, imported after this, start without its S3 and fsspec
    clients (it catches the ``ImportError``). Only for this child, which reads local files and
    nothing else: never in a process that may hand TensorBoard a remote path."""
    for name in REMOTE_CLIENTS:
        sys.modules.setdefault(name, None)  # an import of a None entry raises ImportError


#: the child's third argument when its stdin is its parent's lifeline: the parent never closes
#: it before the answer is read, so an end of file means the parent gave up or is gone
LIFELINE = "lifeline"


def end_with_parent() -> None:
    """End this child (``os._exit``) once its stdin reaches its end: the parent closed it or
    ended. In its own session no terminal signal reaches it, and nothing else would stop a
    loader whose parent was killed from reading on to its timeout."""
    def watch() -> None:
        try:
            sys.stdin.buffer.read()  # the parent writes nothing more: returns at end of file
        except (OSError, ValueError):
            pass
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="footprint-parent-watch").start()


def _main(argv: list) -> int:
    run_dir, timeout_s = argv[0], float(argv[1])
    lifeline = len(argv) > 2 and argv[2] == LIFELINE
    if lifeline and run_dir != "-":
        end_with_parent()
    local_only_imports()
    _c_crc32c()
    if run_dir == "-":  # imports first, while the parent prepares the run; then its name
        from tensorboard.backend.event_processing import (  # noqa: F401
            data_provider, plugin_event_multiplexer)

        from tb_footprint_plugin.formats import views  # noqa: F401
        from tb_footprint_plugin.verify import readers  # noqa: F401

        run_dir = os.fsdecode(sys.stdin.buffer.readline().rstrip(b"\n"))
        if not run_dir:
            return 1  # the parent gave up
        if lifeline:
            end_with_parent()

    listing = read_listing(run_dir, timeout_s)
    sys.stdout.write(json.dumps(listing.to_json()) + "\n")
    sys.stdout.flush()
    return 0


def child_main(argv: list) -> int:
    """The reader child's entry (``storage.spawn.python_child``): ``argv`` is the run's folder (or
    "-": told on stdin), the timeout, and ``LIFELINE``. Never returns: ends the process."""
    code = _main(argv)
    # The answer is written and flushed, the loader's temporary logdir removed (``Reader``):
    # the interpreter's teardown of TensorBoard's modules (~0.2 s, measured) is time the
    # verification would wait for, with nothing left to do.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    child_main(sys.argv[1:])
