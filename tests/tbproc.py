"""A real ``tensorboard`` process on a free loopback port, and small demo logs, for the
end-to-end tests (smoke and browser)."""
from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tensorboard_cmd():
    exe = shutil.which("tensorboard")
    return [exe] if exe else [sys.executable, "-m", "tensorboard.main"]


class TensorBoard:
    """``tensorboard --logdir … --port <free> --host 127.0.0.1`` in its own process group
    (``host=None``: no ``--host``, for ``--bind_all``)."""

    def __init__(self, logdir, *extra, log_path=None, host="127.0.0.1"):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path or os.path.join(os.path.dirname(str(logdir)), f"tensorboard-{self.port}.log")
        self._log = open(self.log_path, "wb")
        args = tensorboard_cmd() + ["--logdir", str(logdir), "--port", str(self.port),
                                    *(["--host", host] if host else []), "--footprint_quiet_period", "0", *extra]
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tensorboard exited with {self.proc.returncode}:\n{self.log()}")
            try:
                status, _, body = self.request("GET", "/data/plugins_listing")
                if status == 200 and b"footprint" in body:
                    return
            except OSError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"tensorboard did not come up:\n{self.log()}")

    def request(self, method, path, body=None, headers=None, timeout=60):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            conn.close()

    def json(self, path, **kw):
        status, headers, body = self.request("GET", path, **kw)
        assert status == 200, (path, status, body[:500])
        assert headers["Content-Type"].startswith("application/json"), headers
        return json.loads(body)

    def log(self) -> str:
        self._log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")[-6000:]

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()


def make_demo(target):
    """The demo logdir (small scale); falls back to a synthetic one if the demo is unavailable."""
    try:
        from tb_footprint_plugin.demo import generate_demo
    except ImportError:
        generate_demo = None
    if generate_demo is not None:
        generate_demo(str(target), seed=0, scale=0.05)
        return target
    import math

    from tb_footprint_plugin import synth

    for i, name in enumerate(("alpha", "beta")):
        with synth.EventWriter(str(target / name)) as w:
            for s in range(50):
                w.scalar("loss", s, math.exp(-s / 10) + i)
        synth.write_profile_session(str(target / name), n_events=2000, with_caches=True, seed=i)
    return target
