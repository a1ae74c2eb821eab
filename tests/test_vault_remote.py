"""A local logdir's backups offloaded to a bucket (issue #27 item 3, #26 item 3): the local
transaction is unchanged, then ``engine.offload`` moves each committed backup into a
``BlobStore`` in the bucket, records it, and only then unlinks the local blob.

On moto S3, the GCS emulator and Azurite: the local disk is freed at once, every original comes
back byte-identical with its mtime and mode from the bucket, a corrupted remote blob is refused
with a code naming the object, a kill at each offload step is settled by the next start with no
byte lost, and purge forgets the remote blobs.
"""
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import copy_real
from helpers_cli import run_cli as cli
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import BlobError
from tb_footprint_plugin.engine import faults, offload, remote_vault
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.stores import open_store

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OLD = time.time() - 3600


def du(*paths) -> int:
    out = subprocess.run(["du", "-sc", "--block-size=1", *map(str, paths)], capture_output=True, text=True,
                         check=True).stdout
    return int(out.strip().splitlines()[-1].split()[0])


def snapshot(root: Path) -> dict:
    """rel path -> (sha256, mtime_ns, mode) of every file outside the state folder."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if rel.startswith(".tb-footprint") or not p.is_file() or p.is_symlink():
            continue
        st = p.stat()
        out[rel] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mtime_ns, stat.S_IMODE(st.st_mode))
    return out


def make_logdir(root: Path) -> Path:
    """Two aged runs whose profiles the archive policy removes; one file gets an odd mode."""
    src = copy_real("tf/keras_profiled", root / "src")
    logdir = root / "logdir"
    for run in ("a", "b"):
        shutil.copytree(src / "train", logdir / run, copy_function=shutil.copy2)
        with open(next((logdir / run).rglob("*.xplane.pb")), "ab") as f:
            f.write(f"{run}'s own bytes".encode())  # distinct backups (content-addressed)
    os.chmod(next((logdir / "a").rglob("*.xplane.pb")), 0o640)
    for p in [logdir, *logdir.rglob("*")]:
        os.utime(p, (OLD, OLD), follow_symlinks=False)
    shutil.rmtree(src)
    return logdir


def local_blobs(vault: Vault) -> dict:
    """sha -> local form names under blobs/ (plain, .zst, .remote)."""
    out = {}
    if os.path.isdir(vault.blobs):
        for sub in os.listdir(vault.blobs):
            for n in os.listdir(os.path.join(vault.blobs, sub)):
                out.setdefault(n[:64], set()).add(n[64:] or "plain")
    return out


def reduce_local(logdir: Path):
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    assert rep.ok and all(o.status == "verified" for o in rep.outcomes), [o.to_dict() for o in rep.outcomes]
    return rep


def offload_all(logdir: Path, url: str) -> Vault:
    vault = Context(str(logdir)).vault
    offload.configure(vault, url)
    for m in vault.manifests():
        if m.get("kind") == "reduce":
            got = offload.offload_operation(vault, m["op_id"])
            assert got and all(v in (offload.OFFLOADED, offload.ALREADY_REMOTE) for v in got.values()), got
    return vault


def test_offload_frees_local_disk_and_restores_from_bucket(tmp_path, bucket):
    logdir = make_logdir(tmp_path)
    before = snapshot(logdir)
    rep = reduce_local(logdir)
    removed = rep.removed_from_logdir_bytes
    assert removed > 0
    state = logdir / ".tb-footprint"
    du_compacted = du(logdir)  # logdir + local state (the state folder is inside it)
    vault = offload_all(logdir, bucket.url("vaults"))
    du_offloaded = du(logdir)
    held_locally = sum(os.lstat(os.path.join(r, n)).st_blocks * 512 for r, _d, ns in os.walk(vault.blobs)
                       for n in ns if not n.endswith(".remote"))
    assert held_locally == 0, local_blobs(vault)
    # what the compressed vault still held on the disk is gone now: du of logdir + state is the
    # reduced logdir plus a few blocks of records
    assert du_offloaded < du_compacted, (du_offloaded, du_compacted)
    assert du_offloaded <= du(*[p for p in logdir.iterdir() if p.name != ".tb-footprint"]) + 1024 * 1024
    forms = local_blobs(vault)
    assert forms and all(f == {".remote"} for f in forms.values()), forms
    url = offload.remote_url(vault)
    assert url.startswith(bucket.url("vaults") + "/tbfp-")
    st = offload.remote_stats(vault)
    assert st["blobs"] == len(forms) and st["stored_bytes"] > 0, st
    # status does not take an offloaded backup for a missing one; verify reads it from the bucket
    assert not [p for p in api.status(str(logdir))["problems"] if p["code"] == "backup_damaged"]
    assert all(v["backups_ok"] for v in api.verify(str(logdir), verify_backends=("python",))), \
        "verify re-hashes each backup from the bucket"
    # every original back, byte-identical with mtime and mode, streamed from the bucket
    outs = api.restore(str(logdir))
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    assert snapshot(logdir) == before
    # the backups the restore let go (the originals stand again) went from the bucket too
    released = [m for m in vault.manifests() if m.get("backup_released_by_restore")]
    assert len(released) == 2, [(m["op_id"], m.get("backup_purged")) for m in vault.manifests()]
    assert not local_blobs(vault) and remote_vault.blobstore(url, fresh=True).stats()["blobs"] == 0


def test_corrupted_remote_blob_is_refused_naming_it(tmp_path, bucket):
    logdir = make_logdir(tmp_path)
    reduce_local(logdir)
    vault = offload_all(logdir, bucket.url("v"))
    url = offload.remote_url(vault)
    store = open_store(url)
    data_keys = [e.key for e in store.list("data")]
    assert data_keys
    for k in data_keys:  # flip a byte in every data object
        b = bytearray(store.read_all(k))
        b[len(b) // 2] ^= 0xFF
        store.delete([k])
        store.put(k, bytes(b))
    remote_vault._stores.clear()
    reduced = snapshot(logdir)
    sha = next(iter(local_blobs(vault)))
    err = remote_vault.check_remote(vault.root, sha)
    assert err is not None and err.code == BlobError.CORRUPT and url in err.key, err
    assert not vault.check_blob(sha)
    outcomes = api.restore(str(logdir))
    assert outcomes and all(o.status == "failed" for o in outcomes), [o.to_dict() for o in outcomes]
    assert all(o.code == "backup_damaged" for o in outcomes), [o.to_dict() for o in outcomes]
    assert all(url + "/data/" in o.reason and "[blob_corrupt]" in o.reason for o in outcomes), \
        [o.reason for o in outcomes]  # the object named, with the store's code
    assert snapshot(logdir) == reduced  # nothing in the logdir overwritten
    # the restore path itself (no pre-check) raises a coded error naming the object, writes nothing
    dest = tmp_path / "x" / "f"
    with pytest.raises(remote_vault.RemoteReadError) as e:
        vault.restore_blob(sha, str(dest))
    assert e.value.code == BlobError.CORRUPT and url in str(e.value) and str(dest) in str(e.value)
    assert not dest.parent.exists() or not list(dest.parent.iterdir())


KILL_SCRIPT = """
import sys
from tb_footprint_plugin.engine import offload
from tb_footprint_plugin.engine.context import Context
vault = Context(sys.argv[1]).vault
for op_id in sys.argv[2:]:
    offload.offload_operation(vault, op_id)
