"""Review R13 F1: an original with other hard links (a ``cp -al`` / ``rsync --link-dest``
snapshot outside the logdir) is backed up as a copy of its own, not as a link of the shared
inode: a later write through the snapshot's name, in place or appended, changes neither the
backup nor what restore puts back. The copy is compacted like any other backup. A backup made
the old way (a blob that still shares its inode with a name outside the vault) is named by
``status`` (``backup_shared``)."""
from __future__ import annotations

import hashlib
import os
import shutil

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine.vault import Vault


def _hash(p):
    with open(p, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _logdir_with_snapshot(tmp_path):
    """A run with a profile file, and a hard-linked snapshot of that file outside the logdir."""
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
    os.link(prof, other)  # what `cp -al logs snapshot` makes of it
    for p in list(logdir.rglob("*")) + [logdir]:
        os.utime(p, (1_600_000_000, 1_600_000_000))
    return logdir, prof, other


def _reduce(logdir):
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0,
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == ["verified"]


@pytest.mark.parametrize("mode", ["overwrite", "append"])
def test_a_write_through_the_other_name_changes_no_backup(tmp_path, mode):
    logdir, prof, other = _logdir_with_snapshot(tmp_path)
    orig = _hash(prof)
    _reduce(logdir)
    assert not prof.exists()
    vault = Vault(str(logdir / ".tb-footprint"))
    assert os.lstat(other).st_nlink == 1  # the snapshot's name alone holds its inode now
    assert vault.blob_form(orig) in ("zst", "packed")  # the copy was compacted like any other
    with open(other, "r+b" if mode == "overwrite" else "ab") as f:
        f.write(b"X" * 64 if mode == "overwrite" else b"appended by a job resumed in the snapshot")
    assert vault.check_blob(orig)
    assert not [p for p in api.status(str(logdir))["problems"] if p["code"] != Finding.ORPHAN_BLOBS]
    outs = api.restore(str(logdir), "run")
    assert [o.status for o in outs] == ["restored"]
    assert _hash(prof) == orig  # byte for byte; no foreign byte taken for a late write
    assert os.lstat(prof).st_ino != os.lstat(other).st_ino


def test_a_link_made_the_old_way_is_named_by_status(tmp_path):
    logdir, prof, other = _logdir_with_snapshot(tmp_path)
    orig = _hash(prof)
    _reduce(logdir)
    vault = Vault(str(logdir / ".tb-footprint"))
    # what an older version left: the plain blob is the snapshot's inode, no compacted form
    assert vault.blob_form(orig) in ("zst", "packed")
    blob = vault.blob_path(orig)
    os.makedirs(os.path.dirname(blob), exist_ok=True)
    os.link(other, blob)
    if os.path.lexists(vault.zst_path(orig)):
        os.unlink(vault.zst_path(orig))
    else:
        shutil.rmtree(os.path.join(vault.root, "packs"))
    found = [p for p in api.status(str(logdir))["problems"] if p["code"] == Finding.BACKUP_SHARED]
    assert len(found) == 1 and found[0]["path"] == blob and "host.xplane.pb" in found[0]["detail"]
