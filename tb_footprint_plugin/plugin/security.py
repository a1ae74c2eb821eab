"""Who may change the logdir through the tab.

TensorBoard has no CSRF, Origin, Host or method checks of its own (a cross-origin form POST
and a foreign ``Host`` header both reach plugin routes), so every mutating route here checks,
in this order:

1. method: ``POST`` only (405 otherwise);
2. ``Host``: loopback, or the address TensorBoard was told to serve (DNS rebinding);
3. ``Origin`` (when sent): the same host and port as ``Host``; ``null`` is refused;
4. ``Sec-Fetch-Site`` (when sent): exactly ``same-origin``;
5. write actions enabled at all (off with ``--footprint_read_only``, with ``--bind_all`` or
   a non-loopback ``--host`` unless ``--footprint_allow_remote_actions``, for a non-local
   logdir);
6. the peer: the process on the other end of the TCP connection belongs to the Unix user
   running TensorBoard, or root (``peer``); unidentified peers only with
   ``--footprint_allow_unidentified_writers``;
7. the per-process random token in ``X-Footprint-Token`` (obtained by a same-origin GET of
   ``/token``; another origin cannot read it, another local user is not given it);
8. ``Content-Type: application/json`` and a JSON object body of at most 1 MiB (413 beyond,
   chunked bodies included; 400 for bad or too deeply nested JSON).

Read routes (data and static files) check the method, the ``Host`` (a rebinding page would
otherwise read paths, names and history) and refuse a ``Sec-Fetch-Site`` of ``cross-site``
or ``same-site``; the token route also requires no foreign ``Origin`` and the owner as peer.
Every answer carries ``X-Frame-Options: SAMEORIGIN`` and ``frame-ancestors 'self'``
(``frame_guard``).
"""
from __future__ import annotations

import hmac
import ipaddress
import json
import os
import re
import secrets
import socket
from typing import List, Optional, Tuple
from urllib.parse import urlsplit

from tb_footprint_plugin import api
from tb_footprint_plugin.plugin import peer as peer_mod

TOKEN_HEADER = "X-Footprint-Token"
MAX_BODY_BYTES = 1024 * 1024  # "reduce all shown" names every run
_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


class Rejected(Exception):
    """A request refused by a security rule: HTTP code and a sentence saying why."""

    def __init__(self, code: int, reason: str, headers: Optional[List[Tuple[str, str]]] = None, *,
                 reason_code: Optional[str] = None):
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.headers = headers or []
        self.reason_code = reason_code


_HOST_CHARS = re.compile(r"^[A-Za-z0-9._~%:\[\]-]*$")


def split_host(host_header: str) -> Tuple[str, Optional[str]]:
    """``'[::1]:6006'`` → ``('::1', '6006')``; ``'Example.COM.'`` → ``('example.com', None)``.

    Parsed by ``urllib.parse`` as the authority of a URL; anything that is not a bare host and
    port (userinfo, a path, spaces, a bad port, an unclosed bracket) gives ``('', None)``.
    """
    h = (host_header or "").strip()
    if not h or not _HOST_CHARS.match(h):
        return "", None
    try:
        parts = urlsplit("//" + h)
        port = parts.port
        name = parts.hostname or ""
    except ValueError:
        return "", None
    if parts.netloc != h or (":" in name and not h.startswith("[")):
        return "", None
    return name.rstrip("."), (str(port) if port is not None else None)


def _ip(name: str):
    try:
        return ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return None


def is_loopback_name(name: str) -> bool:
    """``localhost``, ``*.localhost`` (RFC 6761) or a loopback IP literal."""
    if name in _LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    ip = _ip(name)
    if ip is None:
        return False
    if getattr(ip, "ipv4_mapped", None):
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _resolves_to_loopback_only(name: str) -> bool:
    if is_loopback_name(name):
        return True
    ip = _ip(name)
    if ip is not None:
        return False  # a non-loopback literal (or the wildcard 0.0.0.0 / ::)
    try:
        infos = socket.getaddrinfo(name, None)
    except (OSError, UnicodeError):
        return False
    addrs = {info[4][0] for info in infos}
    return bool(addrs) and all(is_loopback_name(a) for a in addrs)


def _flag_host(host: str) -> str:
    """The ``--host`` value as a host name: ``::1``, ``[::1]`` and ``Example.com.`` all work."""
    h = str(host).strip()
    bare = h[1:-1] if h.startswith("[") and h.endswith("]") else h
    if _ip(bare) is not None:
        return bare.lower()
    return split_host(h)[0] or h.lower().rstrip(".")


#: reason codes of ``Security.describe()`` and of refusals (``Rejected.reason_code``): codes.py's
Refusal = api.Refusal

#: headers on every answer of the plugin: no page of another origin may frame it
FRAME_HEADERS = [("X-Frame-Options", "SAMEORIGIN"), ("Content-Security-Policy", "frame-ancestors 'self'")]