"""


@pytest.fixture
def one_zst_a_blob(monkeypatch):
    """No packs (issue #27 item 2): a test that reads the offload's steps off the blob files
    (plain, ``.zst``, ``.remote``) keeps each backup a file; offloading packed backups is tested
    in test_vault_packs.py."""
    from tb_footprint_plugin.engine import vault as vault_mod

    monkeypatch.setattr(vault_mod, "PACK_BELOW", 0)


@pytest.mark.usefixtures("one_zst_a_blob")
@pytest.mark.parametrize("step", ["offload.note", "offload.uploaded", "offload.recorded", "offload.unlinked"])
def test_sigkill_at_each_offload_step_is_settled_by_the_next_start(tmp_path, bucket, step):
    logdir = make_logdir(tmp_path)
    before = snapshot(logdir)
    reduce_local(logdir)
    vault = Context(str(logdir)).vault
    offload.configure(vault, bucket.url("k"))
    ops = [m["op_id"] for m in vault.manifests() if m.get("kind") == "reduce"]
    shas = {f["sha256"] for m in vault.manifests() for f in m["files"]}
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TB_FOOTPRINT_FAILPOINTS=f"{step}=kill")
    p = subprocess.run([sys.executable, "-c", KILL_SCRIPT, str(logdir), *ops], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr[-2000:])
    forms = local_blobs(vault)
    # no byte lost at the instant of the kill: every backup is local, or recorded remote (and
    # then verified in the store), and a local form went only after its record
    for sha in shas:
        got = forms.get(sha, set())
        assert got - {".remote"} or ".remote" in got, (sha, got)
        if step in ("offload.note", "offload.uploaded"):
            assert got - {".remote"}, (step, sha, got)  # not recorded yet: still local
        if ".remote" in got and not got - {".remote"}:
            assert remote_vault.check_remote(vault.root, sha) is None
    assert offload.pending_offloads(vault)  # the note names what is left to do
    assert api.status(str(logdir))["remote_vault"]["offloads_pending"] >= 1  # and status says so
    # the next start finishes it: every backup only in the bucket, the note gone
    remote_vault._stores.clear()
    outs = api.recover_logdir(str(logdir))
    assert any(o.code == "offload_finished" for o in outs), [vars(o) for o in outs]
    forms = local_blobs(vault)
    assert all(forms.get(sha) == {".remote"} for sha in shas), forms
    assert not offload.pending_offloads(vault)
    outs = api.restore(str(logdir))
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    assert snapshot(logdir) == before


def test_purge_forgets_remote_blobs_after_the_manifests(tmp_path, bucket):
    logdir = make_logdir(tmp_path)
    reduce_local(logdir)
    vault = offload_all(logdir, bucket.url("p"))
    shas = set(local_blobs(vault))
    url = offload.remote_url(vault)
    bs = remote_vault.blobstore(url, fresh=True)
    assert all(bs.has(s) for s in shas)
    pr = api.purge(str(logdir), yes=True)
    assert len(pr.ops) == 2 and not pr.kept, pr.to_dict()
    assert all(m.get("backup_purged") for m in vault.manifests())
    bs = remote_vault.blobstore(url, fresh=True)
    assert not any(bs.has(s) for s in shas)
    assert bs.stats()["blobs"] == 0
    assert not local_blobs(vault)  # the records went with them
    assert not [e for e in open_store(url).list("data")]  # lone objects and packs deleted


PURGE_SCRIPT = """
import sys
from tb_footprint_plugin import api
api.purge(sys.argv[1], yes=True)
"""


def test_purge_killed_after_the_marks_forgets_at_the_next_start(tmp_path, s3_bucket):
    logdir = make_logdir(tmp_path)
    reduce_local(logdir)
    vault = offload_all(logdir, s3_bucket.url("q"))
    shas = set(local_blobs(vault))
    url = offload.remote_url(vault)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TB_FOOTPRINT_FAILPOINTS="purge.marked=kill")
    p = subprocess.run([sys.executable, "-c", PURGE_SCRIPT, str(logdir)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr[-2000:])
    assert all(remote_vault.blobstore(url, fresh=True).has(s) for s in shas)  # not forgotten yet
    outs = api.recover_logdir(str(logdir))
    assert any(o.code == "purge_finished" for o in outs), [vars(o) for o in outs]
    bs = remote_vault.blobstore(url, fresh=True)
    assert not any(bs.has(s) for s in shas) and not local_blobs(vault)


def test_restore_from_an_archived_object_is_a_coded_failure_naming_it(tmp_path, s3_bucket):
    """S3 refuses to read a GLACIER object until it is restored: the run's restore is refused
    before anything is written, with a code, and the object and the store's code are named."""
    import boto3

    logdir = make_logdir(tmp_path)
    reduce_local(logdir)
    vault = offload_all(logdir, s3_bucket.url("g"))
    url = offload.remote_url(vault)
    s3 = boto3.client("s3", endpoint_url=s3_bucket.server.endpoint)
    prefix = url.split("/", 3)[3] + "/data/"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=s3_bucket.name, Prefix=prefix)["Contents"]]
    for k in keys:  # what the lifecycle rule does after its grace period
        s3.copy_object(Bucket=s3_bucket.name, Key=k, CopySource={"Bucket": s3_bucket.name, "Key": k},
                       StorageClass="GLACIER")
    remote_vault._stores.clear()
    reduced = snapshot(logdir)
    outs = api.restore(str(logdir))
    # not damaged, only not served: the store's refusal, named with the object
    assert outs and all(o.status == "failed" and o.code == "archived" for o in outs), \
        [o.to_dict() for o in outs]
    assert snapshot(logdir) == reduced
    sha = next(iter(local_blobs(vault)))
    err = remote_vault.last_failure(vault.root, sha)
    assert err is not None and err.code == "archived", err  # R24 F8: no longer said permission_denied
    assert err.key.startswith(url + "/data/") and "storage class" in str(err)
    assert any(url + "/data/" in o.reason and "[archived]" in o.reason for o in outs), \
        [o.reason for o in outs]


