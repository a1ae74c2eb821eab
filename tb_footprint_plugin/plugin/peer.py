"""Which Unix user is on the other end of an HTTP request (Linux, loopback TCP).

TensorBoard serves plain TCP, where the kernel offers no ``SO_PEERCRED``. But when the client
runs on this machine its end of the connection is a socket in this machine's (network
namespace's) TCP tables too, and the kernel records who owns each socket:
``/proc/net/tcp`` and ``/proc/net/tcp6`` list every socket with its local address, remote
address, state, owner ``uid`` and ``inode``.

How a request is matched, and why it is robust:

* The endpoints come from the connection itself: werkzeug puts the accepted socket in the
  environ (``werkzeug.socket``), so ``getpeername()`` is the client's address and port and
  ``getsockname()`` the exact local address the client connected to (not the wildcard the
  server bound). Only without that socket do we fall back to ``REMOTE_ADDR``/``REMOTE_PORT``
  and ``SERVER_PORT`` (then any local address on that port matches).
* The client's socket is the entry whose *local* end is the client's address and port and
  whose *remote* end is the server's; the server's own socket (the mirror image) never
  matches, as it has the two ends the other way round.
* Both tables are read and addresses compared after unmapping IPv4-mapped IPv6
  (``::ffff:127.0.0.1``): a dual-stack TensorBoard sees an IPv4 client as mapped, while the
  client's own socket sits in ``tcp`` as plain IPv4 (or in ``tcp6`` when the client itself
  used a v6 socket).
* Only full sockets count: ``LISTEN`` and ``TIME_WAIT`` entries, and entries with inode 0
  (time-wait and orphaned sockets, whose uid column reads 0 — root — whatever the owner was)
  are ignored, so a closed connection can never pass as root.
* More than one owner for the same four-tuple (which the kernel does not allow for live
  sockets) is reported as ambiguous rather than guessed.

Where the tables cannot be read (not Linux, ``/proc`` not mounted) or the client is not a
local socket (another machine, another network namespace, a proxy that is not on loopback),
the peer is *unidentified*: the caller decides, and Footprint keeps writes off unless
TensorBoard was started with ``--footprint_allow_unidentified_writers``.
"""
from __future__ import annotations

import ipaddress
import os
import struct
from dataclasses import dataclass
from typing import Iterable, List, Optional, Tuple

TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
_LISTEN = 0x0A
_TIME_WAIT = 0x06

#: verdict codes (``Peer.code``); prose is for people only
IDENTIFIED = "identified"
NO_ENDPOINTS = "no_endpoints"         # the request carries no client address/port
NO_SOCKET_TABLE = "no_socket_table"   # /proc/net/tcp* unreadable (not Linux, no /proc)
NOT_FOUND = "not_found"               # no live local socket with that four-tuple
AMBIGUOUS = "ambiguous"


@dataclass(frozen=True)
class Peer:
    """The owner of the client's socket (``uid``), or why it is unknown (``code``)."""

    uid: Optional[int]
    code: str
    client: str = ""

    @property
    def identified(self) -> bool:
        return self.uid is not None


Address = Tuple[ipaddress._BaseAddress, int]


def _norm(ip) -> ipaddress._BaseAddress:
    ip = ipaddress.ip_address(ip) if not isinstance(ip, ipaddress._BaseAddress) else ip
    mapped = getattr(ip, "ipv4_mapped", None)
    return mapped if mapped is not None else ip


def _parse_ip(text: str) -> Optional[ipaddress._BaseAddress]:
    try:
        return _norm(str(text).split("%", 1)[0])
    except ValueError:
        return None


def endpoints(environ) -> Optional[Tuple[Address, Tuple[Optional[ipaddress._BaseAddress], int]]]:
    """``((client_ip, client_port), (server_ip or None, server_port))`` of a WSGI request."""
    sock = environ.get("werkzeug.socket")
    if sock is not None:
        try:
            peer, local = sock.getpeername(), sock.getsockname()
            if isinstance(peer, tuple) and isinstance(local, tuple):
                cip, sip = _parse_ip(peer[0]), _parse_ip(local[0])
                if cip is not None and sip is not None:
                    return (cip, int(peer[1])), (sip, int(local[1]))
        except (OSError, ValueError, IndexError, TypeError):
            pass
    cip = _parse_ip(environ.get("REMOTE_ADDR") or "")
    try:
        cport = int(environ.get("REMOTE_PORT"))
        sport = int(environ.get("SERVER_PORT"))
    except (TypeError, ValueError):
        return None
    if cip is None or not (0 < cport < 65536) or not (0 < sport < 65536):
        return None
    return (cip, cport), (None, sport)


def _hex_ip(text: str) -> ipaddress._BaseAddress:
    """The kernel prints each 32-bit word of the address in host byte order."""
    words = [struct.pack("=I", int(text[i:i + 8], 16)) for i in range(0, len(text), 8)]
    return _norm(ipaddress.ip_address(b"".join(words)))


def _hex_endpoint(text: str) -> Address:
    host, port = text.split(":")
    return _hex_ip(host), int(port, 16)


def parse_table(lines: Iterable[str]) -> List[Tuple[Address, Address, int, int, int]]:
    """``(local, remote, state, uid, inode)`` per socket of a ``/proc/net/tcp*`` table."""
    out = []
    for line in lines:
        f = line.split()
        if len(f) < 10 or ":" not in f[1] or f[0] == "sl":
            continue
        try:
            out.append((_hex_endpoint(f[1]), _hex_endpoint(f[2]), int(f[3], 16), int(f[7]), int(f[9])))
        except (ValueError, struct.error):
            continue
    return out


def identify(environ, tables: Tuple[str, ...] = TABLES) -> Peer:
    """Look up who owns the client's end of this request's TCP connection."""
    ends = endpoints(environ)
    if ends is None:
        return Peer(None, NO_ENDPOINTS)
    (cip, cport), (sip, sport) = ends
    client = f"{cip}:{cport}"
    uids = set()
    readable = False
    for path in tables:
        try:
            with open(path, "r", encoding="ascii", errors="replace") as f:
                rows = parse_table(f)
            readable = True
        except OSError:
            continue
        for local, remote, state, uid, inode in rows:
            if state in (_LISTEN, _TIME_WAIT) or inode == 0:
                continue
            if local != (cip, cport) or remote[1] != sport:
                continue
            if sip is not None and remote[0] != sip:
                continue
            uids.add(uid)
    if not readable:
        return Peer(None, NO_SOCKET_TABLE, client)
    if not uids:
        return Peer(None, NOT_FOUND, client)
    if len(uids) > 1:
        return Peer(None, AMBIGUOUS, client)
    return Peer(uids.pop(), IDENTIFIED, client)


def user_name(uid: Optional[int]) -> str:
    """``name (uid)`` for messages; the number alone when the name is unknown."""
    if uid is None:
        return "unknown"
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def owner_uid() -> Optional[int]:
    """The effective uid of this process (None where the OS has none)."""
    return os.geteuid() if hasattr(os, "geteuid") else None