class Security:
    """The per-process token, the allowed hosts and whether write actions are on (and why not)."""

    def __init__(self, flags, logdir: str, *, local_logdir: bool = True, identify=None):
        self.token = secrets.token_urlsafe(32)
        host = getattr(flags, "host", None)
        bind_all = bool(getattr(flags, "bind_all", False))
        self.read_only = bool(getattr(flags, "footprint_read_only", False))
        self.allow_remote = bool(getattr(flags, "footprint_allow_remote_actions", False))
        self.allow_unidentified = bool(getattr(flags, "footprint_allow_unidentified_writers", False))
        self.owner_uid = peer_mod.owner_uid()
        self._identify = identify  # tests inject one; None: the kernel tables (peer.identify)
        self.served_host = _flag_host(host) if host else None
        self.bind_all = bind_all
        # --host "" binds every interface, like --bind_all
        wildcard = host is not None and not str(host).strip()
        self.remote = bind_all or wildcard or (self.served_host is not None
                                               and not _resolves_to_loopback_only(self.served_host))
        self.allowed_hosts = set(_LOOPBACK_NAMES)
        if self.served_host:
            self.allowed_hosts.add(self.served_host)
        if self.remote:
            for name in (socket.gethostname(), socket.getfqdn()):
                if name:
                    self.allowed_hosts.add(name.lower().rstrip("."))
        reasons, codes = [], []
        if self.read_only:
            reasons.append("TensorBoard was started with --footprint_read_only.")
            codes.append(Refusal.READ_ONLY)
        if self.remote and not self.allow_remote:
            where = "all network interfaces (--bind_all)" if bind_all else f"--host {host}"
            reasons.append(
                f"TensorBoard listens beyond this machine ({where}), so anyone who can reach the port "
                "could change the logdir. Restart with --footprint_allow_remote_actions to allow it, "
                "or serve on localhost."
            )
            codes.append(Refusal.REMOTE_BIND)
        if not local_logdir:
            reasons.append("The logdir is not on a local disk.")
            codes.append(Refusal.LOGDIR_NOT_LOCAL)
        elif logdir and os.path.isdir(logdir) and not os.access(logdir, os.W_OK | os.X_OK):
            reasons.append(f"This process cannot write to the logdir {logdir}.")
            codes.append(Refusal.LOGDIR_NOT_WRITABLE)
        self.reasons = reasons
        self.reason_codes = codes

    # --- state ----------------------------------------------------------------------------
    @property
    def actions_enabled(self) -> bool:
        return not self.reasons

    def describe(self) -> dict:
        return {"enabled": self.actions_enabled, "reasons": list(self.reasons), "codes": list(self.reason_codes),
                "read_only": self.read_only, "remote": self.remote}

    # --- individual rules -----------------------------------------------------------------
    def host_allowed(self, host_header: str) -> bool:
        name, _ = split_host(host_header)
        if not name:
            return False
        if is_loopback_name(name) or name in self.allowed_hosts:
            return True
        # Listening on every interface: a literal IP cannot be a rebinding attack (the page's
        # origin would be that IP, not an attacker's domain).
        return self.remote and _ip(name) is not None

    def _check_host(self, request) -> None:
        host = request.headers.get("Host", "")
        if not self.host_allowed(host):
            raise Rejected(403, f"Host {host!r} is not loopback or the address TensorBoard serves "
                                "(DNS-rebinding protection)", reason_code=Refusal.FOREIGN_HOST)

    def _check_origin(self, request) -> None:
        origin = request.headers.get("Origin")
        if origin is None:
            return
        if origin.strip().lower() == "null":
            raise Rejected(403, "requests from an opaque ('null') origin are refused",
                           reason_code=Refusal.FOREIGN_ORIGIN)
        try:
            netloc = urlsplit(origin.strip()).netloc.lower()
        except ValueError:
            netloc = ""
        host = (request.headers.get("Host") or "").strip().lower()
        if not netloc or netloc != host:
            raise Rejected(403, f"cross-origin request from {origin!r} refused", reason_code=Refusal.FOREIGN_ORIGIN)

    @staticmethod
    def _check_fetch_site(request, strict: bool) -> None:
        site = request.headers.get("Sec-Fetch-Site")
        if site is None:
            return
        site = site.strip().lower()
        if strict and site != "same-origin":
            raise Rejected(403, f"Sec-Fetch-Site {site!r} refused: only same-origin requests may change the logdir",
                           reason_code=Refusal.FOREIGN_ORIGIN)
        if not strict and site in ("cross-site", "same-site"):
            raise Rejected(403, f"Sec-Fetch-Site {site!r} refused", reason_code=Refusal.FOREIGN_ORIGIN)

    def check_peer(self, request) -> None:
        """Only the Unix user running TensorBoard (or root) may get the token or change anything.

        The client's socket owner is looked up in the kernel's TCP tables (``peer``). A client
        that cannot be identified is refused unless TensorBoard was started with
        ``--footprint_allow_unidentified_writers``; with ``--footprint_allow_remote_actions``
        a client on another machine (never in this machine's tables) is accepted, as that flag
        says anyone reaching the port may write.
        """
        found = (self._identify or peer_mod.identify)(request.environ)
        if found.identified:
            if found.uid == self.owner_uid or found.uid == 0:
                return
            raise Rejected(403, f"the request comes from a process of {peer_mod.user_name(found.uid)}, not of "
                                f"{peer_mod.user_name(self.owner_uid)} who runs this TensorBoard: only that user "
                                "may change the logdir", reason_code=Refusal.PEER_NOT_OWNER)
        if self.allow_unidentified:
            return
        remote_peer = found.code == peer_mod.NOT_FOUND and not _is_loopback_client(found.client)
        if self.remote and self.allow_remote and remote_peer:
            return
        raise Rejected(403, f"the Unix user behind this connection could not be identified ({found.code}"
                            + (f", client {found.client}" if found.client else "") + "), so changes are refused. "
                            "Only the user running TensorBoard may change the logdir; restart TensorBoard with "
                            "--footprint_allow_unidentified_writers to accept unidentified clients.",
                       reason_code=Refusal.PEER_UNIDENTIFIED)

    # --- route guards ---------------------------------------------------------------------
    def check_read(self, request) -> None:
        """Guard of GET routes (data and static files): the method, the ``Host`` (DNS
        rebinding would otherwise read the logdir's paths, names and history) and what a
        browser marks as coming from another site. A cross-origin page cannot read these
        answers anyway (no CORS headers)."""
        if request.method not in ("GET", "HEAD"):
            raise Rejected(405, f"{request.method} not allowed here; use GET", [("Allow", "GET, HEAD")])
        self._check_host(request)
        self._check_fetch_site(request, strict=False)

    def check_token_request(self, request) -> None:
        """Guard of ``GET /token``: a read from this origin, by the owner of this TensorBoard."""
        self.check_read(request)
        self._check_origin(request)
        self.check_peer(request)

    def check_write(self, request, *, needs_actions: bool = True) -> dict:
        """Guard of mutating routes; returns the parsed JSON body."""
        if request.method != "POST":
            raise Rejected(405, f"{request.method} not allowed: this route changes things and takes POST only",
                           [("Allow", "POST")])
        self._check_host(request)
        self._check_origin(request)
        self._check_fetch_site(request, strict=True)
        if needs_actions and not self.actions_enabled:
            raise Rejected(403, "write actions are off: " + " ".join(self.reasons),
                           reason_code=self.reason_codes[0] if self.reason_codes else None)
        self.check_peer(request)
        sent = request.headers.get(TOKEN_HEADER, "")
        if not sent or not hmac.compare_digest(sent.encode("utf-8", "replace"), self.token.encode("ascii")):
            raise Rejected(403, f"missing or wrong token in the {TOKEN_HEADER} header (reload the tab)",
                           reason_code=Refusal.BAD_TOKEN)
        if request.mimetype != "application/json":
            raise Rejected(415, "the body must be JSON (Content-Type: application/json)")
        return parse_json_body(request)

    # --- every answer ---------------------------------------------------------------------
    @staticmethod
    def frame_guard(app):
        """Wrap a WSGI app so that every answer (errors included) forbids foreign framing."""

        def guarded(environ, start_response):
            def start(status, headers, exc_info=None):
                # a second CSP header adds to the first (browsers enforce every policy sent)
                have = {k.lower() for k, _ in headers}
                extra = [(k, v) for k, v in FRAME_HEADERS if k.lower() == "content-security-policy" or k.lower() not in have]
                if exc_info is not None:
                    return start_response(status, list(headers) + extra, exc_info)
                return start_response(status, list(headers) + extra)

            return app(environ, start)

        return guarded


