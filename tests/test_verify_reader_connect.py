"""A Rust reader waits for its data server's channel with one call that waits for the
connection (``views.connect``), not with ``grpc.channel_ready_future`` (issue #28, fixed cost).

``channel_ready_future`` subscribes to the channel's connectivity: a thread watches it in 0.2 s
periods, and ``channel.close()`` waits for the watch under way. A reader closed within ~0.2 s
of its open (every small run's verification: both sides, one after the other) waited
0.11-0.15 s in each close; a small run's whole verification took ~0.3 s, ~0.15 s after.
The wait is still a wait: a channel that never reaches a data server is a reader failure
within the reader's timeout, never a verification that goes on.
"""
import socket
import time

import pytest

from tb_footprint_plugin import synth
from tb_footprint_plugin.formats import views
from tb_footprint_plugin.verify import data_server_binary
from tb_footprint_plugin.verify.readers import Reader

needs_rust = pytest.mark.skipif(data_server_binary() is None, reason="no data server binary")


def _run(run) -> None:
    run.mkdir(parents=True)
    with synth.EventWriter(str(run)) as w:
        for step in range(30):
            w.scalar("loss", step, 1.0 / (step + 1))


@needs_rust
def test_a_reader_closed_at_once_does_not_wait_for_a_connectivity_watch(tmp_path):
    _run(tmp_path / "run")
    closes = []
    for _ in range(3):
        r = Reader(str(tmp_path / "run"), "rust", timeout_s=60).open()
        try:
            assert not r.view.fatal and r.view.run_present, r.view.fatal
            r.read()
            assert r.view.plugins.get("scalars"), r.view.plugins
        finally:
            t = time.perf_counter()
            r.close()
            closes.append(time.perf_counter() - t)
    # before: 0.11-0.15 s each (the watch's 0.2 s period); after: a few ms
    assert min(closes) < 0.06, closes


@needs_rust
def test_a_channel_that_never_reaches_a_server_is_a_reader_failure(tmp_path, monkeypatch):
    _run(tmp_path / "run")
    # a socket that completes TCP handshakes (the kernel's backlog) and never speaks HTTP/2
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)
    port = mute.getsockname()[1]
    monkeypatch.setattr(views.DataServer, "start", lambda self, timeout_s: f"127.0.0.1:{port}")
    monkeypatch.setattr(views.DataServer, "stop", lambda self: None)
    try:
        t = time.perf_counter()
        r = Reader(str(tmp_path / "run"), "rust", timeout_s=2).open()
        waited = time.perf_counter() - t
        r.close()
    finally:
        mute.close()
    assert r.view.fatal and "rust reader" in r.view.fatal, r.view.fatal
    assert r.provider is None
    assert 1.5 < waited < 30, waited  # it waited its timeout for the connection, then failed
