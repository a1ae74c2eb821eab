"""What TensorBoard's own readers show for one run, through the DataProvider API.

Two backends, the two the dashboard can use:

* ``"python"`` — a fresh ``EventMultiplexer`` wrapped in ``MultiplexerDataProvider``
  (what ``--load_fast=false`` serves), configured like ``LocalDataIngester``.
* ``"rust"`` — a private ``tensorboard-data-server`` subprocess read through
  ``GrpcDataProvider`` (what the default ``--load_fast=auto`` serves).

Both read a temporary logdir holding one run directory named ``run`` whose entries are
symlinks to the event files directly in ``run_dir``: subdirectories are never part of the
run (as in TensorBoard) and the caller's directories are never written to.

Everything is read the way plugins read it (``list_*`` then ``read_*`` with a downsample),
with a downsample large enough to return every stored point. Any exception is recorded in
``RunView.errors`` rather than raised: a reader failure is a verification finding.

Why one module: the two backends (the Python multiplexer, the Rust data
server) are read through the same DataProvider calls in the same order into the same
``RunView``; kept together, a read or normalisation added for one is seen beside the other's,
which is what makes the two views comparable.
"""
from __future__ import annotations

import concurrent.futures
import errno
import hashlib
import importlib
import importlib.util
import logging
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Optional

from tb_footprint_plugin.storage.spawn import popen_out_of_reach
from tb_footprint_plugin.scan import categories
from tb_footprint_plugin.storage import scratch

RUN_NAME = "run"
EXPERIMENT_ID = ""
#: Big enough to return every stored point (the Rust server rejects only negatives).
READ_ALL = 2**31 - 1
BACKENDS = ("python", "rust")
#: Concurrent ReadBlob calls to the data server (latency-bound, not CPU-bound).
RUST_BLOB_WORKERS = 16

SCALAR, TENSOR, BLOB_SEQUENCE = "scalar", "tensor", "blob_sequence"
KINDS = (SCALAR, TENSOR, BLOB_SEQUENCE)

GRAPHS_PLUGIN = "graphs"
RUN_GRAPH_TAG = "__run_graph__"

#: Read-time downsampling the 2.21 plugins apply by default (``_DEFAULT_DOWNSAMPLING``).
DISPLAY_DOWNSAMPLE = {
    "scalars": 1000,
    "histograms": 500,
    "images": 10,
    "audio": 10,
    "pr_curves": 100,
    "text": 100,
    "mesh": 100,
}

#: Plugin names of TensorBoard 2.21's summary plugins (for "keep all" on the Rust server,
#: which only accepts sampling overrides by name).
KNOWN_PLUGINS = frozenset(
    {
        "scalars", "histograms", "images", "audio", "text", "hparams", "pr_curves", "mesh",
        "custom_scalars", "projector", "graphs", "graph_run_metadata",
        "graph_run_metadata_graph", "graph_keras_model", "graph_tagged_run_metadata",
    }
)

#: Sampling hints: plugin name -> points stored per tag (0 = all, None = backend default).
SamplingHints = Mapping[str, Optional[int]]


class TensorPayload(NamedTuple):
    """A tensor value in comparable form: numpy dtype, shape and canonical bytes."""

    dtype: str
    shape: tuple
    data: bytes


@dataclass
class TagView:
    """One time series as a backend returns it."""

    kind: str  # scalar | tensor | blob_sequence
    #: Serialized ``SummaryMetadata`` rebuilt from what both providers expose (plugin
    #: name and content, display name, description, data class), deterministic bytes.
    metadata: bytes
    #: ``(step, wall_time, payload)``; payload is a float (scalars), a ``TensorPayload``
    #: (tensors) or a tuple of blob sha256 hex digests (blob sequences).
    points: list = field(default_factory=list)
    #: Steps the plugin would display (its default read-time downsample), if it has one.
    display_steps: Optional[list] = None


