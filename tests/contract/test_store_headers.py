"""``Capabilities.headers_kept`` checked against behaviour on every store (review R26 F5): where it is
declared, an object written with a Content-Type and user metadata (``put``, ``put_file`` of a local
file with its whole checksum) has them, as ``stat`` says, a listing says where its store's does (GCS,
Azure; an S3 listing says none: None, not known, never "none"), a server-side copy keeps them and a
record a store does not take is refused before anything is sent (``TOO_LARGE`` past its size,
``NOT_SUPPORTED`` for what is no header, or a value its headers cannot carry; nothing written);
where it is not (a folder), ``stat`` says none."""
from contract_stores import buckets, store  # noqa: F401 - the store fixtures
from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.storage.store import StoreFailure

H = {"content_type": "application/x-custom", "metadata": {"team": "vision"}}


def test_headers_are_set_said_and_copied_where_the_store_keeps_them(store, tmp_path):
    store.put("plain", b"x")
    if not store.capabilities.headers_kept:
        assert store.stat("plain").headers is None
        return
    store.put("h/small", b"abc", headers=H)
    assert store.stat("h/small").headers == H
    src = tmp_path / "big"
    src.write_bytes(b"y" * 70_000)
    e = store.put_file("h/file", str(src), whole_checksum=True, headers=H)
    assert e.headers == H and store.stat("h/file").headers == H
    store.copy("h/small", "h/copied")
    assert store.stat("h/copied").headers == H
    listed = {e.key: e.headers for e in store.list("h")}
    if store.scheme == "s3":
        assert set(listed.values()) == {None}  # an S3 listing says no headers: not known
    else:
        assert listed == {"h/small": H, "h/file": H, "h/copied": H}
    # a record the store does not take is never sent
    for bad, code in (({"content_type": "a\r\nx-amz-acl: public-read", "metadata": {}}, StoreError.NOT_SUPPORTED),
                      ({"content_type": None, "metadata": {"k": "v" * 9000}}, StoreError.TOO_LARGE),
                      ({"content_type": None, "metadata": {"bad key": "v"}}, StoreError.NOT_SUPPORTED)):
        try:
            store.put("h/bad", b"z", headers=bad)
        except StoreFailure as err:
            assert err.code == code, err
        else:
            raise AssertionError(f"sent {bad}")
        assert store.stat("h/bad") is None
    # a value S3's and Azure's headers cannot carry (not ASCII) is refused there; GCS takes UTF-8
    uni = {"content_type": None, "metadata": {"team": "v\u00efsion"}}
    if store.scheme == "gs":
        store.put("h/uni", b"u", headers=uni)
        assert store.stat("h/uni").headers["metadata"] == uni["metadata"]  # (no type given: the default)
    else:
        try:
            store.put("h/uni", b"u", headers=uni)
        except StoreFailure as err:
            assert err.code == StoreError.NOT_SUPPORTED, err
        else:
            raise AssertionError(f"sent {uni}")
        assert store.stat("h/uni") is None


def test_bytes_holding_a_multipart_boundary_go_up_whole(store, tmp_path):
    """A small upload to GCS is one multipart request (gcsfs's ``put_file`` below 5 MiB, a put with
    headers): bytes that hold gcsfs's fixed boundary (``--==0==``) ended the part at the server and the
    object went up cut short. Every store, with and without headers, by ``put`` and ``put_file``."""
    data = b"\x00events\n--==0==\nContent-Type: text/plain\n\n--==0==--\n" * 50
    src = tmp_path / "f"
    src.write_bytes(data)
    headed = H if store.capabilities.headers_kept else None
    store.put("h/put", data)
    store.put_file("h/file", str(src), whole_checksum=True)
    if headed:
        store.put("h/put-h", data, headers=headed)
        store.put_file("h/file-h", str(src), whole_checksum=True, headers=headed)
        assert store.stat("h/put-h").headers == H and store.stat("h/file-h").headers == H
    for key in ("h/put", "h/file") + (("h/put-h", "h/file-h") if headed else ()):
        assert store.read_range(key, 0, len(data) + 10) == data, key


