"""Issue #28 item 2: the shard folders (``blobs/ab``) a vault's packed or deleted backups leave
empty are removed (``Vault.prune_shards``), and every writer into a shard folder survives its
removal between the folder's making and the write (``Vault.in_shard``, the remote record's
write, salvage's link).

A compaction packs a small run's backups and unlinks their plain blobs: the 256 shard folders
stayed, empty, 4 KiB each as ``du`` counts them (1 kB a run at 1,000 small runs, half the 2 KB
the issue allows). Only an empty real folder of ours goes (``rmdir`` through a descriptor of
``blobs/`` checked ours); a link, a file, a non-empty folder stays. The races are made
deterministic by removing the folder from inside the writer's own steps (no timing).
"""
import hashlib
import json
import os
from pathlib import Path

import pytest

from test_livewriters import scalar_event
from test_small_packs import small_runs, tree
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine import remote_vault, salvage
from tb_footprint_plugin.engine import vault as vault_mod
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.scan.tfrecord import frame
from tb_footprint_plugin.storage import files as files_mod
from tb_footprint_plugin.synth import EventWriter, age, make_png

RUNS = 12
DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}
pytestmark = pytest.mark.usefixtures("disarm_faults")


def shards(vault: Vault) -> dict:
    """``blobs/<xx>`` name -> its entries (a folder), or None (anything else)."""
    out = {}
    for n in sorted(os.listdir(vault.blobs)) if os.path.isdir(vault.blobs) else []:
        p = os.path.join(vault.blobs, n)
        out[n] = sorted(os.listdir(p)) if os.path.isdir(p) and not os.path.islink(p) else None
    return out


def sha_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def source(tmp_path: Path, data: bytes, name: str = "f.bin") -> str:
    p = tmp_path / "logdir" / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return str(p)


def vault_in(tmp_path: Path) -> Vault:
    v = Vault(str(tmp_path / "logdir" / ".tb-footprint"))
    v.ensure()
    return v


def test_a_batch_of_small_runs_leaves_no_empty_shard_folder(tmp_path):
    logdir = small_runs(tmp_path, RUNS, 2)
    before = tree(logdir)
    rep = api.reduce_logdir(str(logdir), policy=DROP, dry_run=False, verify_backends=("python",))
    assert rep.ok and sum(o.status == "verified" for o in rep.outcomes) == RUNS, [o.to_dict() for o in rep.outcomes]
    vault = Context(str(logdir)).vault
    digests = {f["sha256"] for m in vault.manifests() for f in m["files"]}
    assert len(digests) == 2 * RUNS and all(vault.blob_form(s) == "packed" for s in digests)
    # every backup packed: no shard folder stays for them (was one empty folder a digest prefix)
    assert shards(vault) == {}, shards(vault)
    outs = api.restore(str(logdir))
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    assert tree(logdir) == before


def test_a_purge_of_plain_backups_leaves_no_empty_shard_folder(tmp_path):
    logdir = small_runs(tmp_path, 4, 2)
    rep = api.reduce_logdir(str(logdir), policy=DROP, dry_run=False, verify_backends=("python",),
                            vault_format="hardlink")
    assert rep.ok and sum(o.status == "verified" for o in rep.outcomes) == 4
    vault = Context(str(logdir)).vault
    assert shards(vault) and all(shards(vault).values())  # plain hard links, a folder each prefix
    pr = api.purge(str(logdir), older_than=0, yes=True)
    assert pr.freed_bytes > 0
    assert shards(vault) == {}