@dataclass
class RunView:
    """Everything one backend shows for one run."""

    run_dir: str
    backend: str
    run_present: bool = False
    plugins: dict = field(default_factory=dict)  # plugin -> tag -> TagView
    graph: Optional[str] = None  # sha256 of the run graph blob the graphs plugin reads
    #: sha256 of the graphs route's body for that graph with the dashboard's attribute
    #: filter (``limit_attr_size=1024&large_attrs_key=_too_large_attrs``)
    graph_route: Optional[str] = None
    graph_nodes: Optional[int] = None  # its node count (None: no graph, or not a GraphDef)
    #: Set when the whole read failed (server would not start, loader crashed, timeout):
    #: the view then says nothing about the run.
    fatal: Optional[str] = None
    errors: list = field(default_factory=list)
    warnings: list = field(default_factory=list)  # reader log warnings (normalized)
    event_files: list = field(default_factory=list)
    storage: str = ""  # how many points per tag the reader was told to keep
    duration_s: float = 0.0

    def tag(self, plugin: str, tag: str) -> Optional[TagView]:
        return self.plugins.get(plugin, {}).get(tag)

    def counts(self) -> dict:
        """``{plugin: (tags, points)}`` for summaries and reports."""
        return {
            p: (len(tags), sum(len(t.points) for t in tags.values()))
            for p, tags in sorted(self.plugins.items())
        }


class VerifyTimeout(RuntimeError):
    """A reader did not finish within its time budget."""


# --- public entry point ------------------------------------------------------------------


