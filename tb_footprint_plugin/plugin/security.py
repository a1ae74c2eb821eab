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
6. the per-process random token in ``X-Footprint-Token`` (obtained by a same-origin GET of
   ``/token``; another origin cannot read it);
7. ``Content-Type: application/json`` and a JSON object body of bounded size.

Read routes only refuse what is plainly foreign: a ``Sec-Fetch-Site`` of ``cross-site`` or
``same-site``; the token route additionally requires an allowed ``Host`` and no foreign
``Origin``.
"""
from __future__ import annotations

import hmac
import ipaddress
import json
import os
import secrets
import socket
from typing import List, Optional, Tuple
from urllib.parse import urlsplit

TOKEN_HEADER = "X-Footprint-Token"
MAX_BODY_BYTES = 1024 * 1024  # "reduce all shown" names every run
_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


class Rejected(Exception):
    """A request refused by a security rule: HTTP code and a sentence saying why."""

    def __init__(self, code: int, reason: str, headers: Optional[List[Tuple[str, str]]] = None):
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.headers = headers or []


def split_host(host_header: str) -> Tuple[str, Optional[str]]:
    """``'[::1]:6006'`` → ``('::1', '6006')``; ``'Example.COM.'`` → ``('example.com', None)``."""
    h = (host_header or "").strip()
    port = None
    if h.startswith("["):
        end = h.find("]")
        if end < 0:
            return "", None
        name, rest = h[1:end], h[end + 1:]
        if rest.startswith(":"):
            port = rest[1:]
        elif rest:
            return "", None
    elif h.count(":") == 1:
        name, port = h.split(":", 1)
    else:
        name = h
    return name.lower().rstrip("."), port


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


class Security:
    """The per-process token, the allowed hosts and whether write actions are on (and why not)."""

    def __init__(self, flags, logdir: str, *, local_logdir: bool = True):
        self.token = secrets.token_urlsafe(32)
        host = getattr(flags, "host", None)
        bind_all = bool(getattr(flags, "bind_all", False))
        self.read_only = bool(getattr(flags, "footprint_read_only", False))
        self.allow_remote = bool(getattr(flags, "footprint_allow_remote_actions", False))
        self.served_host = split_host(host)[0] if host else None
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
        reasons = []
        if self.read_only:
            reasons.append("TensorBoard was started with --footprint_read_only.")
        if self.remote and not self.allow_remote:
            where = "all network interfaces (--bind_all)" if bind_all else f"--host {host}"
            reasons.append(
                f"TensorBoard listens beyond this machine ({where}), so anyone who can reach the port "
                "could change the logdir. Restart with --footprint_allow_remote_actions to allow it, "
                "or serve on localhost."
            )
        if not local_logdir:
            reasons.append("The logdir is not on a local disk.")
        elif logdir and os.path.isdir(logdir) and not os.access(logdir, os.W_OK | os.X_OK):
            reasons.append(f"This process cannot write to the logdir {logdir}.")
        self.reasons = reasons

    # --- state ----------------------------------------------------------------------------
    @property
    def actions_enabled(self) -> bool:
        return not self.reasons

    def describe(self) -> dict:
        return {"enabled": self.actions_enabled, "reasons": list(self.reasons),
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
                                "(DNS-rebinding protection)")

    def _check_origin(self, request) -> None:
        origin = request.headers.get("Origin")
        if origin is None:
            return
        if origin.strip().lower() == "null":
            raise Rejected(403, "requests from an opaque ('null') origin are refused")
        try:
            netloc = urlsplit(origin.strip()).netloc.lower()
        except ValueError:
            netloc = ""
        host = (request.headers.get("Host") or "").strip().lower()
        if not netloc or netloc != host:
            raise Rejected(403, f"cross-origin request from {origin!r} refused")

    @staticmethod
    def _check_fetch_site(request, strict: bool) -> None:
        site = request.headers.get("Sec-Fetch-Site")
        if site is None:
            return
        site = site.strip().lower()
        if strict and site != "same-origin":
            raise Rejected(403, f"Sec-Fetch-Site {site!r} refused: only same-origin requests may change the logdir")
        if not strict and site in ("cross-site", "same-site"):
            raise Rejected(403, f"Sec-Fetch-Site {site!r} refused")

    # --- route guards ---------------------------------------------------------------------
    def check_read(self, request) -> None:
        """Guard of GET routes (data and static files).

        Only what a browser marks as coming from another site is refused: behind a reverse
        proxy ``Host`` and ``Origin`` may legitimately differ, and a cross-origin page cannot
        read these answers anyway (no CORS headers).
        """
        if request.method not in ("GET", "HEAD"):
            raise Rejected(405, f"{request.method} not allowed here; use GET", [("Allow", "GET, HEAD")])
        self._check_fetch_site(request, strict=False)

    def check_token_request(self, request) -> None:
        """Guard of ``GET /token``: a read that must also come from this origin to an allowed host."""
        self.check_read(request)
        self._check_host(request)
        self._check_origin(request)

    def check_write(self, request, *, needs_actions: bool = True) -> dict:
        """Guard of mutating routes; returns the parsed JSON body."""
        if request.method != "POST":
            raise Rejected(405, f"{request.method} not allowed: this route changes things and takes POST only",
                           [("Allow", "POST")])
        self._check_host(request)
        self._check_origin(request)
        self._check_fetch_site(request, strict=True)
        if needs_actions and not self.actions_enabled:
            raise Rejected(403, "write actions are off: " + " ".join(self.reasons))
        sent = request.headers.get(TOKEN_HEADER, "")
        if not sent or not hmac.compare_digest(sent.encode("utf-8", "replace"), self.token.encode("ascii")):
            raise Rejected(403, f"missing or wrong token in the {TOKEN_HEADER} header (reload the tab)")
        if request.mimetype != "application/json":
            raise Rejected(415, "the body must be JSON (Content-Type: application/json)")
        length = request.content_length
        if length is not None and length > MAX_BODY_BYTES:
            raise Rejected(413, "request body too large")
        request.max_content_length = MAX_BODY_BYTES
        try:
            raw = request.get_data(cache=True)
        except Exception:  # werkzeug's RequestEntityTooLarge (chunked bodies)
            raise Rejected(413, "request body too large") from None
        if len(raw) > MAX_BODY_BYTES:
            raise Rejected(413, "request body too large")
        try:
            body = json.loads(raw.decode("utf-8")) if raw else {}
        except (ValueError, UnicodeDecodeError):
            raise Rejected(400, "the body is not valid JSON") from None
        if not isinstance(body, dict):
            raise Rejected(400, "the body must be a JSON object")
        return body
