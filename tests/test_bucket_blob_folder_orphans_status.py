"""Review R9 F8's follow-up: ``status`` of a bucket logdir with a local ``--backup-dir`` folder names the folder's
orphans (``orphan_blobs``, as a disk vault's: count, bytes, the folder as ``path``) and says what frees them (nothing
today: kept, they may be the only copy of a run whose manifest went missing). Before, a bucket's status said nothing of
them (only a purge's collect counted them). On the real moto server."""
import hashlib

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Finding, Outcome

STATE = ".tb-footprint/"


def _logdir(tmp_path):
    src = tmp_path / "src"
    for name in ("a", "b"):
        with synth.EventWriter(str(src / name)) as w:
            for s in range(20):
                w.scalar("loss", s, 1.0 / (s + 1))
        (src / name / "notes.txt").write_bytes(f"only copy of {name}\n".encode() * 100)
    return src


def test_status_names_the_folders_orphans_and_says_they_are_kept(s3_bucket, tmp_path):
    src = _logdir(tmp_path)
    url = s3_bucket.upload(src, "orph")
    vault = str(tmp_path / "vault")
    rep = api.retire(url, api.retire_rule(runs=["a", "b"]), dry_run=False, quiet_period=0, backup_dir=vault)
    assert {o.status for o in rep.outcomes} == {Outcome.VERIFIED}
    assert not [p for p in api.status(url, backup_dir=vault)["problems"] if p["code"] == Finding.ORPHAN_BLOBS]
    ops = {o.run: o.op_id for o in rep.outcomes}
    for k in [k for k in s3_bucket.fs.find(s3_bucket.key("orph/" + STATE + "manifests")) if ops["b"] in k]:
        s3_bucket.fs.rm(k)  # b's manifest lost: its blobs (b's only copy) are orphans
    s3_bucket.fs.invalidate_cache()
    def shas(run):
        return {hashlib.sha256(p.read_bytes()).hexdigest(): p.stat().st_size for p in (src / run).iterdir()}

    only_b = {k: v for k, v in shas("b").items() if k not in shas("a")}  # a's manifest still names the rest
    assert only_b
    (f,) = [p for p in api.status(url, backup_dir=vault)["problems"] if p["code"] == Finding.ORPHAN_BLOBS]
    assert f["path"] == vault and f["count"] == len(only_b) and f["bytes"] == sum(only_b.values())
    assert f["detail"].startswith(vault + ": ") and "kept, never purged" in f["detail"] and "nothing frees" in f["detail"]
    # a status without --backup-dir reads the folder a's manifest records, as a restore and a purge
    # take it (review R21 PD20's status half; before, it read none of it and named no orphan)
    assert [p for p in api.status(url)["problems"] if p["code"] == Finding.ORPHAN_BLOBS] == [f]
