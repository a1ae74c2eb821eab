"""Review R24 F8: a remote vault's data object moved to an archive class (S3 GLACIER by the
``vault lifecycle`` rule, DEEP_ARCHIVE; Azure's Archive tier) is not read by the store until it is
restored: S3 answers a GET ``InvalidObjectState`` (403), which the client raised as a refusal, and a
restore said "backup damaged or missing … permission_denied".

Now the store layer codes it ``StoreError.ARCHIVED`` (told by the service's error code, never its
words), and a restore names each such object with what to do: "archived: ask the store to restore it
(aws s3api restore-object …), then restore again"; nothing is lost, and once the store restored the
objects the restore gives every file back. A purge whose repack would read such a pack keeps it and
goes on (``not_repacked``), as each later batch end does: no start fails on it. On moto: each data
object copied onto itself with StorageClass GLACIER, as a lifecycle transition leaves it."""
import pytest

from test_pack_index_rebuilt_bucket import offloaded  # noqa: F401 - the fixture
from test_restore_exact import assert_exact, snapshot
from tb_footprint_plugin import api, codes
from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine import offload, remote_vault
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage import blobstore
from tb_footprint_plugin.storage.paths import state_dir
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.stores import open_store


def _s3(s3_bucket, url):
    """(bucket, the store's key prefix) of the remote vault's URL."""
    rest = url.split("://", 1)[1]
    bucket, _, prefix = rest.partition("/")
    assert bucket == s3_bucket.name
    return bucket, prefix.strip("/")


def _data_keys(url):
    return sorted(e.key for e in open_store(url).list("data"))


def _archive(s3_bucket, url):
    """Every data object of the remote vault copied onto itself into GLACIER (a lifecycle rule's
    transition): its bytes and key unchanged, no longer served until restored."""
    bucket, prefix = _s3(s3_bucket, url)
    keys = _data_keys(url)
    assert keys
    for k in keys:
        full = f"{prefix}/{k}"
        s3_bucket.fs.call_s3("copy_object", Bucket=bucket, Key=full, CopySource={"Bucket": bucket, "Key": full},
                             StorageClass="GLACIER", MetadataDirective="COPY")
    _fresh_process()
    return keys


def _unarchive(s3_bucket, url, keys):
    bucket, prefix = _s3(s3_bucket, url)
    for k in keys:
        s3_bucket.fs.call_s3("restore_object", Bucket=bucket, Key=f"{prefix}/{k}", RestoreRequest={"Days": 1})
    _fresh_process()


def _fresh_process():
    """What this process kept of the remote vault (bytes read back at the reduce, failures met)
    forgotten, as a new process has it."""
    remote_vault._staged.clear()
    remote_vault._failures.clear()


def test_an_archived_object_is_coded_archived_by_the_store(offloaded, s3_bucket):  # noqa: F811
    _root, _before, url = offloaded
    keys = _archive(s3_bucket, url)
    with pytest.raises(StoreFailure) as e:
        open_store(url).read_range(keys[0], 0, 4)
    assert e.value.code == StoreError.ARCHIVED and keys[0] in str(e.value), repr(e.value)


def test_a_restore_names_each_archived_object_and_what_to_do_then_restores_once_they_are_restored(
        offloaded, s3_bucket):  # noqa: F811
    root, before, url = offloaded
    keys = _archive(s3_bucket, url)
    res = api.restore(str(root))
    assert res and all(o.status == codes.Outcome.FAILED for o in res), [o.to_dict() for o in res]
    for o in res:
        assert "[archived]" in o.reason and "permission_denied" not in o.reason, o.reason
        assert "archived (the store keeps it in an archive storage class): ask the store to restore it " \
            "(aws s3api restore-object --bucket" in o.reason, o.reason
        assert "then restore again" in o.reason and any(f"{url.rstrip('/')}/{k}" in o.reason for k in keys), o.reason
        assert o.code == StoreError.ARCHIVED, o.to_dict()  # no backup called damaged
    assert _data_keys(url) == keys  # nothing deleted
    _unarchive(s3_bucket, url, keys)
    res = api.restore(str(root))
    assert res and {o.status for o in res} == {codes.Outcome.RESTORED}, [o.to_dict() for o in res]
    assert_exact(root, before)


def test_a_purge_keeps_an_archived_pack_it_cannot_repack_and_no_batch_end_fails_on_it(offloaded, s3_bucket,  # noqa: F811
                                                                                      monkeypatch):
    root, before, url = offloaded
    runs = sorted({o["run"] for o in api.operations(str(root)) if o.get("kind") == "reduce"})
    assert len(runs) >= 2, runs
    _archive(s3_bucket, url)
    # every pack counts as small: a purge's forget and each batch end repack them together, reading
    # each (the store refuses: archived)
    monkeypatch.setattr(blobstore, "MIN_PACK", 1 << 40)
    rep = api.purge(str(root), yes=True, run=runs[0])
    assert [o["run"] for o in rep.ops] == [runs[0]], rep.to_dict()
    left = _data_keys(url)
    assert len([k for k in left if k.endswith(".pack")]) >= 2, left
    vault = Vault(state_dir(str(root)))
    for _ in range(2):  # each later batch end: the packs are kept, named, and the end goes on
        fig = offload.merge_remote_packs(vault)
        assert fig.get("not_repacked") and fig["packs_repacked"] == 0, fig
        assert all("archived" in n["message"] for n in fig["not_repacked"]), fig["not_repacked"]
        assert _data_keys(url) == left, fig
    _unarchive(s3_bucket, url, left)
    res = api.restore(str(root))
    assert res and {o.status for o in res} == {codes.Outcome.RESTORED}, [o.to_dict() for o in res]
    # every other run back byte for byte (the purged run's own backups went, as asked)
    now = snapshot(root)
    for rel, was in before.items():
        if rel == runs[0] or rel.startswith(runs[0] + "/"):
            continue
        assert rel in now and (now[rel][:2] if was[0] == "dir" else now[rel]) == (was[:2] if was[0] == "dir" else was), rel
