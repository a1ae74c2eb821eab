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
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Optional

#: Seconds added to the caller's timeout for the child's interpreter start and imports.
START_SLACK_S = 30.0


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


def python_probe(reduced_dir: str, exp, dest_dir: str) -> Optional[dict]:
    """Write the thinned copy of ``reduced_dir`` the loader reads (see the module docstring)
    into ``dest_dir``; ``{"thinned": {tag: records left out}, "records": records written}``,
    or None when it does not apply (pre-v2 files, nothing to thin, an unreadable record)."""
    from tensorboard.compat.proto import event_pb2

    from tb_footprint_plugin.scan import categories as cat
    from tb_footprint_plugin.scan.tfrecord import RecordReader
    from tb_footprint_plugin.verify import compare as c
    from tb_footprint_plugin.verify.records import event_file_names

    names = event_file_names(reduced_dir)
    if not names or not exp.records_subsequence:
        return None  # without the record subsequence, nothing proves a thinned tag whole
    binding: dict = {}  # tag -> plugin, from its first value (as the rewrite's selection)
    # per thinned tag: the stream position of its last record, to be kept (found in pass 1)
    last: dict = {}
    seen_version = False
    parse = event_pb2.Event.FromString

    def records():
        for fi, n in enumerate(names):
            with RecordReader(os.path.join(reduced_dir, n), verify=True, display_name=n) as r:
                for batch in r.batches():
                    buf = batch.buf
                    for st, size in zip(batch.starts.tolist(), batch.sizes.tolist()):
                        yield fi, buf[st:st + size]
            if r.status != "ok":
                raise ValueError(f"{n}: {r.status}")

    def classify(piece: bytes):
        """The tag a thinnable record belongs to, or None (kept); False: probe not valid."""
        nonlocal seen_version
        try:
            ev = parse(piece[12:-4])
        except Exception:  # noqa: BLE001 - unparseable: the probe is not the run's twin
            return False
        what = ev.WhichOneof("what")
        if what == "file_version":
            try:
                if float(ev.file_version.split(":", 1)[1]) < 2:
                    return False
            except (IndexError, ValueError):
                return False
            seen_version = True
            return None
        if not seen_version:
            return False  # a record before any file version: the loader's pre-v2 purge rules
        if what != "summary" or len(ev.summary.value) != 1:
            for v in ev.summary.value if what == "summary" else ():
                binding.setdefault(v.tag, "")  # bound from a shared record: never thinned
            return None
        v = ev.summary.value[0]
        if v.tag not in binding:
            kind = v.WhichOneof("value")
            binding[v.tag] = cat.LEGACY_PLUGIN.get(kind) or (
                v.metadata.plugin_data.plugin_name if v.HasField("metadata") else "")
            return None  # a tag's first record is always kept
        plugin = binding[v.tag]
        if not plugin or v.HasField("metadata") or exp.mode_for(plugin) != c.IDENTICAL:
            return None
        return v.tag

    try:
        pos = 0
        for _, piece in records():
            tag = classify(piece)
            if tag is False:
                return None
            if tag is not None:
                last[tag] = pos
            pos += 1
        if not last:
            return None
        keep_last = set(last.values())
        thinned: dict = {}
        written = 0
        outs = {}
        binding.clear()
        seen_version = False
        pos = 0
        try:
            for fi, piece in records():
                tag = classify(piece)
                if tag is not None and pos not in keep_last:
                    thinned[tag] = thinned.get(tag, 0) + 1
                else:
                    f = outs.get(fi)
                    if f is None:
                        f = outs[fi] = open(os.path.join(dest_dir, names[fi]), "xb")
                    f.write(piece)
                    written += 1
                pos += 1
        finally:
            for f in outs.values():
                f.close()
        for n in names:  # an event file whose records were all thinned is still there
            if not os.path.exists(os.path.join(dest_dir, n)):
                open(os.path.join(dest_dir, n), "xb").close()
    except (OSError, ValueError):
        return None
    if not thinned:
        return None
    return {"thinned": thinned, "records": written}