def _is_loopback_client(client: str) -> bool:
    host = client.rsplit(":", 1)[0] if client else ""
    return is_loopback_name(host.strip("[]").lower())


def parse_json_body(request, limit: int = MAX_BODY_BYTES) -> dict:
    """The request body as a JSON object: 413 beyond ``limit`` bytes (declared or chunked),
    400 when it is not JSON, nested too deeply, or not an object."""
    length = request.content_length
    if length is not None and length > limit:
        raise Rejected(413, f"request body too large (more than {limit} bytes)")
    environ = request.environ
    if environ.get("wsgi.input_terminated"):
        # chunked: read the stream ourselves, one byte past the limit, so an over-long body is
        # a 413, never silently cut to the limit and reported as bad JSON
        stream = environ["wsgi.input"]
        chunks, size = [], 0
        while size <= limit:
            block = stream.read(min(65536, limit + 1 - size))
            if not block:
                break
            chunks.append(block)
            size += len(block)
        if size > limit:
            raise Rejected(413, f"request body too large (more than {limit} bytes)")
        raw = b"".join(chunks)
    else:
        request.max_content_length = limit
        try:
            raw = request.get_data(cache=True)
        except Exception:  # werkzeug's RequestEntityTooLarge
            raise Rejected(413, f"request body too large (more than {limit} bytes)") from None
        if len(raw) > limit:
            raise Rejected(413, f"request body too large (more than {limit} bytes)")
    try:
        body = json.loads(raw.decode("utf-8")) if raw else {}
    except RecursionError:
        raise Rejected(400, "the body is not valid JSON (nested too deeply)") from None
    except (ValueError, UnicodeDecodeError):
        raise Rejected(400, "the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise Rejected(400, "the body must be a JSON object")
    return body