def test_vault_lifecycle_rule_for_each_store(tmp_path):
    for url, key in (("s3://bkt/vaults/tbfp-0123456789abcdef", "Rules"), ("gs://bkt/tbfp-0123456789abcdef", "rule"),
                     ("az://cont/v/tbfp-0123456789abcdef", "rules")):
        r = offload.lifecycle_rule(url, 30)
        doc = json.loads(json.dumps(r["rule"]))
        assert key in doc
        text = json.dumps(doc)
        assert "/data/" in text and "index" not in text
        if url.startswith("s3"):
            rule = doc["Rules"][0]
            assert rule["Filter"]["Prefix"] == "vaults/tbfp-0123456789abcdef/data/"
            assert [t["StorageClass"] for t in rule["Transitions"]] == ["STANDARD_IA", "GLACIER"]
            assert rule["Transitions"][0]["Days"] == 30
        elif url.startswith("gs"):
            assert all(x["condition"]["matchesPrefix"] == ["tbfp-0123456789abcdef/data/"] for x in doc["rule"])
        else:
            f = doc["rules"][0]["definition"]["filters"]
            assert f["prefixMatch"] == ["cont/v/tbfp-0123456789abcdef/data/"]
    # S3 refuses STANDARD_IA before 30 days: a shorter grace goes straight to GLACIER
    assert [t["StorageClass"] for t in offload.lifecycle_rule("s3://b/x", 7)["rule"]["Rules"][0]["Transitions"]] \
        == ["GLACIER"]
    with pytest.raises(offload.OffloadError):
        offload.lifecycle_rule("/local/path", 30)


