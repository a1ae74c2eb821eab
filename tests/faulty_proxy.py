"""A fault-injecting HTTP proxy in front of a test store server, on loopback.

Requests pass through unchanged unless a rule matches: then the proxy answers with the rule's
status and body itself (503 SlowDown, 500 InternalError) or drops the connection without an
answer, for the rule's first ``times`` matching requests. Counts what it saw per rule, so tests
can assert the fault really happened.
"""
from __future__ import annotations

import http.client
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, List, Optional
from urllib.parse import urlsplit

S3_SLOWDOWN = (503, b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code>"
               b"<Message>Please reduce your request rate.</Message></Error>")
S3_INTERNAL = (500, b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>InternalError</Code>"
               b"<Message>We encountered an internal error. Please try again.</Message></Error>")
DROP = (0, b"")  # close the connection without an answer
#: let the server do the work, then answer 500 anyway (the client cannot tell it was done)
AFTER_500 = (-500, S3_INTERNAL[1])


def _s3_verb(method: str, path: str, headers) -> str:
    """What an S3 request is: list, read, head, put, copy, delete, or other (bucket calls)."""
    path_only, _, query = path.partition("?")
    key = path_only.strip("/").partition("/")[2]
    if method == "GET":
        if not key:
            return "list" if ("list-type" in query or "prefix" in query or not query) else "other"
        return "read"
    if method == "HEAD":
        return "head"
    if method == "PUT":
        return "copy" if headers.get("x-amz-copy-source") else ("put" if key else "other")
    if method == "POST" and "delete" in query:
        return "delete"
    if method == "DELETE":
        return "delete" if key else "other"
    return "other"


@dataclass
class Rule:
    """Answer ``fault`` to the first ``times`` requests for which ``match(method, path)`` holds."""

    match: Callable[[str, str], bool]
    fault: tuple
    times: int = 1
    hits: int = 0
    seen: int = 0


@dataclass
class FaultyProxy:
    upstream: str
    rules: List[Rule] = field(default_factory=list)
    requests: int = 0
    server: Optional[ThreadingHTTPServer] = None
    counts: dict = field(default_factory=dict)  # S3 verb -> requests the server was sent
    bytes_down: int = 0  # object bytes sent back by GETs
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        with self.lock:
            self.counts = {}
            self.bytes_down = 0

    @property
    def endpoint(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FaultyProxy":
        proxy = self
        up = urlsplit(self.upstream)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # an answer is two writes (headers, then body): with Nagle's algorithm on, the body
            # waited for the client's delayed ACK of the headers, ~40 ms a request on loopback
            disable_nagle_algorithm = True

            def log_message(self, *a):  # quiet
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return out
                        out += self.rfile.read(size)
                        self.rfile.readline()
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def _handle(self):
                body = self._body()
                proxy.requests += 1
                verb = _s3_verb(self.command, self.path, self.headers)
                with proxy.lock:
                    proxy.counts[verb] = proxy.counts.get(verb, 0) + 1
                for rule in proxy.rules:
                    if rule.match(self.command, self.path):
                        rule.seen += 1
                        if rule.hits < rule.times:
                            rule.hits += 1
                            status, payload = rule.fault
                            if status < 0:
                                status = -status
                                conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
                                try:
                                    hdrs = {k: v for k, v in self.headers.items()
                                            if k.lower() not in ("transfer-encoding", "connection", "content-length")}
                                    hdrs["Content-Length"] = str(len(body))
                                    conn.request(self.command, self.path, body=body, headers=hdrs)
                                    conn.getresponse().read()
                                finally:
                                    conn.close()
                            if status == 0:
                                self.connection.shutdown(socket.SHUT_RDWR)
                                self.close_connection = True
                                return
                            self.send_response(status)
                            self.send_header("Content-Type", "application/xml")
                            self.send_header("Content-Length", str(len(payload)))
                            self.end_headers()
                            self.wfile.write(payload)
                            return
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("transfer-encoding", "connection", "content-length")}
                headers["Content-Length"] = str(len(body))
                conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                # a HEAD's answer has no body but says the object's size: pass the server's on
                # (len(data) is 0 there, and every stat through the proxy read size 0)
                size = resp.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", size if size is not None else str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                    if verb == "read":
                        with proxy.lock:
                            proxy.bytes_down += len(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()
