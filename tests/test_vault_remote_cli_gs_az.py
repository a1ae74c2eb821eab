"""Issue #27 audit gap 5 (second half): ``tb-footprint reduce --backup-dir gs://…`` and
``az://…`` for a LOCAL logdir, end to end through the real CLI.

``test_cli_round_trip_through_a_bucket`` (test_vault_remote.py) does this for S3 only; the gs and
az offload tests call ``offload.configure`` directly, so the CLI's URL handling, the credentials
the emulators' environment gives a subprocess, and the restore from those buckets never ran. Here,
on the GCS emulator and Azurite: a dry run names the remote vault and writes nothing; the reduce
frees the logdir's disk at once (every local backup is a ``.remote`` note, the bytes are in the
bucket under the vault's prefix); status reports the remote vault; ``restore --all`` gives back
every file byte for byte with its mtime and mode.
"""
import json

import pytest

from helpers_cli import run_cli as cli
from objstore_servers import Bucket
from test_vault_remote import du, local_blobs, make_logdir, snapshot
from tb_footprint_plugin.engine.context import Context


@pytest.mark.parametrize("scheme", ["gs", "az"])
def test_cli_round_trip_through_a_gs_or_az_bucket(tmp_path, objstore_pool, scheme):
    bucket = Bucket(objstore_pool.get(scheme))
    logdir = make_logdir(tmp_path)
    before = snapshot(logdir)
    du_before = du(logdir)
    url = bucket.url("team-vaults")
    assert url.startswith(scheme + "://")

    dry = cli("reduce", logdir, "--backup-dir", url, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr[-2000:]
    notes = json.loads(dry.stdout)["plan"]["notes"]
    assert any(url in n and "remote vault" in n for n in notes), notes
    assert not (logdir / ".tb-footprint").exists()  # a dry run writes no state
    assert bucket.hashes("team-vaults") == {}  # nor anything in the bucket

    p = cli("reduce", logdir, "--backup-dir", url, "--yes", "--json", "--verify", "python")
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    rep = json.loads(p.stdout)
    removed = rep["removed_from_logdir_bytes"]
    assert removed > 0 and rep["remote_vault"]["remote_blobs"] >= 2, rep["remote_vault"]
    # the local disk (logdir + its state, inside it) dropped by what the logdir lost, at once
    assert du(logdir) <= du_before - removed + 512 * 1024, (du(logdir), du_before, removed)
    assert snapshot(logdir) != before
    vault = Context(str(logdir)).vault
    held = local_blobs(vault)
    assert held and all(f == {".remote"} for f in held.values()), held
    # the backups' bytes are in the bucket, under this vault's prefix
    in_bucket = bucket.hashes("team-vaults")
    assert any("/data/" in k for k in in_bucket), sorted(in_bucket)

    st = cli("status", logdir, "--json")
    assert st.returncode == 0, st.stderr[-2000:]
    remote = json.loads(st.stdout)["remote_vault"]
    assert remote["urls"][0].startswith(url + "/tbfp-") and remote["remote_vault_bytes"] > 0, remote

    r = cli("restore", logdir, "--all", "--yes")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    assert snapshot(logdir) == before  # bytes, mtime_ns and mode of every file