def test_cli_round_trip_through_a_bucket(tmp_path, s3_bucket):
    """The real `tb-footprint`: reduce with --backup-dir s3://…, status and the lifecycle rule
    without repeating it, restore byte-identical from the bucket."""
    logdir = make_logdir(tmp_path)
    before = snapshot(logdir)
    du_before = du(logdir)
    url = s3_bucket.url("team-vaults")
    dry = cli("reduce", logdir, "--backup-dir", url, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr[-2000:]
    notes = json.loads(dry.stdout)["plan"]["notes"]
    assert any(url in n and "remote vault" in n for n in notes), notes
    assert not (logdir / ".tb-footprint").exists()  # a dry run writes no state
    p = cli("reduce", logdir, "--backup-dir", url, "--yes", "--json", "--verify", "python")
    assert p.returncode == 0, p.stderr[-2000:]
    rep = json.loads(p.stdout)
    removed = rep["removed_from_logdir_bytes"]
    assert removed > 0 and rep["remote_vault"]["remote_blobs"] >= 2, rep["remote_vault"]
    # the local disk (logdir + its state, inside it) dropped by what the logdir lost, at once
    assert du(logdir) <= du_before - removed + 512 * 1024, (du(logdir), du_before, removed)
    assert rep["disk_in_use_after_bytes"] <= rep["disk_in_use_before_bytes"] - removed + 512 * 1024
    vault = Context(str(logdir)).vault
    assert all(f == {".remote"} for f in local_blobs(vault).values())
    st = cli("status", logdir, "--json")
    assert st.returncode == 0, st.stderr[-2000:]
    remote = json.loads(st.stdout)["remote_vault"]
    assert remote["urls"][0].startswith(url + "/tbfp-") and remote["remote_vault_bytes"] > 0, remote
    text = cli("status", logdir).stdout
    assert "in the remote vault (not on this disk)" in text and remote["urls"][0] in text, text
    lc = cli("vault", "lifecycle", logdir, "--days", "45")
    assert lc.returncode == 0, lc.stderr[-2000:]
    rule = json.loads(lc.stdout)["Rules"][0]
    assert rule["Filter"]["Prefix"] == remote["urls"][0].split("/", 3)[3] + "/data/"
    assert rule["Transitions"][0] == {"Days": 45, "StorageClass": "STANDARD_IA"}
    lc = cli("vault", "lifecycle", "--backup-dir", url, "--json")  # the URL alone: the vaults under it
    assert lc.returncode == 0 and json.loads(lc.stdout)["prefixes"] == [rule["Filter"]["Prefix"]], lc.stderr
    r = cli("restore", logdir, "--all", "--yes")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    assert snapshot(logdir) == before


@pytest.mark.parametrize("store_dedupes_blindly", [False, True])
def test_a_damaged_copy_the_store_already_holds_never_replaces_the_local_backup(tmp_path, s3_bucket, monkeypatch,
                                                                                 store_dedupes_blindly):
    """A digest the store lists already: the local backup goes only once a copy in the bucket
    reads back and hashes — the store stores it again (its add re-checks old copies), and even a
    store that trusted its index (``store_dedupes_blindly``) cannot make the offload drop the
    local backup for a damaged copy: the offload checks that copy itself."""
    from tb_footprint_plugin.storage.blobstore import BlobSource, BlobStore

    vault = Vault(str(tmp_path / "state" / ".tb-footprint"))
    vault.ensure()
    src = tmp_path / "orig.bin"
    src.write_bytes(os.urandom(300_000))
    sha = hashlib.sha256(src.read_bytes()).hexdigest()
    url = offload.configure(vault, s3_bucket.url("d"))
    remote_vault.blobstore(url).add([BlobSource(sha=sha, size=300_000, open=lambda: open(src, "rb"))])
    store = open_store(url)
    for e in list(store.list("data")):
        b = bytearray(store.read_all(e.key))
        b[-10] ^= 0xFF
        store.delete([e.key])
        store.put(e.key, bytes(b))
    copy = tmp_path / "copy.bin"
    shutil.copy2(src, copy)  # a file of its own: no live file shares the backup's inode
    vault.store(str(copy), sha)
    os.unlink(copy)
    remote_vault._stores.clear()
    op_id = "20260101T000000-abcdef"
    if store_dedupes_blindly:
        monkeypatch.setattr(BlobStore, "add", lambda self, items: [self.ref(i.sha) for i in items])
    offload.note_offload(vault, op_id, [sha])
    got = offload.offload_blobs(vault, op_id, url, {sha: 300_000})
    if store_dedupes_blindly:
        assert got == {sha: offload.KEPT_REMOTE_BAD}, got
        assert vault.local_form(sha) == "plain" and vault.check_blob(sha)
        assert remote_vault.read_record(vault.root, sha) is None
    elif got == {sha: offload.OFFLOADED}:  # the store stored it anew
        assert vault.local_form(sha) is None
        assert remote_vault.check_remote(vault.root, sha) is None  # a copy that verifies stands for it
    else:  # a store that hands back its old copy: the offload's own check kept the local backup
        assert got == {sha: offload.KEPT_REMOTE_BAD}, got
        assert vault.local_form(sha) == "plain" and vault.check_blob(sha)


def test_records_are_untrusted_forget_touches_only_this_vaults_stores(tmp_path, s3_bucket):
    """A record naming a store this vault never offloaded to is never pruned there; a URL
    given again keeps its prefix, and one given after another keeps both known."""
    from tb_footprint_plugin.storage.blobstore import BlobSource

    vault = Vault(str(tmp_path / "state" / ".tb-footprint"))
    vault.ensure()
    first = offload.configure(vault, s3_bucket.url("one"))
    assert offload.configure(vault, s3_bucket.url("one") + "/") == first
    second = offload.configure(vault, s3_bucket.url("two"))
    assert second != first and remote_vault.known_urls(vault.root) == [second, first]
    assert offload.configure(vault, s3_bucket.url("one")) == first  # its old prefix, not a new one
    other = s3_bucket.url("someone-else/tbfp-0000000000000000")
    data = os.urandom(1000)
    sha = hashlib.sha256(data).hexdigest()
    src = tmp_path / "x"
    src.write_bytes(data)
    remote_vault.blobstore(other).add([BlobSource(sha=sha, size=1000, open=lambda: open(src, "rb"))])
    os.makedirs(os.path.join(vault.blobs, sha[:2]), mode=0o700)
    remote_vault.write_record(vault.root, sha, other, 1000, "data/x")  # a record naming another store
    assert remote_vault.read_record(vault.root, sha) is None  # never read from either
    assert offload.forget_remote(vault, [sha]) == 0
    assert remote_vault.blobstore(other, fresh=True).has(sha)
    assert remote_vault.has_record(vault.root, sha)  # left as it is, for someone to look at


@pytest.mark.usefixtures("one_zst_a_blob")
def test_a_plain_blob_holding_late_records_is_never_unlinked_by_the_offload(tmp_path, s3_bucket):
    """Beside a compacted backup, a plain blob that does not hash to its name may hold a late
    writer's records (salvage's): the offload moves the verified backup and leaves those bytes."""
    logdir = make_logdir(tmp_path)
    reduce_local(logdir)
    vault = Context(str(logdir)).vault
    m = next(m for m in vault.manifests() if m.get("kind") == "reduce")
    f = next(f for f in m["files"] if vault.blob_form(f["sha256"]) == "zst")
    sha = f["sha256"]
    with vault.open_blob(sha) as src:
        original = src.read()
    late = original + b"records a late writer appended"
    with open(vault.blob_path(sha), "wb") as out:
        out.write(late)
    offload.configure(vault, s3_bucket.url("late"))
    got = offload.offload_operation(vault, m["op_id"])
    assert got[sha] == offload.KEPT_DAMAGED, got
    assert remote_vault.read_record(vault.root, sha) is not None  # the verified backup is in the bucket
    assert open(vault.blob_path(sha), "rb").read() == late  # and the late bytes are where they were
    with remote_vault.open_remote(vault.root, sha) as r:
        assert r.read() == original


def test_a_store_failing_during_purge_is_named_and_finished_by_the_next_start(tmp_path, s3_bucket, monkeypatch):
    from tb_footprint_plugin.codes import BlobError
    from tb_footprint_plugin.storage.blobstore import BlobFailure, BlobStore

    logdir = make_logdir(tmp_path)
    reduce_local(logdir)
    vault = offload_all(logdir, s3_bucket.url("f"))
    shas = set(local_blobs(vault))
    url = offload.remote_url(vault)

    def down(self, shas, **kw):
        raise BlobFailure(BlobError.STORE, "connection refused (injected)")

    with monkeypatch.context() as mp:
        mp.setattr(BlobStore, "forget", down)
        with pytest.raises(OSError) as e:  # an error the CLI prints, never a traceback
            api.purge(str(logdir), yes=True)
    assert url in str(e.value) and "next start" in str(e.value)
    assert all(remote_vault.blobstore(url, fresh=True).has(s) for s in shas)
    outs = api.recover_logdir(str(logdir))
    assert any(o.code == "purge_finished" for o in outs), [vars(o) for o in outs]
    assert not any(remote_vault.blobstore(url, fresh=True).has(s) for s in shas) and not local_blobs(vault)


def test_a_damaged_index_object_keeps_the_purge_unfinished_until_it_is_removed(tmp_path, s3_bucket):
    """The blob store deletes nothing while one of its index objects is damaged: the purge then
    says so, naming the object, and stays unfinished (its intent kept) instead of logging the
    backups purged while their copies stay billed in the bucket; once the damaged object is gone
    the next start finishes it."""
    logdir = make_logdir(tmp_path)
    reduce_local(logdir)
    vault = offload_all(logdir, s3_bucket.url("f"))
    shas = set(local_blobs(vault))
    url = offload.remote_url(vault)
    bad = url.split("://", 1)[1] + "/index/" + "7" * 32 + ".json"
    s3_bucket.fs.pipe_file(bad, b"{ not json")
    with pytest.raises(OSError) as e:
        api.purge(str(logdir), yes=True)
    assert "7" * 32 in str(e.value) and "next start" in str(e.value), str(e.value)
    assert all(remote_vault.blobstore(url, fresh=True).has(s) for s in shas)
    assert all(remote_vault.has_record(vault.root, s) for s in shas)
    s3_bucket.fs.rm(bad)
    outs = api.recover_logdir(str(logdir))
    assert any(o.code == "purge_finished" for o in outs), [vars(o) for o in outs]
    assert not any(remote_vault.blobstore(url, fresh=True).has(s) for s in shas)
    assert not any(remote_vault.has_record(vault.root, s) for s in shas)


def test_hardlink_vault_format_offloads_the_plain_backups(tmp_path, s3_bucket):
    """No compaction (``vault_format="hardlink"``): the plain backups, whose originals left the
    logdir, go to the bucket after the writer check compaction makes."""
    logdir = make_logdir(tmp_path)
    before = snapshot(logdir)
    rep = api.reduce_logdir(str(logdir), backup_dir=s3_bucket.url("h"), policy="archive", dry_run=False,
                            verify_backends=("python",), vault_format="hardlink")
    assert rep.ok and rep.remote_vault["remote_blobs"] >= 2, rep.remote_vault
    vault = Context(str(logdir)).vault
    assert all(f == {".remote"} for f in local_blobs(vault).values()), local_blobs(vault)
    assert all(o.status == "restored" for o in api.restore(str(logdir)))
    assert snapshot(logdir) == before


def test_cli_reduce_killed_mid_offload_is_settled_by_recover(tmp_path, s3_bucket):
    """A real `tb-footprint reduce --backup-dir s3://…` SIGKILLed after the first run's upload,
    before its records: `recover` finishes that offload, nothing is lost, restore is exact."""
    logdir = make_logdir(tmp_path)
    before = snapshot(logdir)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TB_FOOTPRINT_FAILPOINTS="offload.uploaded=kill")
    p = subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", "reduce", str(logdir), "--backup-dir",
                        s3_bucket.url("cli-kill"), "--yes", "--verify", "python"], env=env,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr[-2000:])
    vault = Context(str(logdir)).vault
    assert local_blobs(vault) and all(f - {".remote"} for f in local_blobs(vault).values())  # all still local
    r = cli("recover", logdir)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    assert all(f == {".remote"} for f in local_blobs(vault).values()), local_blobs(vault)
    r = cli("restore", logdir, "--all", "--yes")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    assert snapshot(logdir) == before