def test_prune_removes_only_empty_real_folders_of_ours(tmp_path):
    v = vault_in(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (Path(v.blobs) / "aa").symlink_to(outside)  # a link in a shard's place: never followed or removed
    (Path(v.blobs) / "bb").mkdir(mode=0o700)
    (Path(v.blobs) / "bb" / "kept").write_bytes(b"x")  # not empty: stays
    (Path(v.blobs) / "cc").write_bytes(b"")  # a file in a shard's place: stays
    (Path(v.blobs) / "dd").mkdir(mode=0o700)  # empty: goes
    (Path(v.blobs) / "ee").mkdir(mode=0o700)  # empty, but no digest asked for it: stays
    asked = [p * 32 for p in ("aa", "bb", "cc", "dd")] + ["ff" * 32, "not a digest"]
    assert v.prune_shards(asked) == 1
    assert shards(v) == {"aa": None, "bb": ["kept"], "cc": None, "ee": []}
    assert outside.is_dir() and (Path(v.blobs) / "aa").is_symlink()


def test_prune_refuses_a_blobs_folder_that_is_a_link(tmp_path):
    v = vault_in(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "dd").mkdir(parents=True)
    os.rmdir(v.blobs)
    os.symlink(elsewhere, v.blobs)
    assert v.prune_shards(["dd" * 32]) == 0
    assert (elsewhere / "dd").is_dir()  # nothing removed through the link


def racing(real, folder: str, when: list):
    """``real`` wrapped: before its first call that writes into ``folder`` (which was made and
    checked by then), the folder is removed, as another process's prune of it, empty, would."""
    def call(*a, **kw):
        # mkstemp(dir=folder) makes a file in it; link(src, dst) makes dst
        into = str(kw["dir"]) if "dir" in kw else os.path.dirname(str(a[1])) if len(a) > 1 else ""
        if not when and os.path.abspath(into) == folder:
            when.append(True)
            os.rmdir(folder)  # empty: what a prune in another process removes
        return real(*a, **kw)
    return call


@pytest.mark.parametrize("how", ["link", "copy"])
def test_a_backup_racing_a_shard_removal_is_still_stored(tmp_path, monkeypatch, how):
    v = vault_in(tmp_path)
    data = b"a backup racing a prune of its shard folder\n" * 40
    sha = sha_of(data)
    path = source(tmp_path, data)
    folder = os.path.dirname(v.blob_path(sha))
    fired: list = []
    if how == "link":
        monkeypatch.setattr(vault_mod.fsops, "link", racing(vault_mod.fsops.link, folder, fired))
    else:
        monkeypatch.setattr(Vault, "same_filesystem", lambda self, p: False)
        monkeypatch.setattr(vault_mod.tempfile, "mkstemp", racing(vault_mod.tempfile.mkstemp, folder, fired))
    blob = v.store(path, sha, pin="20260101T000000-abcdef")
    assert fired and blob == v.blob_path(sha)
    assert sha_of(Path(blob).read_bytes()) == sha
    assert v.pinned_by(sha) == ["20260101T000000-abcdef"]
    assert os.stat(folder).st_mode & 0o777 == 0o700  # made again, private
    assert os.stat(path).st_ino == os.stat(blob).st_ino if how == "link" else True


def test_a_backup_whose_source_is_gone_still_fails_after_its_tries(tmp_path):
    v = vault_in(tmp_path)
    sha = sha_of(b"gone")
    with pytest.raises(vault_mod.VaultError) as e:
        v.store(str(tmp_path / "logdir" / "missing.bin"), sha)
    assert "missing.bin" in str(e.value)


def test_a_remote_record_racing_a_shard_removal_is_still_written(tmp_path, monkeypatch):
    v = vault_in(tmp_path)
    sha = sha_of(b"packed, then offloaded")
    folder = os.path.dirname(v.blob_path(sha))
    os.mkdir(folder, 0o700)  # there, and empty: its blob is only in a pack
    fired: list = []
    # after atomic_write_json checked the folder, before its temp file: the prune's window
    monkeypatch.setattr(files_mod.tempfile, "mkstemp", racing(files_mod.tempfile.mkstemp, folder, fired))
    remote_vault.write_record(v.root, sha, "s3://bucket/vault", 22, "data/ab/x.pack")
    assert fired
    with open(remote_vault.record_path(v.root, sha), encoding="utf-8") as f:
        assert json.load(f) == {"sha": sha, "url": "s3://bucket/vault", "size": 22, "key": "data/ab/x.pack"}


def test_a_remote_record_dropped_as_its_shard_is_pruned_is_not_an_error(tmp_path, monkeypatch):
    v = vault_in(tmp_path)
    sha = sha_of(b"offloaded, then forgotten")
    remote_vault.write_record(v.root, sha, "s3://bucket/vault", 25, "data/ab/x.pack")
    folder = os.path.dirname(v.blob_path(sha))
    real_unlink = os.unlink

    def unlink_then_prune(p, *a, **kw):
        real_unlink(p, *a, **kw)
        if p == remote_vault.record_path(v.root, sha):
            os.rmdir(folder)  # another process's prune of it, empty now, before the folder's fsync
    monkeypatch.setattr(remote_vault.os, "unlink", unlink_then_prune)
    assert remote_vault.drop_record(v.root, sha) is True
    assert not os.path.lexists(folder)


def test_salvage_links_the_grown_backup_into_a_shard_folder_pruned_meanwhile(tmp_path, monkeypatch):
    monkeypatch.setattr(vault_mod, "PACK_BELOW", 0)  # the backup a plain blob a late writer can grow
    logdir = tmp_path / "logdir"
    with EventWriter(str(logdir / "run"), timestamp=1_700_000_000) as w:
        for s in range(30):
            w.scalar("loss", s, 1.0 / (s + 1))
            w.image("img", s, make_png(32, 32, seed=s), 32, 32)
        path = Path(w.path)
    age(str(logdir))
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    (m,) = [m for m in api.operations(str(logdir)) if m["kind"] == "reduce"]
    (f,) = [f for f in m["files"] if f["path"] == "run/" + path.name]
    blob = Path(m["vault"]) / f["blob"]
    with open(blob, "ab") as w:  # a late writer's records, through its old descriptor
        w.write(b"".join(frame(ev) for ev in late_events()))
    new = sha_of(blob.read_bytes())
    folder = os.path.join(m["vault"], "blobs", new[:2])
    assert new[:2] != f["sha256"][:2] and not os.path.lexists(folder)  # the content is fixed: so are both
    fired: list = []
    monkeypatch.setattr(salvage.os, "link", racing(os.link, folder, fired))
    rec = api.recover_logdir(str(logdir))
    assert [r.code for r in rec] == [Finding.LATE_WRITES_SALVAGED], [(r.code, r.detail) for r in rec]
    assert fired
    assert sha_of(Path(folder, new).read_bytes()) == new  # the grown backup under its new digest
    assert (path.parent / (path.name + ".salvaged-001")).is_file()


def late_events() -> list:
    return [scalar_event("late", 100 + i, float(i), wall=1_700_000_100.0 + i) for i in range(3)]
