"""``ObjectStore``'s names on every object store (moto's S3, the GCS emulator, Azurite): the
store path and URL of a key (``path``, ``url_of``: how the bucket engine names objects in its
journals and manifests), the store's ``url``/``scheme``/``protocol``, and a store at another
prefix on the same client (``at``); ``of`` takes a store only, never its client. Names cost no
request; the bucket engine takes these from the logdir's ``ObjectStore`` and never from its
``RemoteFS`` (issue #26)."""
import itertools

import pytest

from contract_stores import buckets  # noqa: F401 - the fixture
from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.storage.remote import RemoteFS
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore

_prefixes = itertools.count()


@pytest.mark.parametrize("scheme", ["s3", "gs", "az"])
def test_a_keys_store_path_and_url_name_the_object_its_key_writes(buckets, scheme):  # noqa: F811
    b = buckets(scheme)
    prefix = f"nam{next(_prefixes)}/logs"
    store = ObjectStore(b.url(prefix))
    before = store.stats.to_dict()
    assert store.url == b.url(prefix) and store.scheme == b.url(prefix).split("://")[0]
    assert store.protocol == {"s3": "s3", "gs": "gcs", "az": "az"}[scheme]
    assert store.path() == store.path(".") == store.path("/") == store.root == b.key(prefix)
    assert store.path("run/a.bin") == store.path("/run/a.bin") == f"{store.root}/run/a.bin"
    assert store.url_of("run/a.bin") == f"{store.scheme}://{store.root}/run/a.bin"
    assert store.url_of() == store.url
    # 'run/a.bin/' is another object than 'run/a.bin' (S3 holds both): never taken for it
    for bad in ("a/../b", "..", "a//b", "./a", "run/a.bin/", "/run/a.bin/"):
        with pytest.raises(ValueError):
            store.path(bad)
    assert store.stats.to_dict() == before  # names cost no request
    store.put("run/a.bin", b"abc")
    b.fs.invalidate_cache()
    assert b.fs.cat_file(store.path("run/a.bin")) == b"abc"


@pytest.mark.parametrize("scheme", ["s3", "gs", "az"])
def test_a_store_at_another_prefix_is_on_the_same_client_and_counters(buckets, scheme):  # noqa: F811
    b = buckets(scheme)
    n = next(_prefixes)
    store = ObjectStore(b.url(f"nam{n}/logs"))
    store.prepare_writes()
    other = store.at(b.url(f"nam{n}/vault"))
    assert other.root == b.key(f"nam{n}/vault") and other.url == b.url(f"nam{n}/vault")
    assert other.ops is store.ops and other.stats is store.stats
    other.put("blobs/x", b"1")
    assert store.path("x") != other.path("x") == f"{b.key(f'nam{n}/vault')}/x"
    assert [e.key for e in store.at(store.url).list()] == []
    before = store.stats.to_dict()
    foreign = {"s3": "gs", "gs": "az", "az": "s3"}[scheme]
    with pytest.raises(StoreFailure) as e:
        store.at(f"{foreign}://elsewhere/vault")
    assert e.value.code == StoreError.NOT_SUPPORTED
    assert store.stats.to_dict() == before


def test_of_takes_a_store_as_it_is_and_refuses_its_client(buckets):  # noqa: F811
    b = buckets("s3")
    url = b.url(f"nam{next(_prefixes)}/logs")
    store = ObjectStore(url)
    assert ObjectStore.of(store) is store
    rfs = RemoteFS(url)
    before = rfs.stats.to_dict()
    with pytest.raises(TypeError, match="ObjectStore"):  # the client is not the store: says what to pass
        ObjectStore.of(rfs)
    assert rfs.stats.to_dict() == before  # refused before any request
    with pytest.raises(TypeError):
        ObjectStore.of(url)


@pytest.mark.parametrize("scheme", ["s3", "gs", "az"])
def test_a_store_of_another_kind_is_refused_before_any_client_is_made(buckets, scheme, monkeypatch):  # noqa: F811
    """``at`` tells another store from the URL alone: no client is built for it, so nothing of that
    store is asked (an Azure client without credentials in the environment asked the credential chain
    first and said ``no_credentials``, which made the case above depend on what other tests had set)."""
    from tb_footprint_plugin.storage import store_object

    store = ObjectStore(buckets(scheme).url("nam-other/logs"))
    made = []
    real = store_object.RemoteFS
    monkeypatch.setattr(store_object, "RemoteFS", lambda *a, **kw: made.append(a) or real(*a, **kw))
    for foreign in {"s3", "gs", "az"} - {scheme}:
        with pytest.raises(StoreFailure) as e:
            store.at(f"{foreign}://elsewhere/vault")
        assert e.value.code == StoreError.NOT_SUPPORTED, (foreign, e.value)
    assert made == []