def test_a_forget_rechecks_under_the_lock_what_an_offload_made_needed(tmp_path, s3_bucket):
    """Purge computes what it may forget, then an operation commits a backup of the same bytes
    and offloads it (the store already held them): the forget, which rereads what is needed
    under the lock offloads share, leaves that blob in the store."""
    logdir = make_logdir(tmp_path)
    reduce_local(logdir)
    vault = offload_all(logdir, s3_bucket.url("race"))
    sha = next(iter(local_blobs(vault)))
    url = offload.remote_url(vault)
    needed = set()  # what another operation's manifest claims by the time the forget runs
    n = offload.forget_remote(vault, [sha], lambda: needed | {sha})
    assert n == 0 and remote_vault.blobstore(url, fresh=True).has(sha)
    assert remote_vault.read_record(vault.root, sha) is not None
    assert offload.forget_remote(vault, [sha], lambda: set()) == 1
    assert not remote_vault.blobstore(url, fresh=True).has(sha)


def test_purge_of_a_vault_that_never_offloaded_makes_no_offload_state(tmp_path):
    logdir = make_logdir(tmp_path)
    reduce_local(logdir)
    assert api.purge(str(logdir), yes=True).freed_bytes > 0
    assert not (logdir / ".tb-footprint" / "offload").exists()
    assert not (logdir / ".tb-footprint" / "remote.json").exists()


