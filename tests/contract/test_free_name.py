"""A file set beside another takes the first free name by one rule on every store
(``putback.at_free_name``, r22 task C2): walk k = 1, 2, …; a create-only write at a name that
looks free; a taken name reused only where it holds exactly these bytes, else the walk goes on;
a thing made at a name after its look is never replaced. A disk's ``placement.place_at_free_name``
and a bucket's restore (``bucket_kept.salvage_object``) walk by it. Run on a folder, moto S3,
the GCS emulator and Azurite."""
import hashlib

import pytest

from contract_stores import buckets, store  # noqa: F401 - the store fixtures
from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine import bucket_kept, putback
from tb_footprint_plugin.engine.bucket_objects import BucketState
from tb_footprint_plugin.engine.salvage import salvage_name
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore

PATH = "run/events.out.tfevents.1.host"
OURS = b"late records that exist nowhere else\n" * 9
THEIRS = b"someone else's file\n"
F = {"size": len(OURS), "sha256": hashlib.sha256(OURS).hexdigest()}


def _walk(store, looks_free=lambda key: True):
    """The rule over the ``Store`` interface: ``put(if_absent=True)`` the create-only write,
    ``holds_original`` the reuse."""
    def place(key: str) -> bool:
        try:
            store.put(key, OURS, if_absent=True)
        except StoreFailure as e:
            if e.code != StoreError.ALREADY_EXISTS:
                raise
            return False
        return True

    return putback.at_free_name(lambda k: salvage_name(PATH, k), place,
                                lambda key: putback.holds_original(store, key, F), looks_free)


def _read(store, key: str) -> bytes:
    with store.open_read(key) as r:
        return r.read()


def test_the_first_free_name_is_taken(store):  # noqa: F811
    assert _walk(store) == (salvage_name(PATH, 1), True)
    assert _read(store, salvage_name(PATH, 1)) == OURS


def test_a_taken_name_is_reused_only_with_exactly_these_bytes(store):  # noqa: F811
    store.put(salvage_name(PATH, 1), THEIRS)
    store.put(salvage_name(PATH, 2), OURS)  # an earlier, interrupted attempt's
    assert _walk(store) == (salvage_name(PATH, 2), False)
    store.put(salvage_name(PATH, 2), OURS + b"x")  # grown since: not these bytes
    assert _walk(store) == (salvage_name(PATH, 3), True)
    assert [_read(store, salvage_name(PATH, k)) for k in (1, 2, 3)] == [THEIRS, OURS + b"x", OURS]


def test_a_thing_made_at_a_name_after_its_look_is_kept(store):  # noqa: F811
    def looks_free(key: str) -> bool:
        free = store.stat(key) is None
        if free and key == salvage_name(PATH, 1):
            store.put(key, THEIRS)  # at the instant between the look and the write
        return free

    assert _walk(store, looks_free) == (salvage_name(PATH, 2), True)
    assert _read(store, salvage_name(PATH, 1)) == THEIRS


@pytest.mark.parametrize("store", ["s3", "gs", "az"], indirect=True)  # a folder's walk: test_salvage_name_create_only
def test_a_buckets_restore_keeps_a_thing_made_between_its_head_and_its_put(store, monkeypatch):  # noqa: F811
    assert isinstance(store, ObjectStore)
    first = salvage_name(PATH, 1)
    real = BucketState.head

    def head(self, path):
        got = real(self, path)
        if got is None and path == store.path(first) and store.stat(first) is None:
            store.put(first, THEIRS)
        return got

    monkeypatch.setattr(BucketState, "head", head)
    assert bucket_kept.salvage_object(store, PATH, OURS, {}) == salvage_name(PATH, 2)
    assert _read(store, first) == THEIRS and _read(store, salvage_name(PATH, 2)) == OURS
    # an earlier, interrupted restore's object with exactly these bytes is reused, nothing written
    assert bucket_kept.salvage_object(store, PATH, OURS, {}) == salvage_name(PATH, 2)
    assert store.stat(salvage_name(PATH, 3)) is None
