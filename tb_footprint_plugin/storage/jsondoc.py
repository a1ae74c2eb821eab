"""Parsing JSON that is untrusted input (state objects of a bucket anyone with write access may
put, scan caches, index objects, journal lines): one rule for every reader.

``json`` raises ``RecursionError`` — not a ``ValueError`` — on deeply nested brackets (200 kB of
``[`` is far below any size cap), so a reader that reads around a damaged document on
``ValueError`` let a planted one stop the whole verb naming no file (review R10 F3). Here both
are a ``ValueError`` (as a ``UnicodeDecodeError`` already is), and the reader's own handling of a
damaged document applies.
"""
from __future__ import annotations

import json
from typing import IO, Any, Callable, Optional, Tuple, Union


def loads(data: Union[bytes, bytearray, str]) -> Any:
    """``json.loads`` of ``data`` (bytes decoded as UTF-8); ``ValueError`` for anything that is
    not a JSON document, too deeply nested ones included."""
    try:
        return json.loads(data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def landed_version(read: Callable[[], Tuple[Any, Optional[str]]], doc: Any) -> Optional[str]:
    """After a conditional put of ``doc`` whose answer was lost (the client's retry failed its
    precondition against the put's own new version, or every try timed out): the version ``read()``
    (the object read back, with its version) gives when the object holds ``doc`` as the writer put
    it (same fields and values after the JSON round trip), else None (another's document, gone,
    unreadable, or the read failed: taken as not landed)."""
    try:
        held, version = read()
    except OSError:  # a store's failure (``StoreFailure`` is one)
        return None
    return version if version and held is not None and held == json.loads(json.dumps(doc)) else None


def load(f: IO) -> Any:
    """``loads`` of what the open file ``f`` holds from where it stands."""
    return loads(f.read())