def test_retire_of_a_local_logdir_into_a_bucket_is_refused_by_name(tmp_path):
    logdir = make_logdir(tmp_path)
    before = snapshot(logdir)
    rule = api.retire_rule(runs=["a"])
    with pytest.raises(ValueError, match="s3://some-bucket/v"):
        api.retire(str(logdir), rule, dry_run=False, backup_dir="s3://some-bucket/v")
    with pytest.raises(ValueError, match="not supported"):
        api.retire_plan(str(logdir), rule, backup_dir="s3://some-bucket/v")
    assert snapshot(logdir) == before


def test_a_copy_forgotten_by_another_process_is_indexed_anew_when_backed_up_again(tmp_path, s3_bucket):
    """A long-lived process (the tab) caches the store's index; another process purges digest X
    (its bytes stay in a pack other live blobs keep). Backed up again here, X must be uploaded
    (or at least indexed) anew, never matched to the forgotten copy the next prune deletes."""
    from tb_footprint_plugin.storage.blobstore import BlobStore

    vault = Vault(str(tmp_path / "state" / ".tb-footprint"))
    vault.ensure()
    url = offload.configure(vault, s3_bucket.url("stale"))

    def backup(data: bytes) -> str:
        p = tmp_path / "f"
        p.write_bytes(data)
        sha = hashlib.sha256(data).hexdigest()
        vault.store(str(p), sha)
        os.unlink(p)
        return sha

    blobs = [bytes([65 + i]) * 30_000 + os.urandom(3000) for i in range(4)]
    sizes = {backup(d): len(d) for d in blobs}
    assert set(offload.offload_blobs(vault, "20260101T000000-aaaaaa", url, sizes).values()) == {offload.OFFLOADED}
    sx = hashlib.sha256(blobs[0]).hexdigest()
    cached = dict(remote_vault._stores)
    remote_vault._stores.clear()  # another process
    assert offload.forget_remote(vault, [sx]) == 1
    remote_vault._stores.clear()
    remote_vault._stores.update(cached)  # back in the long-lived process, its index now stale
    backup(blobs[0])
    got = offload.offload_blobs(vault, "20260101T000001-bbbbbb", url, {sx: len(blobs[0])})
    assert got == {sx: offload.OFFLOADED}, got
    assert BlobStore(open_store(url)).has(sx)  # a fresh reader's index lists it
    others = [s for s in sizes if s != sx]
    BlobStore(open_store(url)).forget(others[:2], grace_seconds=0)  # the next prune, with repacking
    remote_vault._stores.clear()
    assert remote_vault.check_remote(vault.root, sx) is None