def read_listing(run_dir: str, timeout_s: float) -> PythonListing:
    """Load ``run_dir`` with the Python loader in this process; every point's step.

    The plugins' own calls (``list_*`` then ``read_*`` of every point; every blob of a blob
    sequence fetched), keeping only the steps: no per-point payload is built."""
    from tb_footprint_plugin.verify import views
    from tb_footprint_plugin.verify.readers import Reader

    out = PythonListing()
    with Reader(run_dir, "python", None, store_all=True, timeout_s=timeout_s) as r:
        if r.provider is not None and not r.view.fatal and r.view.run_present:
            ctx = views._request_context()
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
    from tb_footprint_plugin.verify import views

    list_fn, read_fn = views._provider_calls(provider, kind)
    kw = dict(experiment_id=views.EXPERIMENT_ID, plugin_name=plugin, run_tag_filter=views._rtf())
    listing = list_fn(ctx, **kw).get(views.RUN_NAME, {})
    if not listing:
        return
    data = read_fn(ctx, downsample=views.READ_ALL, **kw).get(views.RUN_NAME, {})
    tags = out.plugins.setdefault(plugin, {})
    for tag in sorted(listing):
        points = data.get(tag, [])
        if kind == views.BLOB_SEQUENCE:
            try:  # what the dashboard fetches next: a blob that cannot be read is a finding
                views._points(provider, ctx, kind, points, 1)
            except Exception as e:  # noqa: BLE001
                out.errors.append(f"{plugin}/{tag}: {type(e).__name__}: {e}")
        tags[tag] = [d.step for d in points]


class PythonSide:
    """``read_listing`` of one run in a child interpreter: ``start()`` now, ``result()`` later.

    Without a ``run_dir``, the child starts and imports TensorBoard's loader while the caller
    prepares what it will read (``python_probe``), and ``go(run_dir)`` then tells it."""

    def __init__(self, run_dir: Optional[str], timeout_s: float) -> None:
        self.run_dir = os.path.abspath(run_dir) if run_dir is not None else None
        self.timeout_s = timeout_s
        self._proc: Optional[subprocess.Popen] = None
        self._out = None
        self._err = None

    def start(self) -> "PythonSide":
        pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        # The child must import this very package (a worktree may shadow an installed copy).
        env["PYTHONPATH"] = os.pathsep.join(
            [pkg_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        # Output goes through files, not pipes: a child blocked on a full pipe would stall.
        self._out = tempfile.TemporaryFile()
        self._err = tempfile.TemporaryFile()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", __name__, self.run_dir or "-", str(self.timeout_s)],
                stdin=subprocess.DEVNULL if self.run_dir else subprocess.PIPE,
                stdout=self._out, stderr=self._err, env=env)
        except OSError:
            self._proc = None  # no interpreter to start: result() reads in this process
        return self

    def go(self, run_dir: str) -> "PythonSide":
        """The run a child started without one reads (see the class docstring)."""
        self.run_dir = os.path.abspath(run_dir)
        if self._proc is not None and self._proc.stdin is not None:
            try:
                self._proc.stdin.write(os.fsencode(self.run_dir) + b"\n")
                self._proc.stdin.close()
            except OSError:  # the child is gone: result() reports how it exited
                pass
        return self

    def result(self) -> PythonListing:
        """The child's listing (or this process's own read if the child could not run)."""
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
        """Stop the child (the caller is failing for another reason)."""
        if self._proc is not None and self._proc.stdin is not None and not self._proc.stdin.closed:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._close()

    def _close(self) -> None:
        for f in (self._out, self._err):
            if f is not None:
                f.close()
        self._out = self._err = None


def _c_crc32c() -> None:
    """TensorBoard's TensorFlow stub checks record CRCs with a CRC-32C table in pure Python
    (~0.5 us a byte: most of this loader's time on histogram records); the same function
    in C (``google_crc32c``, already what ``scan.tfrecord`` uses). Only in this child: the
    loader's logic is untouched, and a CRC it would reject it still rejects."""
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow

    from tb_footprint_plugin.scan.tfrecord import masked_crc32c

    pywrap_tensorflow.masked_crc32c = masked_crc32c


def _main(argv: list) -> int:
    run_dir, timeout_s = argv[0], float(argv[1])
    _c_crc32c()
    if run_dir == "-":  # imports first, while the parent prepares the run; then its name
        from tensorboard.backend.event_processing import (  # noqa: F401
            data_provider, plugin_event_multiplexer)

        from tb_footprint_plugin.verify import readers, views  # noqa: F401

        run_dir = os.fsdecode(sys.stdin.buffer.readline().rstrip(b"\n"))
        if not run_dir:
            return 1  # the parent gave up

    listing = read_listing(run_dir, timeout_s)
    sys.stdout.write(json.dumps(listing.to_json()) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
