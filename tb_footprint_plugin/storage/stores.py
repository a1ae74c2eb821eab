"""Which ``Store`` a logdir or vault gets: ``open_store`` picks the implementation.

Kept out of ``storage/store.py`` so the interface module imports neither implementation (both
import it): the store modules form no cycle.
"""
from __future__ import annotations

import os

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.storage import remote
from tb_footprint_plugin.storage.store import Store, StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore
from tb_footprint_plugin.storage.store_posix import PosixStore


def open_store(url_or_path: str) -> Store:
    """The store of a logdir or vault: ``ObjectStore`` for ``s3://``, ``gs://``, ``az://`` (and
    their aliases), ``PosixStore`` for a local path or ``file://`` URL. Other URLs:
    ``StoreFailure(NOT_SUPPORTED)`` (those can be scanned through fsspec, not changed)."""
    target = os.fspath(url_or_path)
    scheme, rest = remote.split_scheme(target)
    if scheme is None or scheme == "file":
        return PosixStore(rest if scheme == "file" else target)
    if remote.is_bucket_url(target):
        return ObjectStore(target)
    if scheme in remote.SCHEMES:
        raise StoreFailure(StoreError.UNSAFE_KEY, target, "name a bucket")
    raise StoreFailure(StoreError.NOT_SUPPORTED, target,
                       f"{scheme}:// has no Store (s3://, gs://, az:// and local paths have one)")


__all__ = ["open_store"]
