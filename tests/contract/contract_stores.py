"""The stores every contract suite runs on: the local disk and the three object-store servers
(fixtures: a module imports them by name)."""
import itertools

import pytest

from objstore_servers import Bucket
from tb_footprint_plugin.storage.store import Store
from tb_footprint_plugin.storage.store_object import ObjectStore
from tb_footprint_plugin.storage.store_posix import PosixStore

KINDS = ("posix", "s3", "gs", "az")

_prefixes = itertools.count()


@pytest.fixture(scope="module")
def buckets(objstore_pool):
    """One bucket per server for the module (each test gets a prefix of its own: a fresh store)."""
    made = {}

    def get(scheme: str) -> Bucket:
        if scheme not in made:
            made[scheme] = Bucket(objstore_pool.get(scheme))
        return made[scheme]

    return get


@pytest.fixture(params=KINDS)
def store(request, tmp_path) -> Store:
    """A fresh, empty store of each kind."""
    if request.param == "posix":
        root = tmp_path / "store-root"
        root.mkdir()
        s = PosixStore(str(root))
    else:
        s = ObjectStore(request.getfixturevalue("buckets")(request.param).url(f"c{next(_prefixes)}/root"))
    yield s
    s.close()
