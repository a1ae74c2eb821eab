"""``Store.append(if_version=)`` on every store (task r22 S2 step 2, issue #26 item 1): one rule the
interface states for a folder and a bucket alike — an append lands only while the key is at the
version the writer's own last write returned, and otherwise writes nothing (``PRECONDITION_FAILED``)
and never makes the key. The disk journal's appends are this condition (``StateFolder``), a
bucket's journal its ``put(if_version=)``: a journal is one file, or object, from its first record
to its last."""
import pytest

from contract_stores import buckets, store  # noqa: F401 - the store fixtures
from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.storage.store import StoreFailure


def test_an_append_lands_only_at_the_version_its_writer_left(store):
    v1 = store.put("j/op.jsonl", b'{"type": "begin"}\n', if_absent=True)
    v2 = store.append("j/op.jsonl", b'{"type": "backup"}\n', if_version=v1)
    assert v2 != v1
    with pytest.raises(StoreFailure) as e:
        store.append("j/op.jsonl", b'{"type": "stale"}\n', if_version=v1)  # the version before the last
    assert e.value.code == StoreError.PRECONDITION_FAILED
    other = store.append("j/op.jsonl", b'{"type": "another writer"}\n')  # unconditional: lands
    with pytest.raises(StoreFailure) as e:
        store.append("j/op.jsonl", b'{"type": "swap"}\n', if_version=v2)  # written by another since
    assert e.value.code == StoreError.PRECONDITION_FAILED
    store.append("j/op.jsonl", b'{"type": "swap"}\n', if_version=other)
    assert store.read_all("j/op.jsonl") == (b'{"type": "begin"}\n{"type": "backup"}\n'
                                            b'{"type": "another writer"}\n{"type": "swap"}\n')


def test_an_append_on_condition_never_makes_the_key(store):
    v = store.put("j/a.jsonl", b"x\n")
    with pytest.raises(StoreFailure) as e:
        store.append("j/b.jsonl", b"y\n", if_version=v)
    assert e.value.code == StoreError.PRECONDITION_FAILED
    assert store.stat("j/b.jsonl") is None


def test_an_append_on_condition_in_a_missing_folder_is_refused_the_same_way(store):
    """Review R4 F4: a folder store said ``NOT_FOUND`` where the key's folder is missing too; the
    interface, and a bucket (which has no folders), say ``PRECONDITION_FAILED``."""
    v = store.put("j/a.jsonl", b"x\n")
    with pytest.raises(StoreFailure) as e:
        store.append("nofolder/b.jsonl", b"y\n", if_version=v)
    assert e.value.code == StoreError.PRECONDITION_FAILED
    assert store.stat("nofolder/b.jsonl") is None
