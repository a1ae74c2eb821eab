"""Issue 29 item 7 (flaky "restored; N still kept"): a restore releases its vault copies once the
originals stand again, but keeps them on any doubt: a manifest it could not read, or a journal or
another operation claiming the same bytes at that moment (a concurrent transaction backing up
identical bytes, a log piece being sealed under load). The keep is right, and it used to last until
a purge. Now every start (recover, and so every changing verb and the tab's start) asks again,
under the run's lock: once the claim is gone the backup is released. A blob something still relies
on stays, and so does one whose file has changed since the restore."""
import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Recovery
from tb_footprint_plugin.engine import restore as restore_mod
from tb_footprint_plugin.engine.vault import Vault

from conftest import copy_real, tree_hashes


def _restored_with_a_claim(tmp_path, monkeypatch):
    """A run reduced, then restored while a concurrent transaction (a journal) claims its backups."""
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    before = tree_hashes(logdir / "train")
    rep = api.reduce_logdir(str(logdir), dry_run=False, runs=["train"], quiet_period=0)
    (op,) = [o.op_id for o in rep.outcomes if o.op_id]
    vault = Vault(str(logdir / ".tb-footprint"))
    shas = {f["sha256"] for f in vault.read_manifest(op)["files"]}
    assert shas
    real = restore_mod.journal_blobs
    with monkeypatch.context() as mp:
        mp.setattr(restore_mod, "journal_blobs", lambda ctx, *a, **k: real(ctx, *a, **k) | shas)
        (out,) = api.restore(str(logdir), "train")
    assert str(out.status) == "restored"
    m = vault.read_manifest(op)
    assert m["restored_by"] and not m.get("backup_purged")  # kept: the claim was there
    assert all(vault.has_blob(s) for s in shas)
    assert tree_hashes(logdir / "train") == before
    return logdir, vault, op, shas, before


def test_a_backup_kept_at_the_restore_is_released_by_the_next_start(tmp_path, monkeypatch):
    logdir, vault, op, shas, before = _restored_with_a_claim(tmp_path, monkeypatch)
    outs = api.recover_logdir(str(logdir))
    assert [(o.op_id, o.action) for o in outs if "released" in o.detail] == [(op, Recovery.RELEASED)]
    assert vault.read_manifest(op)["backup_purged"] is True
    assert not any(vault.has_blob(s) for s in shas)
    assert tree_hashes(logdir / "train") == before  # the originals stand, untouched
    (row,) = [o for o in api.operations(str(logdir)) if o["op_id"] == op]
    assert row["backup_purged"] and row["restored_by"]  # the tab: "restored; backup released"
    assert [o for o in api.recover_logdir(str(logdir)) if "released" in o.detail] == []  # once


def test_the_next_start_keeps_a_backup_still_claimed_or_whose_file_changed(tmp_path, monkeypatch):
    logdir, vault, op, shas, before = _restored_with_a_claim(tmp_path, monkeypatch)
    real = restore_mod.journal_blobs
    with monkeypatch.context() as mp:  # the claim holds: nothing goes
        mp.setattr(restore_mod, "journal_blobs", lambda ctx, *a, **k: real(ctx, *a, **k) | shas)
        assert [o for o in api.recover_logdir(str(logdir)) if "released" in o.detail] == []
    assert all(vault.has_blob(s) for s in shas) and not vault.read_manifest(op).get("backup_purged")
    # a restored file written to since: its backup is the only copy of the bytes it had
    f = next(f for f in vault.read_manifest(op)["files"])
    with open(logdir / f["path"], "ab") as fh:
        fh.write(b"x")
    assert [o for o in api.recover_logdir(str(logdir)) if "released" in o.detail] == []
    assert vault.has_blob(f["sha256"]) and not vault.read_manifest(op).get("backup_purged")
