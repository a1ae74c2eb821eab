"""Review R9 F8 (invariant 1): a bucket logdir's backups kept as blobs in a local --backup-dir folder are forgotten by
the next `purge --yes` as soon as no manifest in the bucket names them — also when the manifest is simply gone
(a teammate's cleanup of .tb-footprint/, a lifecycle rule on the prefix, a bucket copied without its state): the
purge's forget (bucket_blobs.collect) takes "not named" for "purged". Here a retired run's only copy (its blobs in
the local folder) is destroyed by a purge whose preview listed nothing to purge.
Now the forget goes by positive evidence only (a manifest marked purged, an entry a restore released): a blob
nothing names is an orphan, kept; a normal purge still frees what it purged (the last test)."""
import hashlib
import os

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.storage.blobstore import BlobStore
from tb_footprint_plugin.storage.store_posix import PosixStore

STATE = ".tb-footprint/"


def _blobs(vault):
    return {r.sha for r in BlobStore(PosixStore(vault)).refs()} if os.path.isdir(vault) else set()


def test_purge_never_forgets_a_blob_whose_manifest_went_missing(s3_bucket, tmp_path):
    src = tmp_path / "src"
    with synth.EventWriter(str(src / "train")) as w:
        for s in range(20):
            w.scalar("loss", s, 1.0 / (s + 1))
    (src / "train" / "notes.txt").write_bytes(b"only copy\n" * 100)
    url = s3_bucket.upload(src, "logs")
    vault = str(tmp_path / "vault")
    want = {hashlib.sha256((src / "train" / "notes.txt").read_bytes()).hexdigest()}
    rep = api.retire(url, api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0, backup_dir=vault)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], [o.reason for o in rep.outcomes]
    assert want <= _blobs(vault)
    # the bucket's state loses its manifests (someone tidied .tb-footprint/manifests/)
    for k in s3_bucket.fs.find(s3_bucket.key("logs/" + STATE + "manifests")):
        s3_bucket.fs.rm(k)
    s3_bucket.fs.invalidate_cache()
    preview = api.purge(url, yes=False, backup_dir=vault)
    print("preview:", preview.to_dict())
    api.purge(url, yes=True, backup_dir=vault)
    assert want <= _blobs(vault), "the retired run's only copy was forgotten by a purge that listed nothing"


def test_a_restore_never_forgets_another_runs_blob_whose_manifest_went_missing(s3_bucket, tmp_path):
    src = tmp_path / "src"
    for name in ("a", "b"):
        with synth.EventWriter(str(src / name)) as w:
            for s in range(20):
                w.scalar("loss", s, 1.0 / (s + 1))
        (src / name / "notes.txt").write_bytes(f"only copy of {name}\n".encode() * 100)
    url = s3_bucket.upload(src, "logs")
    vault = str(tmp_path / "vault")
    want_b = {hashlib.sha256((src / "b" / "notes.txt").read_bytes()).hexdigest()}
    rep = api.retire(url, api.retire_rule(runs=["a", "b"]), dry_run=False, quiet_period=0, backup_dir=vault)
    assert {o.status for o in rep.outcomes} == {Outcome.VERIFIED}
    ops = {o.run: o.op_id for o in rep.outcomes}
    gone = [k for k in s3_bucket.fs.find(s3_bucket.key("logs/" + STATE + "manifests")) if ops["b"] in k]
    assert gone
    for k in gone:  # b's manifest lost
        s3_bucket.fs.rm(k)
    s3_bucket.fs.invalidate_cache()
    (o,) = api.restore(url, run="a", backup_dir=vault)
    assert o.status == Outcome.RESTORED, o.reason
    assert want_b <= _blobs(vault), "restoring run a forgot run b's only copy"


def test_a_purge_still_forgets_what_it_purged_and_keeps_the_orphan(s3_bucket, tmp_path):
    src = tmp_path / "src"
    for name in ("a", "b"):
        with synth.EventWriter(str(src / name)) as w:
            for s in range(20):
                w.scalar("loss", s, 1.0 / (s + 1))
        (src / name / "notes.txt").write_bytes(f"only copy of {name}\n".encode() * 100)
    url = s3_bucket.upload(src, "logs")
    vault = str(tmp_path / "vault")
    sha = {n: hashlib.sha256((src / n / "notes.txt").read_bytes()).hexdigest() for n in ("a", "b")}
    rep = api.retire(url, api.retire_rule(runs=["a", "b"]), dry_run=False, quiet_period=0, backup_dir=vault)
    assert {o.status for o in rep.outcomes} == {Outcome.VERIFIED}
    ops = {o.run: o.op_id for o in rep.outcomes}
    (key,) = [k for k in s3_bucket.fs.find(s3_bucket.key("logs/" + STATE + "manifests")) if ops["b"] in k]
    aside = s3_bucket.fs.cat_file(key)
    s3_bucket.fs.rm(key)  # b's manifest lost: its blob is an orphan
    s3_bucket.fs.invalidate_cache()
    api.purge(url, yes=True, backup_dir=vault, run="a")
    # review R26 F1's bucket half: the witness still names b's retirement, whose blobs are unknown now (they may be
    # a's too): while its manifest is missing no forget lets any blob go, a's purged one included
    assert {sha["a"], sha["b"]} <= _blobs(vault), "a blob was forgotten while b's manifest is missing"
    s3_bucket.fs.pipe_file(key, aside)  # b's manifest back: the next purge forgets what a's purge let go
    s3_bucket.fs.invalidate_cache()
    api.purge(url, yes=True, backup_dir=vault, op=ops["a"])  # purged already: the settle forgets
    left = _blobs(vault)
    assert sha["a"] not in left, "the purged retirement's blob was not forgotten"
    assert sha["b"] in left, "the orphan was forgotten"
