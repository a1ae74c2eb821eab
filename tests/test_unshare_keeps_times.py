"""The copy that makes a shared backup a file of its own (``Vault.unshare``, run by every start's
repair of backups an older version linked in) keeps the blob's mode and times, and the copies a
killed unshare left behind are removed by the next unshare of that blob (review R15 F1, F5).

A backup that grew from late writes carries the time of its last write only in its own mtime,
which a restore gives back (``swap._time_of``): before, the repair's copy took the repair's time
and mode 0600, so the restore gave back the wrong mtime; and a killed repair left a full copy
(``.unshare-*``) that nothing removed or named."""
import os

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Recovery

from test_shared_backup_repair import _old_way_link

T = 1_650_000_000_123_456_789


def test_the_repair_keeps_the_blob_s_mode_and_times(tmp_path):
    logdir, vault, orig, other = _old_way_link(tmp_path)
    blob = vault.blob_path(orig)
    os.chmod(blob, 0o644)
    os.utime(blob, ns=(T, T))
    outs = api.recover_logdir(str(logdir))
    assert [o.action for o in outs if o.code == Finding.BACKUP_UNSHARED] == [Recovery.REPAIRED]
    st = os.lstat(blob)
    assert st.st_nlink == 1 and st.st_ino != os.lstat(other).st_ino
    assert (st.st_mode & 0o7777, st.st_mtime_ns) == (0o644, T)


def test_a_killed_unshare_s_copy_is_removed_by_the_next_one(tmp_path):
    logdir, vault, orig, other = _old_way_link(tmp_path)
    folder = os.path.dirname(vault.blob_path(orig))
    dead = os.path.join(folder, f"{orig}.unshare-999999999-0a0b0c0d")  # no such pid: a killed one
    live = os.path.join(folder, f"{orig}.unshare-{os.getppid()}-01020304")  # a live process's copy
    for p in (dead, live):
        with open(p, "wb") as f:
            f.write(b"partial copy")
    outs = api.recover_logdir(str(logdir))
    assert [o.action for o in outs if o.code == Finding.BACKUP_UNSHARED] == [Recovery.REPAIRED]
    assert not os.path.exists(dead) and os.path.exists(live)
    assert vault.check_blob(orig)
