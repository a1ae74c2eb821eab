"""A TensorBoard reader kept open: one load serves the DataProvider view and the routes.

``views.read_view`` loads a run, reads it and closes the reader. The dashboard-route layer
needs the reader alive while TensorBoard's own WSGI app is crawled over it, and the two
sides (original, reduced) alive together so responses are compared one at a time. A
``Reader`` is that: ``open()`` loads (never raises: a failure is ``view.fatal``),
``read()`` fills the ``RunView`` like ``read_view``, ``app()`` is TensorBoard's app over the
same provider, ``close()`` stops the data server and collects its log problems.
"""
from __future__ import annotations

import os
import shutil
import time
from typing import Iterable, Optional

from tb_footprint_plugin.formats import views
from tb_footprint_plugin.formats.views import RunView
from tb_footprint_plugin.storage import scratch
from tb_footprint_plugin.verify.stop import NEVER, Stop


def fast_stub_crc() -> bool:
    """Give TensorBoard's stub record reader (TensorBoard without TensorFlow) its CRC-32C in C.

    The stub checks every record's header and data CRC with a CRC-32C table in pure Python
    (~0.5 us a byte): in a reduce of 200 small runs whose event files are rewritten it was 86 s
    of 485 (cProfile), the largest single cost of the in-process Python reader's loads.
    ``scan.tfrecord.masked_crc32c`` (``google_crc32c``, in C) is the same function, so the stub's
    ``masked_crc32c`` is replaced by it for ``bytes`` (what ``GetNext`` passes) and kept for
    anything else: every record is still checked by TensorBoard's own reader, with the same
    answer for every input. The Python loader's child (``pyside``) did this alone until now;
    in-process it holds for the TensorBoard the plugin runs in too (the same answers, sooner).
    Idempotent; returns whether the stub's check is the C one now (False: no stub, or no C
    extension to put in its place)."""
    try:
        import google_crc32c
        from tensorboard.compat.tensorflow_stub import pywrap_tensorflow as stub
    except ImportError:
        return False
    slow = stub.masked_crc32c
    if getattr(slow, "tbfp_fast", False):
        return True
    if google_crc32c.implementation != "c":
        return False  # its pure-Python fallback is no faster than the stub's own table
    from tb_footprint_plugin.scan.tfrecord import masked_crc32c as fast

    def masked_crc32c(data, _slow=slow, _fast=fast):
        return _fast(data) if type(data) is bytes else _slow(data)

    masked_crc32c.tbfp_fast = True  # type: ignore[attr-defined]
    masked_crc32c.__doc__ = slow.__doc__
    stub.masked_crc32c = masked_crc32c  # GetNext looks it up in the module at each record
    return True


