"""The data servers a reduce starts answer without Nagle's delay (issue #28 item 3).

rustboard leaves Nagle's algorithm on: a response written in two parts waited for the client's
delayed ACK, ~40 ms, in most ``read_blob_sequences`` and half the ``read_blob`` calls, whatever
the run's size. ``views.reply_without_delay`` sets ``TCP_NODELAY`` on the server's listening
socket as soon as it listens; the connection our channel opens inherits it. Where the kernel or
a policy refuses (no ``pidfd_getfd``), the server is left as it was and still read.
"""
import ctypes
import os
import random
import socket
from pathlib import Path

import pytest

from tb_footprint_plugin import synth
from tb_footprint_plugin.formats import views
from tb_footprint_plugin.verify import data_server_binary
from tb_footprint_plugin.verify.readers import Reader

_pidfd_open = os.pidfd_open  # the real one, for the checks (a test replaces os's)
needs_rust = pytest.mark.skipif(data_server_binary() is None, reason="no data server binary")


def _run(run: Path) -> Path:
    rng = random.Random(0)
    png = synth.make_png(8, 8, seed=1)
    run.mkdir(parents=True)
    with synth.EventWriter(str(run)) as w:
        for step in range(30):
            w.scalar("loss", step, 1.0 / (step + 1))
            w.histogram("layer/weight", step, [rng.gauss(0, 1) for _ in range(50)])
            if step % 10 == 0:
                w.image("sample", step, png, 8, 8)
    return run


def _tcp_nodelay_of_child(pid: int) -> dict:
    """``{'listening': [...], 'connected': [...]}``: TCP_NODELAY of each TCP socket of ``pid``,
    read through a copy of its descriptor (what the code under test sets it through)."""
    syscall = ctypes.CDLL(None, use_errno=True).syscall
    pidfd = _pidfd_open(pid)
    out = {"listening": [], "connected": []}
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            try:
                if not os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
                    continue
            except OSError:
                continue
            fd = syscall(438, pidfd, int(name), 0)
            assert fd >= 0, ctypes.get_errno()
            sock = socket.socket(fileno=fd)
            try:
                if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
                    continue
                try:
                    sock.getpeername()
                    kind = "connected"
                except OSError:
                    kind = "listening"
                out[kind].append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            finally:
                sock.close()
    finally:
        os.close(pidfd)
    return out


@needs_rust
def test_the_data_server_and_its_connection_send_without_nagle(tmp_path):
    reader = Reader(str(_run(tmp_path / "run")), "rust", None, timeout_s=120).open()
    try:
        assert reader.view.fatal is None, reader.view.fatal
        server = reader._server
        assert server.nodelay >= 1
        view = reader.read()  # a connection is open and has been answered through
        assert "images" in view.plugins and "histograms" in view.plugins
        got = _tcp_nodelay_of_child(server.proc.pid)
        assert got["listening"] and all(got["listening"]), got
        # the accepted connection inherited it: the one that carries the responses
        assert got["connected"] and all(got["connected"]), got
    finally:
        reader.close()


@needs_rust
def test_without_pidfd_the_server_is_read_as_before(tmp_path, monkeypatch):
    def refused(pid):
        raise PermissionError(1, "not permitted")

    monkeypatch.setattr(os, "pidfd_open", refused)
    assert views.reply_without_delay(os.getpid()) == 0
    run = _run(tmp_path / "run")
    reader = Reader(str(run), "rust", None, timeout_s=120).open()
    try:
        assert reader.view.fatal is None, reader.view.fatal
        assert reader._server.nodelay == 0
        view = reader.read()
        assert len(view.plugins["images"]["sample"].points) == 3
        got = _tcp_nodelay_of_child(reader._server.proc.pid)
        assert got["listening"] == [0], got  # left as the server made it
    finally:
        reader.close()

