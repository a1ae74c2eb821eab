"""A slim read of the manifests (the restore's release, a batch end's counts) answers what a full
read answers, minus the verification: a disk manifest carrying a bucket's old aliases (``op`` with
``status: restored`` or ``purged: true`` — planted, or a foreign writer's) is neither restored nor
purged to a full read, and was both to the slim one, so restoring another run sharing its backup
freed the blob it still claimed (review R3 F1)."""
import os
import shutil

import pytest

from helpers_runs import aged_small_runs
from tb_footprint_plugin import api
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.paths import state_dir


@pytest.mark.parametrize("alias", ["restored", "purged"])
def test_a_release_keeps_a_blob_a_manifest_with_bucket_aliases_still_claims(tmp_path, monkeypatch, alias):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    logdir = aged_small_runs(str(tmp_path / "logdir"), 1)
    shutil.copytree(os.path.join(logdir, "exp/run000"), os.path.join(logdir, "exp/run001"),
                    copy_function=shutil.copy2)
    api.reduce_logdir(logdir, policy="archive", dry_run=False)
    v = Vault(state_dir(logdir))
    ms = {m["run"]: m for m in v.manifests() if m["kind"] == "reduce"}
    a, b = ms["exp/run000"], ms["exp/run001"]
    shared = {f["sha256"] for f in a["files"]} & {f["sha256"] for f in b["files"]}
    assert shared
    mb = v.read_manifest(b["op_id"])
    mb["op"] = mb["op_id"]
    if alias == "purged":
        mb["purged"] = True
    else:
        mb["status"] = "restored"
    v.write_manifest(mb)
    api.restore(logdir, op=a["op_id"])
    v = Vault(state_dir(logdir))
    full = v.read_manifest(b["op_id"])
    assert not full.get("restored_by") and not full.get("backup_purged")
    assert all(v.has_blob(s) for s in shared)  # B still claims them: its only backup
