"""Review R24 F2: a disk logdir whose backups went to a remote vault (``--backup-dir s3://…``) loses
an index object of that vault (a lifecycle rule, a tidy by hand: deleted, not garbled). Before, the
next batch's end (``offload.merge_remote_packs``) swept the pack it listed as a leftover once past the
grace: the reduced run's originals, whose only copy it was, were gone; and before that, a restore,
verify and ``recover`` found nothing (the rebuild ran only for a damaged index object).

Now a record of this vault naming a blob no index object lists is the evidence (the rule a disk's
packs keep, ``vault_packs.pack_index_gaps``): it is looked for in the packs (each slice hashed) and
listed anew before anything is swept; while one is still found nowhere, nothing unlisted is swept.
On moto (tests/objstore_servers.py), in-process; the grace passed by moving the blob store's clock.
"""
import types

import pytest

from test_pack_index_rebuilt_bucket import offloaded  # noqa: F401 - the fixture
from test_restore_exact import assert_exact
from tb_footprint_plugin import api, codes
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine import offload, remote_vault
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage import blobstore
from tb_footprint_plugin.storage.blob_salvage import Salvage
from tb_footprint_plugin.storage.paths import state_dir
from tb_footprint_plugin.storage.stores import open_store


def _lose_index(url) -> list:
    """Every index object of the remote vault deleted; its data objects stay."""
    store = open_store(url)
    keys = [e.key for e in store.list("index")]
    assert keys and [e.key for e in store.list("data")]
    store.delete(keys)
    assert [e.key for e in store.list("index")] == []
    return keys


@pytest.fixture
def later(monkeypatch):
    """The blob store's clock two hours on: every data object is past the 1 h grace."""
    import time

    monkeypatch.setattr(blobstore, "time", types.SimpleNamespace(time=lambda: time.time() + 7200,
                                                                monotonic=time.monotonic, sleep=time.sleep))


def test_a_batch_end_finds_a_lost_index_objects_blobs_before_it_sweeps(offloaded, later):  # noqa: F811
    root, before, url = offloaded
    _lose_index(url)
    remote_vault._rebuilt.clear()
    offload.merge_remote_packs(Vault(state_dir(str(root))))
    # listed again (each hashed), so the merge's sweep took nothing a record needs
    bs = remote_vault.blobstore(url, fresh=True)
    assert all(bs.has(s) for s in remote_vault.recorded_blobs(state_dir(str(root)), url))
    res = api.restore(str(root))
    assert res and {o.status for o in res} == {codes.Outcome.RESTORED}, [o.to_dict() for o in res]
    assert_exact(root, before)


def test_while_a_lost_blob_is_found_nowhere_the_batch_end_and_purge_sweep_nothing(offloaded, later, monkeypatch):  # noqa: F811
    root, _before, url = offloaded
    _lose_index(url)
    data = sorted(e.key for e in open_store(url).list("data"))
    # the look through the packs finds nothing (as when a pack does not read)
    monkeypatch.setattr(remote_vault, "salvage", lambda bs, wanted, *a, **k: Salvage(missing=sorted(wanted)))
    fig = offload.merge_remote_packs(Vault(state_dir(str(root))))
    assert fig.get("kept_unlisted"), fig
    assert sorted(e.key for e in open_store(url).list("data")) == data
    rep = api.purge(str(root), yes=True)
    assert sorted(e.key for e in open_store(url).list("data")) == data, rep.to_dict()


def test_recover_and_restore_find_a_lost_index_objects_blobs(offloaded):  # noqa: F811
    root, before, url = offloaded
    _lose_index(url)
    # status names them (it said only "stored for 0 backup(s)"), and the verb that finds them
    said = [p for p in api.status(str(root))["problems"] if p.get("path") == url]
    assert len(said) == 1 and "listed by no index object" in said[0]["detail"] and "recover" in said[0]["detail"], \
        api.status(str(root))["problems"]
    assert said[0]["code"] == Finding.DAMAGED_FILE
    remote_vault._rebuilt.clear()
    outs = api.recover_logdir(str(root))
    assert [o for o in outs if o.code == Finding.PACK_INDEX_REBUILT], [vars(o) for o in outs]
    assert not [p for p in api.status(str(root))["problems"] if p.get("path") == url]
    _lose_index(url)  # again: this time the restore meets it first
    remote_vault._rebuilt.clear()
    res = api.restore(str(root))
    assert res and {o.status for o in res} == {codes.Outcome.RESTORED}, [o.to_dict() for o in res]
    assert_exact(root, before)
