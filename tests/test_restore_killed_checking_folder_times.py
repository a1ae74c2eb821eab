"""Review R18 P2: a disk restore of big remote backups (a vault offloaded to a bucket) streams each
into a temporary beside its target while checking it; killed then, before its ``verified`` record,
the next start undoes it (removes the temporaries, puts nothing back). The folders the temporaries
stood in kept the times their making and removal gave them, where a cancel at the same point gives
them back (``Prepared.abandon``). The restore's begin record now keeps those folders' times
(``dir_times``) and recovery gives them back: the run is exactly as it was, folders included."""
import os

import pytest

from test_remote_restore_streamed import temps_in
from test_restore_remote_one_download import dir_times, two_big_backups
from test_vault_remote import snapshot
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import remote_vault, restore as restore_mod, restore_staged
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.storage.files import hash_and_count

pytestmark = pytest.mark.usefixtures("disarm_faults")


class Killed(BaseException):
    """A SIGKILL at that instant: nothing after it runs."""


def test_recovery_of_a_restore_killed_while_checking_gives_the_folders_their_times_back(tmp_path, s3_bucket,
                                                                                       monkeypatch):
    logdir, vault, m, bigs = two_big_backups(tmp_path, s3_bucket, monkeypatch)
    remote_vault._stores.clear()
    files_before, dirs_before = snapshot(logdir), dir_times(logdir)
    calls = []

    def killed_in_the_second_download(src, out=None):
        calls.append(1)
        if len(calls) == 2:
            out.write(src.read(64 << 10))  # part of it written
            raise Killed()
        return hash_and_count(src, out)

    monkeypatch.setattr(restore_staged, "hash_and_count", killed_in_the_second_download)
    monkeypatch.setattr(restore_staged.Prepared, "abandon", lambda self: None)  # a kill cleans nothing up
    monkeypatch.setattr(restore_staged.Prepared, "discard", lambda self: [])
    ctx = Context(str(logdir))
    with pytest.raises(Killed):
        restore_mod.restore_op(ctx, m)
    temps = temps_in(logdir)
    assert len(temps) == 2, temps
    folders = {os.path.relpath(p.parent, logdir) for p in temps}
    assert any(dir_times(logdir)[f] != dirs_before[f] for f in folders)  # the temporaries' making changed them
    monkeypatch.undo()
    monkeypatch.setattr(remote_vault, "STAGE_BYTES", 256 << 10)
    rec = api.recover_logdir(str(logdir))
    assert [r.action for r in rec] == ["rolled_back"], [r.to_dict() for r in rec]
    assert not temps_in(logdir)
    assert snapshot(logdir) == files_before
    assert dir_times(logdir) == dirs_before  # the folders' times too, as a cancel leaves them
    assert not os.listdir(ctx.journal_dir)
    # and the restore goes through afterwards
    (out,) = [o for o in api.restore(str(logdir)) if o.run == m["run"]]
    assert out.status == "restored", out.to_dict()
