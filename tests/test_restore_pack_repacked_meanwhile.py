"""A purge's repack under a restore's read (review R11 F5, ``packrace.py inside``).

Another process purges a run whose packed backups share packs with the run being restored: its
``forget`` writes the survivors into a new pack, writes the new index and deletes the old pack.
A restore that looked the blob up before (its cached index names the old pack) and opens it
after used to fail ``backup_damaged`` ("not_found … [blob_missing]; nothing was changed") though
nothing was lost. The blob store now lists its index again once when a pack it names is gone.
"""
import hashlib
import os
import subprocess
import sys

from helpers_cli import cli_env

from tb_footprint_plugin import api
from tb_footprint_plugin import synth as sp
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine import remote_vault
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.paths import state_dir

DROP_PROFILES = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}
PURGE = "import sys; from tb_footprint_plugin import api; api.purge(sys.argv[1], yes=True, runs=['r0'])"


def test_a_restore_reading_a_pack_a_purge_repacked_meanwhile_reads_the_new_pack(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = str(tmp_path / "logdir")
    for i, run in enumerate(("r0", "r1")):
        with sp.EventWriter(os.path.join(root, run)) as w:
            for step in range(5):
                w.scalar("loss", step, 1.0 / (step + 1))
        session = os.path.join(root, run, "plugins", "profile", "2026_01_01_00_00_00")
        os.makedirs(session)
        for k in range(3):
            sp.write_xplane(os.path.join(session, f"host{k}.xplane.pb"), 20 + k, seed=i * 10 + k)
    sp.age(root)
    # one reduce of both runs: their small backups share packs
    rep = api.reduce_logdir(root, policy=DROP_PROFILES, dry_run=False, vault_format="compressed")
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED] * 2
    vault = Vault(state_dir(root))
    (m1,) = [m for m in vault.manifests() if m["run"] == "r1"]
    assert all(vault.blob_form(f["sha256"]) == "packed" for f in m1["files"])
    before = {f["path"]: f["sha256"] for f in m1["files"]}
    done = []
    real = remote_vault.open_packed

    def racing(vault_root, sha, ref=None):
        if ref is None:
            ref = remote_vault.packed_ref(vault_root, sha)  # looked up: the old pack
        if not done:  # another process purges r0 now: the shared pack is repacked and deleted
            p = subprocess.run([sys.executable, "-c", PURGE, root], env=cli_env(XDG_CACHE_HOME=str(tmp_path / "cache")),
                               capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, p.stderr
            done.append(ref.key)
            assert not os.path.exists(os.path.join(remote_vault.packs_root(vault_root), ref.key))
        return real(vault_root, sha, ref)
    monkeypatch.setattr(remote_vault, "open_packed", racing)
    outs = api.restore(root, run="r1")
    assert done
    assert [(o.status, o.code) for o in outs] == [(Outcome.RESTORED, None)], [o.reason for o in outs]
    for path, sha in before.items():  # was: failed, backup_damaged [blob_missing]
        with open(os.path.join(root, path), "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == sha
