"""A backup an older version linked in while its original had other hard links (a ``cp -al`` /
``rsync --link-dest`` snapshot outside the logdir, review R13 F1) is repaired by every start's
upkeep (``recover``): while it still hashes to its name it becomes a copy of its own, fsynced,
and ``status`` stops naming it (``backup_shared``); a write through the other name then changes
no backup. One whose bytes were already changed through the other name is no backup of its
digest: it is named (``backup_damaged``) and left exactly as it is, never "repaired" into a
wrong backup."""
from __future__ import annotations

import hashlib
import os

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Finding, Recovery
from tb_footprint_plugin.engine.vault import Vault


def _hash(p):
    with open(p, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _old_way_link(tmp_path):
    """A reduced run whose profile file's backup is, as an older version left it, the inode of
    a snapshot's name outside the logdir (plain blob, no compacted form). -> (logdir, vault,
    digest, the snapshot's name)."""
    logdir = tmp_path / "logs"
    run = logdir / "run"
    with synth.EventWriter(str(run), timestamp=1_700_000_000) as w:
        for s in range(20):
            w.scalar("loss", s, 1.0 / (s + 1))
    sess = synth.session_name_for(1_700_000_600)
    synth.write_profile_session(str(run), sess, "host", n_events=2000, seed=1)
    prof = run / "plugins" / "profile" / sess / "host.xplane.pb"
    other = tmp_path / "snapshot" / "host.xplane.pb"
    other.parent.mkdir()
    os.link(prof, other)
    for p in list(logdir.rglob("*")) + [logdir]:
        os.utime(p, (1_600_000_000, 1_600_000_000))
    orig = _hash(prof)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0,
                            verify_backends=("python",), vault_format="hardlink")
    assert [o.status for o in rep.outcomes] == ["verified"]
    vault = Vault(str(logdir / ".tb-footprint"))
    blob = vault.blob_path(orig)
    assert vault.blob_form(orig) == "plain" and os.lstat(blob).st_nlink == 1
    os.unlink(blob)
    os.link(other, blob)  # what _put did before review R13 F1
    shared = [p for p in api.status(str(logdir))["problems"] if p["code"] == Finding.BACKUP_SHARED]
    assert len(shared) == 1 and shared[0]["path"] == blob
    return logdir, vault, orig, other


def test_recover_makes_a_shared_backup_a_copy_of_its_own(tmp_path):
    logdir, vault, orig, other = _old_way_link(tmp_path)
    blob = vault.blob_path(orig)
    outs = api.recover_logdir(str(logdir))
    done = [o for o in outs if o.code == Finding.BACKUP_UNSHARED]
    assert len(done) == 1 and done[0].action == Recovery.REPAIRED and blob in done[0].detail
    assert os.lstat(blob).st_nlink == 1 and os.lstat(other).st_nlink == 1
    assert os.lstat(blob).st_ino != os.lstat(other).st_ino
    assert vault.check_blob(orig)
    assert not [p for p in api.status(str(logdir))["problems"] if p["code"] == Finding.BACKUP_SHARED]
    # a write through the snapshot's name now changes no backup: restore gives the original back
    with open(other, "r+b") as f:
        f.write(b"X" * 64)
    assert vault.check_blob(orig)
    assert [o.status for o in api.restore(str(logdir), "run")] == ["restored"]
    back = next((logdir / "run" / "plugins" / "profile").rglob("host.xplane.pb"))
    assert _hash(back) == orig
    # repaired once: a second start has nothing to say about it
    assert not [o for o in api.recover_logdir(str(logdir)) if o.code == Finding.BACKUP_UNSHARED]


def test_a_shared_backup_changed_through_its_other_name_is_named_not_repaired(tmp_path):
    logdir, vault, orig, other = _old_way_link(tmp_path)
    blob = vault.blob_path(orig)
    with open(other, "r+b") as f:
        f.write(b"X" * 64)  # the user wrote the snapshot: the only backup changed with it
    changed = _hash(other)
    outs = api.recover_logdir(str(logdir))
    assert not [o for o in outs if o.code == Finding.BACKUP_UNSHARED]
    bad = [o for o in outs if o.code == Finding.BACKUP_DAMAGED]
    assert len(bad) == 1 and bad[0].action == Recovery.FAILED and blob in bad[0].detail
    # left exactly as it is: still the snapshot's inode, its bytes the user's
    assert os.lstat(blob).st_ino == os.lstat(other).st_ino and _hash(other) == changed
    assert not vault.check_blob(orig)
    codes = {p["code"] for p in api.status(str(logdir))["problems"]}
    assert Finding.BACKUP_SHARED in codes


def test_a_shared_backup_appended_to_is_the_salvages_then_a_copy_of_its_own(tmp_path):
    """Appended through the other name, the shared inode is no longer the original's digest: the
    salvage keeps it whole under its new digest (late writes, as before), and the repair, which
    runs after it, makes that backup a copy of its own: a later write through the snapshot's name
    changes no backup."""
    logdir, vault, orig, other = _old_way_link(tmp_path)
    with open(other, "ab") as f:
        f.write(b"appended by a job resumed in the snapshot")
    outs = api.recover_logdir(str(logdir))
    assert not [o for o in outs if o.code == Finding.BACKUP_DAMAGED], outs
    assert [o.code for o in outs if o.code in (Finding.LATE_WRITES_KEPT, Finding.BACKUP_UNSHARED)] == [
        Finding.LATE_WRITES_KEPT, Finding.BACKUP_UNSHARED]
    assert not [p for p in api.status(str(logdir))["problems"] if p["code"] == Finding.BACKUP_SHARED]
    (m,) = vault.manifests()
    shas = [f["sha256"] for f in m["files"]]
    with open(other, "r+b") as f:
        f.write(b"X" * 64)
    assert all(vault.check_blob(s) for s in shas)
    assert all(os.lstat(vault.blob_path(s)).st_nlink == 1 for s in shas if vault.blob_form(s) == "plain")


def test_the_tab_s_recovery_summary_says_a_backup_was_repaired(tmp_path):
    """The tab's start-up recovery (the plugin's ``Recovery``) counts a repaired backup in its
    summary line, as the CLI's ``recover`` prints it; before, the line said nothing of it."""
    from tb_footprint_plugin.plugin.plugin import Recovery as TabRecovery

    logdir, vault, orig, other = _old_way_link(tmp_path)
    rec = TabRecovery(str(logdir), None, enabled=True)
    rec.start()
    assert rec.done.wait(60)
    assert rec.state == "done", rec.detail
    assert [o["action"] for o in rec.outcomes if o["code"] == Finding.BACKUP_UNSHARED] == [Recovery.REPAIRED]
    assert "1 backup(s) that shared their bytes with a file outside the vault made copies of their own" in rec.detail