def read_view(
    run_dir: str,
    backend: str = "python",
    sampling_hints: Optional[SamplingHints] = None,
    *,
    store_all: bool = False,
    timeout_s: float = 120.0,
) -> RunView:
    """Read ``run_dir`` as one run through a fresh TensorBoard reader of ``backend``.

    ``sampling_hints`` is ``--samples_per_plugin`` (0 = keep all). With ``store_all`` every
    plugin keeps every point unless a hint says otherwise (``None`` = that backend's
    default); on the Rust server this applies to ``KNOWN_PLUGINS`` and hinted names only.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    view = RunView(run_dir=os.path.abspath(run_dir), backend=backend)
    start = time.monotonic()
    tmp = scratch.make("verify")  # in the vault during an operation: a killed process's is swept
    try:
        logdir = os.path.join(tmp, "logdir")
        view.event_files = link_run(run_dir, os.path.join(logdir, RUN_NAME))
        if backend == "python":
            _read_python(view, logdir, dict(sampling_hints or {}), store_all)
        else:
            _read_rust(view, logdir, tmp, dict(sampling_hints or {}), store_all, timeout_s)
    except Exception as e:  # noqa: BLE001 - a reader failure is a finding, not a crash
        view.fatal = normalize_message(f"{backend} reader: {type(e).__name__}: {e}", tmp)
        view.errors.append(view.fatal)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        view.duration_s = time.monotonic() - start
    shown = {link: real for real, link in _link_names(view.event_files).items() if link != real}

    def norm(m: str) -> str:
        m = normalize_message(m, tmp)
        for link, real in shown.items():  # messages name the run's own files
            m = m.replace(link, real.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"))
        return m

    view.errors = [norm(m) for m in view.errors]
    view.warnings = [norm(m) for m in view.warnings]
    return view


#: TensorBoard's file layer, and what it imports only to offer ``s3://`` and fsspec paths
_GFILE = "tensorboard.compat.tensorflow_stub.io.gfile"
_GFILE_CLIENTS = ("botocore", "boto3", "fsspec")


class _Deferred(types.ModuleType):
    """A module imported at its first attribute use (``boto3.client``, ``botocore.exceptions``,
    ``fsspec.core``: what TensorBoard's gfile reads only when a path needs them)."""

    def __init__(self, name: str, first: Optional[str] = None) -> None:
        super().__init__(name)
        self.__dict__["_import"] = (first or name, name)

    def __getattr__(self, attr: str):
        first, name = self.__dict__["_import"]
        importlib.import_module(first)
        return getattr(importlib.import_module(name), attr)

    def __bool__(self) -> bool:
        return True


def import_tensorboard_io() -> None:
    """Import TensorBoard's file layer (``tensorflow_stub.io.gfile``) with its S3 and fsspec
    clients imported when a path first needs them, not now: importing boto3 and fsspec is ~0.2 s
    of a core (~0.7 s on a loaded machine) on a reduce's critical path, for paths the readers
    never get (a run's scratch folder is local). Everything gfile offers stays offered: the
    ``s3`` filesystem is registered as TensorBoard registers it, over deferred modules. Only in
    a process with no other thread (one importing them meanwhile would find them missing) and
    where gfile is not imported yet (TensorBoard's own process: nothing to do); else a plain
    import."""
    if _GFILE in sys.modules:
        return
    hide = [m for m in _GFILE_CLIENTS if m not in sys.modules] if threading.active_count() == 1 else []
    for m in hide:
        sys.modules[m] = None  # gfile's ``import`` of it raises ImportError, which it catches
    try:
        gfile = importlib.import_module(_GFILE)
    finally:
        for m in hide:
            if m in sys.modules and sys.modules[m] is None:
                del sys.modules[m]
    # what gfile would have set up, had it imported them itself
    if "boto3" in hide and all(importlib.util.find_spec(m) for m in ("boto3", "botocore")):
        gfile.boto3 = _Deferred("boto3")
        gfile.botocore = _Deferred("botocore", "botocore.exceptions")
        gfile.S3_ENABLED = True
        gfile.register_filesystem("s3", gfile.S3FileSystem())
    if "fsspec" in hide and importlib.util.find_spec("fsspec"):
        gfile.fsspec = _Deferred("fsspec")
        gfile.FSSPEC_ENABLED = True


def data_server_binary() -> Optional[str]:
    """Path of the Rust data server binary, or None when it is not available.

    Found as TensorBoard's ``server_ingester.get_server_binary`` finds it (its environment
    variable, its bundled binary, the ``tensorboard_data_server`` package; a test holds the two
    equal) without importing that module: it imports gRPC and the provider's protos (~50 ms of
    a core), which ``DataServer.start`` imports while the server starts instead, on a reduce's
    critical path (the plan's load of the original comes first thing)."""
    try:
        import_tensorboard_io()
        return _server_binary_path()
    except Exception:  # noqa: BLE001 - any failure means "not available"
        return None


#: ``server_ingester._ENV_DATA_SERVER_BINARY``
DATA_SERVER_BINARY_ENV = "TENSORBOARD_DATA_SERVER_BINARY"


def _server_binary_path() -> str:
    """``server_ingester.get_server_binary().path`` (TensorBoard 2.21), or an error."""
    env = os.environ.get(DATA_SERVER_BINARY_ENV)
    if env:
        if not os.path.isfile(env):
            raise FileNotFoundError(env)
        return env
    import tensorboard.data

    bundled = os.path.join(os.path.dirname(tensorboard.data.__file__), "server", "server")
    if os.path.exists(bundled):
        return bundled
    import tensorboard_data_server

    path = tensorboard_data_server.server_binary()
    if path is None:
        raise FileNotFoundError("TensorBoard data server not supported on this platform")
    return path


def connect(channel, timeout_s: float) -> None:
    """Wait until ``channel`` reaches its data server: one ``ListPlugins`` call that waits for
    the connection (``wait_for_ready``) up to ``timeout_s``; a failure raises (``RpcError``).

    Not ``grpc.channel_ready_future``: it subscribes to the channel's connectivity, which starts
    a thread watching it in 0.2 s periods (and one more thread per change it delivers), and
    ``channel.close()`` then waits for that watch to end: a reader closed within ~0.2 s of its
    open waited ~0.1-0.15 s in its close (measured, a 2 MB run's reader: 110-154 ms, 3-8 ms
    without), and each open ~3-6 ms longer. The call is a read the readers make anyway; it
    proves the same thing (the server answers on this channel) before anything is read."""
    from tensorboard.data import grpc_provider
    from tensorboard.data.proto import data_provider_pb2

    grpc_provider.make_stub(channel).ListPlugins(
        data_provider_pb2.ListPluginsRequest(experiment_id=EXPERIMENT_ID),
        timeout=timeout_s, wait_for_ready=True)


def rust_client_imports() -> None:
    """What talking to a data server needs (gRPC, TensorBoard's provider): imported while one
    starts (``DataServer.start``), and by a caller that must have them before it starts other
    imports (``OriginalRun.load_now``)."""
    import grpc  # noqa: F401
    from tensorboard.data import grpc_provider  # noqa: F401


# --- shared reading through a DataProvider -----------------------------------------------


def link_run(run_dir: str, link_dir: str) -> list[str]:
    """Make ``link_dir`` hold symlinks to the event files directly in ``run_dir``."""
    os.makedirs(link_dir)
    src = os.path.abspath(run_dir)
    if not os.path.isdir(src):
        return []  # a missing run dir is an empty run: "run_present" will say so
    names = sorted(
        e.name
        for e in os.scandir(src)
        if categories.is_event_file_name(e.name) and e.is_file(follow_symlinks=True)
    )
    for name, link in _link_names(names).items():
        os.symlink(os.path.join(src, name), os.path.join(link_dir, link))
    return names


def _valid_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _link_names(names: list) -> dict:
    """Name under which each event file is shown to the readers.

    TensorBoard's Python reader cannot open a file whose name is not valid UTF-8 (it decodes
    paths). Only the order of a run's files and the 'tfevents' in their names matter to the
    readers, so when a run has such a name every file gets an ordered ASCII name (in byte
    order, as the Rust reader sorts); otherwise names are kept as they are."""
    if all(_valid_utf8(n) for n in names):
        return {n: n for n in names}
    ordered = sorted(names, key=lambda n: os.fsencode(n))
    out = {}
    for i, n in enumerate(ordered):
        tail = ".profile-empty" if n.endswith(".profile-empty") else ""
        out[n] = f"events.out.tfevents.{i:06d}.renamed{tail}"
    return out


def normalize_message(message: str, tmp: str) -> str:
    """Replace temp paths in reader messages so before/after messages compare equal."""
    return message.replace(os.path.join(tmp, "logdir", RUN_NAME), "<run>").replace(tmp, "<tmp>")


def request_context():
    """A fresh ``RequestContext``, as TensorBoard passes one to every DataProvider call."""
    from tensorboard import context

    return context.RequestContext()


def read_provider(view: RunView, provider, hints: SamplingHints, blob_workers: int = 1,
                   only: Optional[Iterable[str]] = None, payloads: bool = True) -> None:
    """Fill ``view`` from a DataProvider (same calls for both backends); ``only``: just these
    plugins, and no run graph; ``payloads=False``: each point's step and wall time only (no
    blob fetched, no tensor converted: what a selection needs of the default view)."""
    ctx = request_context()
    runs = provider.list_runs(ctx, experiment_id=EXPERIMENT_ID)
    view.run_present = any(r.run_name == RUN_NAME for r in runs)
    if not view.run_present:
        return
    # An empty name is a tag with no plugin: no dashboard can read it (Rust rejects it).
    plugins = sorted(p for p in provider.list_plugins(ctx, experiment_id=EXPERIMENT_ID) if p)
    if only is not None:
        plugins = [p for p in plugins if p in set(only)]
    for plugin in plugins:
        for kind in KINDS:
            try:
                read_kind(view, provider, ctx, plugin, kind, hints, blob_workers, payloads)
            except Exception as e:  # noqa: BLE001
                view.errors.append(f"{plugin} ({kind}s): {type(e).__name__}: {e}")
    if only is not None:
        return
    try:
        view.graph, view.graph_route, view.graph_nodes = _read_run_graph(provider, ctx)
    except Exception as e:  # noqa: BLE001
        view.errors.append(f"run graph: {type(e).__name__}: {e}")


def run_filter(tags: Optional[Iterable[str]] = None):
    """The ``RunTagFilter`` of the one run a view reads (``tags``: only these, None for all)."""
    from tensorboard.data import provider as provider_mod

    return provider_mod.RunTagFilter(runs=[RUN_NAME], tags=tags)


def provider_calls(provider, kind: str) -> tuple[Callable, Callable]:
    """The provider's (list, read) methods of one data ``kind`` (scalar, tensor, blob sequence)."""
    if kind == SCALAR:
        return provider.list_scalars, provider.read_scalars
    if kind == TENSOR:
        return provider.list_tensors, provider.read_tensors
    return provider.list_blob_sequences, provider.read_blob_sequences


def _metadata_bytes(plugin: str, kind: str, ts) -> bytes:
    """Canonical SummaryMetadata bytes from a listed time series."""
    from tensorboard.compat.proto import summary_pb2

    data_class = {
        SCALAR: summary_pb2.DATA_CLASS_SCALAR,
        TENSOR: summary_pb2.DATA_CLASS_TENSOR,
        BLOB_SEQUENCE: summary_pb2.DATA_CLASS_BLOB_SEQUENCE,
    }[kind]
    md = summary_pb2.SummaryMetadata(
        display_name=ts.display_name or "",
        summary_description=ts.description or "",
        data_class=data_class,
    )
    md.plugin_data.plugin_name = plugin
    md.plugin_data.content = ts.plugin_content or b""
    return md.SerializeToString(deterministic=True)


def read_kind(view, provider, ctx, plugin, kind, hints, blob_workers, payloads: bool = True,
              skip: int = 0) -> None:
    """List and read every tag of one plugin and data class (``payloads``: see ``read_provider``;
    ``skip``: see ``read_points``)."""
    list_fn, read_fn = provider_calls(provider, kind)
    kw = dict(experiment_id=EXPERIMENT_ID, plugin_name=plugin, run_tag_filter=run_filter())
    listing = list_fn(ctx, **kw).get(RUN_NAME, {})
    if not listing:
        return
    data = read_fn(ctx, downsample=READ_ALL, **kw).get(RUN_NAME, {})
    tags = view.plugins.setdefault(plugin, {})
    for tag in sorted(listing):
        tv = TagView(kind=kind, metadata=_metadata_bytes(plugin, kind, listing[tag]))
        try:
            tv.points = (read_points(provider, ctx, kind, data.get(tag, []), blob_workers, skip) if payloads
                         else [(d.step, d.wall_time, None) for d in data.get(tag, [])])
        except Exception as e:  # noqa: BLE001
            view.errors.append(f"{plugin}/{tag}: {type(e).__name__}: {e}")
        tags[tag] = tv
    _add_display_steps(provider, ctx, plugin, kind, tags, listing, hints)


def read_points(provider, ctx, kind: str, data: list, blob_workers: int, skip: int = 0) -> list:
    """``(step, wall_time, payload)`` for each datum; blobs are fetched and hashed. ``skip``: a
    blob sequence's first values that are not fetched, None in their place (an image
    summary's width and height, which no dashboard route serves)."""
    if kind == SCALAR:
        return [(d.step, d.wall_time, float(d.value)) for d in data]
    if kind == TENSOR:
        return [(d.step, d.wall_time, tensor_payload(d.numpy)) for d in data]
    keys = [ref.blob_key for d in data for ref in d.values[skip:]]

    def digest(key: str) -> str:
        return hashlib.sha256(bytes(provider.read_blob(ctx, blob_key=key))).hexdigest()

    if blob_workers > 1 and len(keys) > 1:
        # Each ReadBlob RPC to the data server costs ~20 ms of latency, not work.
        with concurrent.futures.ThreadPoolExecutor(max_workers=blob_workers) as pool:
            digests = iter(list(pool.map(digest, keys)))
    else:
        digests = iter([digest(k) for k in keys])
    return [(d.step, d.wall_time, tuple(None if i < skip else next(digests) for i in range(len(d.values))))
            for d in data]


def tensor_payload(array) -> TensorPayload:
    """Canonical bytes of a numpy array; string tensors are length-prefixed elements."""
    import numpy as np

    arr = np.asarray(array)
    if arr.dtype == object or arr.dtype.kind in "SU":
        parts = []
        for x in arr.reshape(-1).tolist():
            b = x if isinstance(x, bytes) else str(x).encode("utf-8")
            parts.append(struct.pack("<Q", len(b)) + b)
        return TensorPayload("bytes", tuple(arr.shape), b"".join(parts))
    return TensorPayload(arr.dtype.str, tuple(arr.shape), np.ascontiguousarray(arr).tobytes())


def _add_display_steps(provider, ctx, plugin, kind, tags, listing, hints) -> None:
    """Record what the plugin would display: its default read-time downsample."""
    # A positive hint is also the plugin's read-time downsample (TensorBoard passes
    # --samples_per_plugin to both); 0/None here are storage overrides, not display.
    k = hints.get(plugin) or DISPLAY_DOWNSAMPLE.get(plugin)
    if k is None:
        return
    if all(len(tags[t].points) <= k for t in listing):
        for t in listing:  # downsample returns everything: no second read needed
            tags[t].display_steps = [p[0] for p in tags[t].points]
        return
    _, read_fn = provider_calls(provider, kind)
    shown = read_fn(
        ctx, experiment_id=EXPERIMENT_ID, plugin_name=plugin, downsample=k, run_tag_filter=run_filter()
    ).get(RUN_NAME, {})
    for t in listing:
        tags[t].display_steps = [d.step for d in shown.get(t, [])]


def _read_run_graph(provider, ctx) -> tuple[Optional[str], Optional[str], Optional[int]]:
    """The graphs plugin's read of the run graph (``downsample=1``): sha256 of the blob, of the
    route's body for it with the dashboard's attribute filter, and its node count."""
    seqs = provider.read_blob_sequences(
        ctx,
        experiment_id=EXPERIMENT_ID,
        plugin_name=GRAPHS_PLUGIN,
        run_tag_filter=run_filter([RUN_GRAPH_TAG]),
        downsample=1,
    )
    data = seqs.get(RUN_NAME, {}).get(RUN_GRAPH_TAG, ())
    if not data or not data[0].values:
        return None, None, None
    blob = bytes(provider.read_blob(ctx, blob_key=data[0].values[0].blob_key))
    from tb_footprint_plugin.formats import graph_attrs

    try:
        route = graph_attrs.route_graph_digest(blob)
    except Exception:  # noqa: BLE001 - not a GraphDef: the route fails the same way on both
        route = None
    return hashlib.sha256(blob).hexdigest(), route, _node_count(blob)


def _node_count(blob: bytes) -> Optional[int]:
    """Nodes of a serialized GraphDef (what the check page lists), None if it does not parse."""
    try:
        from tensorboard.compat.proto import graph_pb2

        g = graph_pb2.GraphDef()
        g.ParseFromString(blob)
        return len(g.node)
    except Exception:  # a finding for the comparison, not for the count
        return None


# --- python backend ----------------------------------------------------------------------


class LogCapture(logging.Handler):
    """Collects TensorBoard reader log records emitted by this thread."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.thread = threading.get_ident()
        self.errors: list[str] = []
        self.warnings: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread != self.thread:
            return  # another reader in this process; not ours
        msg = f"{record.name}: {record.getMessage()}"
        (self.errors if record.levelno >= logging.ERROR else self.warnings).append(msg)


def python_guidance(hints: SamplingHints, store_all: bool) -> tuple[dict, dict]:
    """Size guidances as ``LocalDataIngester`` builds them, plus our overrides."""
    from tensorboard.backend.event_processing import data_ingester, tag_types

    size = dict(data_ingester.DEFAULT_SIZE_GUIDANCE)
    defaults = dict(data_ingester.DEFAULT_TENSOR_SIZE_GUIDANCE)
    tensor = dict(defaults)
    if store_all:
        size[tag_types.TENSORS] = 0
        tensor = {k: 0 for k in tensor}
    for plugin, n in hints.items():
        if n is None:  # the backend's own default for this plugin
            tensor[plugin] = defaults.get(plugin, data_ingester.DEFAULT_SIZE_GUIDANCE[tag_types.TENSORS])
        else:
            tensor[plugin] = int(n)
    return size, tensor


def _read_python(view: RunView, logdir: str, hints: dict, store_all: bool) -> None:
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.util import tb_logging

    size, tensor = python_guidance(hints, store_all)
    view.storage = f"size_guidance={size} tensor_size_guidance={dict(sorted(tensor.items()))}"
    mux = plugin_event_multiplexer.EventMultiplexer(
        size_guidance=size,
        tensor_size_guidance=tensor,
        purge_orphaned_data=True,  # the --purge_orphaned_data default
    )
    capture = LogCapture()
    tb_logger = tb_logging.get_logger()
    tb_logger.addHandler(capture)
    try:
        mux.AddRunsFromDirectory(logdir)  # TensorBoard's run discovery on our one-run logdir
        mux.Reload()
    finally:
        tb_logger.removeHandler(capture)
    view.errors.extend(capture.errors)
    view.warnings.extend(capture.warnings)
    read_provider(view, data_provider.MultiplexerDataProvider(mux, logdir), hints)


# --- rust backend ------------------------------------------------------------------------


class DataServer:
    """A private ``tensorboard-data-server`` on one logdir, loaded once."""

    def __init__(self, binary: str, logdir: str, workdir: str, samples: str) -> None:
        self.port_file = os.path.join(workdir, "port")
        self.error_file = os.path.join(workdir, "startup_error")
        self.args = [
            binary,
            f"--logdir={logdir}",
            "--reload=once",
            f"--samples-per-plugin={samples}",
            "--port=0",
            f"--port-file={self.port_file}",
            f"--error-file={self.error_file}",
            "--die-after-stdin",
            "--verbose",  # INFO logs: "Finished load cycle" tells us loading is done
        ]
        self.proc: Optional[subprocess.Popen] = None
        self.loaded = threading.Event()
        self.log: list[str] = []
        self._reader: Optional[threading.Thread] = None
        self.channel = None
        #: TCP sockets of the server given ``TCP_NODELAY`` (``reply_without_delay``), 0 if none
        self.nodelay = 0

    def start(self, timeout_s: float) -> str:
        """Spawn the server and return its ``host:port`` once the port file is written."""
        # Its own session: a Ctrl-C at the terminal signals the whole foreground process group,
        # and a server in it died mid-verification, whose reader then reported "connection
        # refused" as a difference the policy made (review R16 F13). Stopped by us (``stop``),
        # and never outliving us: ``--die-after-stdin`` ends it when its stdin closes, which the
        # kernel does when this process ends, however it ends (SIGKILL too).
        self.proc = popen_out_of_reach(  # the instant before its ``setsid`` too
            self.args, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout_s
        rust_client_imports()  # while the server starts (the first time in a process: ~50 ms)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"data server exited with {self.proc.returncode}: {self._why()}")
            contents = _read_text(self.port_file)
            if contents.endswith("\n"):
                # the port is written once the server listens: the socket our channel's
                # connection is accepted from exists now, and passes the option on to it
                self.nodelay = reply_without_delay(self.proc.pid)
                return f"localhost:{int(contents)}"
            # the port comes ~20-50 ms after the spawn: every reduce waits for two of these
            time.sleep(0.005)
        raise VerifyTimeout(f"data server did not report a port within {timeout_s:.0f}s")

    def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            self.log.append(line)
            if "Finished load cycle" in line:
                self.loaded.set()

    def _why(self) -> str:
        msg = _read_text(self.error_file).strip()
        if self._reader:
            self._reader.join(timeout=1)
        return msg or " | ".join(self.log[-5:]) or "no message"

    def problems(self) -> tuple[list[str], list[str]]:
        """(errors, warnings) the server logged, without timestamps."""
        errors, warnings = [], []
        for line in self.log:
            body = line.split("] ", 1)[-1] if line.startswith("[") else line
            if " ERROR " in line:
                errors.append(f"data server: {body}")
            elif " WARN " in line:
                warnings.append(f"data server: {body}")
        return errors, warnings

    def stop(self) -> None:
        """Close our channel and stdin (the server dies), then make sure it is gone."""
        if self.channel is not None:
            self.channel.close()
        if self.proc is None:
            return
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(timeout=5)
        if self._reader:
            self._reader.join(timeout=2)
        if self.proc.stderr:
            self.proc.stderr.close()


#: ``pidfd_getfd(2)``'s number: the same on every Linux architecture (new system calls share
#: one table since 5.x)
_SYS_PIDFD_GETFD = 438


def reply_without_delay(pid: int) -> int:
    """Give the TCP sockets of our child ``pid`` (a data server that just started listening)
    ``TCP_NODELAY``; returns how many were set (0: not possible here; nothing changes then).

    The data server (rustboard 0.7, hyper) leaves Nagle's algorithm on: a response it writes in
    two parts waits for the client's ACK of the first, which Linux delays 40 ms in a
    request/response exchange. Measured on a 20 MB run: ``read_blob_sequences`` took 42-45 ms in
    most calls instead of 0.6 ms, ``read_blob`` 43 ms in half of them; a reduce's plan, route
    crawl and the tab's reads wait for dozens of them, one after the other, whatever the run's
    size (issue #28 item 3). The option is set on the listening socket, from which the
    connections accepted later inherit it (Linux copies it to each); it changes when the
    server's bytes are sent, never which. Through ``pidfd_getfd(2)`` (Linux >= 5.6; a process
    may take a descriptor of its own child): a kernel without it, or a policy that forbids it,
    leaves the server as it was."""
    import ctypes
    import socket

    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return 0
    done = 0
    try:
        syscall = ctypes.CDLL(None, use_errno=True).syscall
        folder = f"/proc/{pid}/fd"
        for name in os.listdir(folder):
            try:
                if not os.readlink(os.path.join(folder, name)).startswith("socket:"):
                    continue
            except OSError:
                continue
            fd = syscall(_SYS_PIDFD_GETFD, pidfd, int(name), 0)
            if fd < 0:
                if ctypes.get_errno() in (errno.EPERM, errno.ENOSYS, errno.EACCES):
                    break  # not allowed or not there: the same for every descriptor
                continue  # closed since the listing
            try:
                # a copy of the server's descriptor: the option is the socket's, shared
                sock = socket.socket(fileno=fd)
                try:
                    if sock.type == socket.SOCK_STREAM and sock.family in (socket.AF_INET, socket.AF_INET6):
                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        done += 1
                finally:
                    sock.detach()
            except OSError:
                pass
            finally:
                os.close(fd)
    except (OSError, AttributeError):
        pass
    finally:
        os.close(pidfd)
    return done


def _read_text(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def rust_samples(hints: SamplingHints, store_all: bool) -> str:
    """``--samples-per-plugin`` value; 0 is passed as ``all`` like TensorBoard does."""
    wanted: dict[str, Optional[int]] = {p: 0 for p in KNOWN_PLUGINS} if store_all else {}
    wanted.update(hints)
    pairs = [f"{p}={'all' if n == 0 else int(n)}" for p, n in sorted(wanted.items()) if n is not None]
    return ",".join(pairs)


def _listing_fingerprint(provider) -> tuple:
    """Every tag with its last step and wall time (cheap ``list_*`` calls): unchanged once
    loading is complete."""
    ctx = request_context()
    runs = tuple(sorted(r.run_name for r in provider.list_runs(ctx, experiment_id=EXPERIMENT_ID)))
    if RUN_NAME not in runs:
        return (runs,)
    out: list = [runs]
    for plugin in sorted(p for p in provider.list_plugins(ctx, experiment_id=EXPERIMENT_ID) if p):
        for kind in KINDS:
            list_fn, _ = provider_calls(provider, kind)
            kw = dict(experiment_id=EXPERIMENT_ID, plugin_name=plugin, run_tag_filter=run_filter())
            listing = list_fn(ctx, **kw).get(RUN_NAME, {})
            out.extend((plugin, kind, t, ts.max_step, ts.max_wall_time)
                       for t, ts in sorted(listing.items()))
    return tuple(out)


#: Without the "Finished load cycle" log line, a listing must stay unchanged this long:
#: longer than the server's 5 s commit interval while it is still loading.
UNSIGNALLED_STABLE_S = 6.0


def wait_until_loaded(server: DataServer, provider, timeout_s: float) -> None:
    """Wait until the run is loaded.

    ``--reload=once`` loads asynchronously and commits partial data every few seconds on
    big runs. The server's "Finished load cycle" log line is the signal: the cycle commits
    every run before it logs it, and no cycle follows. Should the line never come (another
    server version), a listing (every tag's last step and wall time, cheap ``list_*`` calls)
    unchanged for ``UNSIGNALLED_STABLE_S`` is accepted instead.
    """
    deadline = time.monotonic() + timeout_s
    previous, stable_since = None, time.monotonic()
    while True:
        if server.proc is not None and server.proc.poll() is not None:
            raise RuntimeError(f"data server exited with {server.proc.returncode}: {server._why()}")
        if server.loaded.is_set():
            # the load cycle committed every run before it said so, and with --reload=once
            # none follows: what the readers ask for from now on is the loaded run (two
            # listings 10 ms apart confirmed it, ~15 ms on each of a reduce's two loads, on
            # its critical path)
            return
        current = _listing_fingerprint(provider)
        now = time.monotonic()
        if current != previous:
            previous, stable_since = current, now
        elif now - stable_since >= UNSIGNALLED_STABLE_S:
            return
        if now > deadline:
            raise VerifyTimeout(
                f"data server load not finished and listing not stable within {timeout_s:.0f}s"
            )
        server.loaded.wait(timeout=0.5)  # wakes up as soon as the load cycle ends


def _read_rust(view: RunView, logdir: str, workdir: str, hints: dict, store_all: bool,
               timeout_s: float) -> None:
    binary = data_server_binary()
    if binary is None:
        raise RuntimeError("tensorboard-data-server binary is not available")
    samples = rust_samples(hints, store_all)
    view.storage = f"--samples-per-plugin={samples}"
    server = DataServer(binary, logdir, workdir, samples)
    try:
        addr = server.start(timeout_s=min(30.0, timeout_s))
        import grpc  # imported by ``start`` while the server started
        from tensorboard.data import grpc_provider

        server.channel = grpc.insecure_channel(
            addr, options=[("grpc.max_receive_message_length", 256 * 1024 * 1024)]
        )
        connect(server.channel, min(30.0, timeout_s))
        provider = grpc_provider.GrpcDataProvider(addr, grpc_provider.make_stub(server.channel))
        wait_until_loaded(server, provider, timeout_s)
        read_provider(view, provider, hints, blob_workers=RUST_BLOB_WORKERS)
    finally:
        server.stop()
        errors, warnings = server.problems()
        view.errors.extend(errors)
        view.warnings.extend(warnings)


def describe(view: RunView) -> dict[str, Any]:
    """A small JSON-safe summary of a view (counts per plugin, errors)."""
    return {
        "backend": view.backend,
        "run_present": view.run_present,
        "plugins": {p: {"tags": t, "points": n} for p, (t, n) in view.counts().items()},
        "graph": view.graph,
        "storage": view.storage,
        "fatal": view.fatal,
        "errors": list(view.errors),
        "warnings": list(view.warnings),
        "duration_s": round(view.duration_s, 3),
    }