class Reader:
    """One run loaded by one backend (Python multiplexer or a private Rust data server)."""

    def __init__(self, run_dir: str, backend: str, hints: Optional[dict] = None, *,
                 store_all: bool = False, timeout_s: float = 120.0, stop: Stop = NEVER) -> None:
        if backend not in views.BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; expected one of {views.BACKENDS}")
        self.view = RunView(run_dir=os.path.abspath(run_dir), backend=backend)
        self.hints = dict(hints or {})
        self.store_all = store_all
        self.timeout_s = timeout_s
        self.provider = None
        self.mux = None
        self.samples = ""
        self._server: Optional[views.DataServer] = None
        # in the vault during an operation (scratch.use_root): a killed process's is swept
        self._tmp = scratch.make("verify")
        self.logdir = os.path.join(self._tmp, "logdir")
        self._start = time.monotonic()
        self._app = None
        self._aborted = False
        # a stopped verification ends this reader's load and requests from outside (``abort``)
        stop.on_stop(self.abort)

    # -- lifecycle ----------------------------------------------------------------------------
    def open(self) -> "Reader":
        try:
            self.view.event_files = views.link_run(self.view.run_dir,
                                                    os.path.join(self.logdir, views.RUN_NAME))
            if self.view.backend == "python":
                self._open_python()
            else:
                self._open_rust()
            ctx = views.request_context()
            self.view.run_present = any(
                r.run_name == views.RUN_NAME
                for r in self.provider.list_runs(ctx, experiment_id=views.EXPERIMENT_ID))
        except Exception as e:  # noqa: BLE001 - a reader failure is a finding, not a crash
            self.view.fatal = views.normalize_message(
                f"{self.view.backend} reader: {type(e).__name__}: {e}", self._tmp)
            self.view.errors.append(self.view.fatal)
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()
            errors, warnings = self._server.problems()
            self.view.errors.extend(errors)
            self.view.warnings.extend(warnings)
            self._server = None
        shutil.rmtree(self._tmp, ignore_errors=True)
        self.view.errors = [views.normalize_message(m, self._tmp) for m in self.view.errors]
        self.view.warnings = [views.normalize_message(m, self._tmp) for m in self.view.warnings]
        self.view.duration_s = time.monotonic() - self._start

    def abort(self) -> None:
        """From any thread (its verification was stopped): close the channel to the data server,
        so a load waited for (its listings) and every request under way fail at once; ``close``
        then stops the server as always. Not killed here: a server that died under a reader is
        what a signal to the terminal's process group did (review R16 F13), not this."""
        self._aborted = True  # a load starting after this ends at once (``_open_rust``)
        server = self._server
        if server is not None and server.channel is not None:
            server.channel.close()  # a call waiting for its connection (``views.connect``) ends too

    def __enter__(self) -> "Reader":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- use ------------------------------------------------------------------------------------
    def read(self, plugins: Optional[Iterable[str]] = None, payloads: bool = True) -> RunView:
        """Fill the ``RunView`` through the DataProvider API (as ``views.read_view``); only
        ``plugins``' data (and no run graph) when given; ``payloads=False``: steps and wall
        times only (``views.read_provider``)."""
        if self.provider is not None and not self.view.fatal:
            workers = views.RUST_BLOB_WORKERS if self.view.backend == "rust" else 1
            views.read_provider(self.view, self.provider, self.hints, blob_workers=workers,
                                 only=plugins, payloads=payloads)
        return self.view

    def app(self):
        """TensorBoard's own WSGI application over this reader (built once)."""
        from tb_footprint_plugin.verify import routes

        if self._app is None:
            # The dashboard's own flags: no --samples_per_plugin, so every route reads with the
            # plugins' default read-time downsampling, as the browser gets it.
            self._app = routes.make_app(self.logdir, self.provider, self.mux)
        return self._app

    # -- backends ---------------------------------------------------------------------------------
    def _open_python(self) -> None:
        from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
        from tensorboard.util import tb_logging

        fast_stub_crc()
        size, tensor = views.python_guidance(self.hints, self.store_all)
        self.view.storage = f"size_guidance={size} tensor_size_guidance={dict(sorted(tensor.items()))}"
        mux = plugin_event_multiplexer.EventMultiplexer(
            size_guidance=size, tensor_size_guidance=tensor, purge_orphaned_data=True)
        capture = views.LogCapture()
        logger = tb_logging.get_logger()
        logger.addHandler(capture)
        try:
            mux.AddRunsFromDirectory(self.logdir)
            mux.Reload()
        finally:
            logger.removeHandler(capture)
        self.view.errors.extend(capture.errors)
        self.view.warnings.extend(capture.warnings)
        self.mux = mux
        self.provider = data_provider.MultiplexerDataProvider(mux, self.logdir)

    def _open_rust(self) -> None:
        binary = views.data_server_binary()
        if binary is None:
            raise RuntimeError("tensorboard-data-server binary is not available")
        self.samples = views.rust_samples(self.hints, self.store_all)
        self.view.storage = f"--samples-per-plugin={self.samples}"
        self._server = views.DataServer(binary, self.logdir, self._tmp, self.samples)
        addr = self._server.start(timeout_s=min(30.0, self.timeout_s))
        # imported by ``start`` while the server started
        import grpc
        from tensorboard.data import grpc_provider

        self._server.channel = grpc.insecure_channel(
            addr, options=[("grpc.max_receive_message_length", 256 * 1024 * 1024)])
        if self._aborted:  # before the channel was there to close: not waited for its connection
            raise RuntimeError("the verification was stopped")
        views.connect(self._server.channel, min(30.0, self.timeout_s))
        self.provider = grpc_provider.GrpcDataProvider(
            addr, grpc_provider.make_stub(self._server.channel))
        views.wait_until_loaded(self._server, self.provider, self.timeout_s)