def _holding_the_boundary(size: int, at: int) -> bytes:
    """``size`` bytes holding gcsfs's multipart boundary near the start, at the end and across
    offset ``at`` (a part's end: the mark's first half in one part, its second in the next)."""
    mark = b"\n--==0==\nContent-Type: text/plain\n\n--==0==--\n"
    body = bytearray((b"\x00events-" * (size // 8 + 1))[:size])
    for pos in (16, at - len(mark) // 2, size - len(mark)):
        body[pos:pos + len(mark)] = mark
    return bytes(body)


def test_every_put_file_and_pipe_of_bytes_holding_a_multipart_boundary_goes_up_whole(store, tmp_path):
    """Each form of ``put_file`` (unconditional, ``if_absent``, ``if_version``, ``whole_checksum``;
    from a path and from a file object), and ``RemoteFS.write_bytes`` on a bucket, of bytes that
    hold gcsfs's fixed multipart boundary ``--==0==``: below a part (one request on every store,
    a multipart one on GCS unless sent by the store's own put) and across a part's end (a streamed
    or resumable upload), each read back whole on every store."""
    import io

    from tb_footprint_plugin.storage.store import STREAM_PART

    sizes = {"small": 3000, "spanning": STREAM_PART + (64 << 10)}
    for name, size in sizes.items():
        data = _holding_the_boundary(size, min(size, STREAM_PART) if size > STREAM_PART else size // 2)
        src = tmp_path / f"{name}.bin"
        src.write_bytes(data)
        written = {}
        written["plain"] = store.put_file(f"{name}/plain", str(src))
        with open(src, "rb") as f:
            written["plain-f"] = store.put_file(f"{name}/plain-f", f)
        written["absent"] = store.put_file(f"{name}/absent", str(src), if_absent=True)
        written["absent-f"] = store.put_file(f"{name}/absent-f", io.BytesIO(data), if_absent=True)
        v = store.put(f"{name}/version", b"before")
        written["version"] = store.put_file(f"{name}/version", str(src), if_version=v)
        v = store.put(f"{name}/version-f", b"before")
        written["version-f"] = store.put_file(f"{name}/version-f", io.BytesIO(data), if_version=v)
        written["whole"] = store.put_file(f"{name}/whole", str(src), whole_checksum=True)
        rfs = getattr(store, "rfs", None)
        if rfs is not None:  # a bucket's own small-object write (tests and tools plant state with it)
            rfs.write_bytes(f"{name}/piped", data)
        for form in list(written) + (["piped"] if rfs is not None else []):
            key = f"{name}/{form}"
            assert store.stat(key).size == size, (key, store.stat(key).size, size)
            assert store.read_range(key, 0, size + 10) == data, key
            if form in written:
                assert written[form].size == size, key


def test_an_empty_object_goes_up_by_every_form(store):
    """No bytes, by ``put`` (with and without a condition) and each form of ``put_file`` of a file
    object: an empty object on every store (a media upload of no body, which the GCS emulator
    left unanswered until the client gave up, is no longer sent)."""
    import io

    store.put("e/put", b"")
    store.put("e/absent", b"", if_absent=True)
    v = store.put("e/version", b"x")
    store.put("e/version", b"", if_version=v)
    store.put_file("e/file", io.BytesIO(b""))
    store.put_file("e/file-absent", io.BytesIO(b""), if_absent=True)
    v = store.put("e/file-version", b"x")
    store.put_file("e/file-version", io.BytesIO(b""), if_version=v)
    for key in ("e/put", "e/absent", "e/version", "e/file", "e/file-absent", "e/file-version"):
        assert store.stat(key).size == 0 and store.read_all(key) == b"", key