def test_a_salvaged_backups_own_mtime_survives_the_offload(tmp_path, s3_bucket):
    """A backup that grew by late writes is restored with the blob's own mtime (its writer's last
    write); the bucket keeps no file times, so the offload keeps it in the blob's record."""
    vault = Vault(str(tmp_path / "state" / ".tb-footprint"))
    vault.ensure()
    url = offload.configure(vault, s3_bucket.url("mt"))
    data = os.urandom(700_000)
    sha = hashlib.sha256(data).hexdigest()
    p = tmp_path / "f"
    p.write_bytes(data)
    vault.store(str(p), sha)
    os.unlink(p)
    last_write = 1_790_000_000_123_456_789
    os.utime(vault.blob_path(sha), ns=(last_write, last_write))
    assert offload.offload_blobs(vault, "20260101T000000-cccccc", url, {sha: len(data)}) == {sha: offload.OFFLOADED}
    assert vault.local_form(sha) is None
    assert vault.blob_mtime_ns(sha) == last_write


def test_two_reduces_configuring_at_once_agree_on_one_prefix(tmp_path, s3_bucket, monkeypatch):
    """Two processes (shards) starting at once with the same --backup-dir: the second reads the
    config again under the lock and takes the first one's prefix (else the last write of
    remote.json would drop the other's, whose records then name a store this vault disowns)."""
    import threading

    vault = Vault(str(tmp_path / "state" / ".tb-footprint"))
    vault.ensure()
    real = remote_vault.set_configured_url
    first = threading.Event()

    def slow(root, url):
        if not first.is_set():
            first.set()
            time.sleep(0.5)  # the first writer is slow; the second arrives meanwhile
        real(root, url)

    monkeypatch.setattr(remote_vault, "set_configured_url", slow)
    got = []
    t1 = threading.Thread(target=lambda: got.append(offload.configure(vault, s3_bucket.url("shards"))))
    t1.start()
    first.wait(60)
    got.append(offload.configure(Vault(vault.root), s3_bucket.url("shards")))
    t1.join(60)  # its requests to the store: a loaded CI is slow
    assert len(got) == 2 and got[0] == got[1], got
    assert remote_vault.known_urls(vault.root) == [got[0]]
