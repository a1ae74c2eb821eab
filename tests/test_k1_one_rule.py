"""Task K1 (session r13): one rule in one place — the checks that had been written twice now call
the one function that holds their rule, and what that changes is pinned here."""
from __future__ import annotations

import os

import pytest

from tb_footprint_plugin.codes import Failure
from tb_footprint_plugin.engine.context import Context, TransactionError, new_op_id


# --- 1: check_retired_dir is check_private_dir for each folder, vault -> retired -> op -> files -----
def test_a_planted_retired_link_is_refused_naming_where_it_points(tmp_path):
    from tb_footprint_plugin.engine.retire import check_retired_dir

    ctx = Context(str(tmp_path / "logs"))
    os.makedirs(ctx.logdir)
    ctx.vault.ensure()
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, os.path.join(ctx.vault.root, "retired"))
    with pytest.raises(TransactionError) as e:
        check_retired_dir(ctx.vault, new_op_id())
    assert e.value.code == Failure.REFUSED
    assert os.path.join(ctx.vault.root, "retired") in str(e.value)
    assert str(outside) in str(e.value)  # the link's target is named (check_private_dir's words)


def test_a_retirement_folder_not_there_yet_passes(tmp_path):
    from tb_footprint_plugin.engine.retire import check_retired_dir

    ctx = Context(str(tmp_path / "logs"))
    os.makedirs(ctx.logdir)
    check_retired_dir(ctx.vault, new_op_id())  # no vault yet
    ctx.vault.ensure()
    op = new_op_id()
    check_retired_dir(ctx.vault, op)  # no retired/
    os.makedirs(os.path.join(ctx.vault.root, "retired", op), mode=0o700)
    check_retired_dir(ctx.vault, op)  # no files/


def test_a_strangers_files_folder_is_refused(tmp_path):
    from tb_footprint_plugin.engine.retire import check_retired_dir

    ctx = Context(str(tmp_path / "logs"))
    os.makedirs(ctx.logdir)
    ctx.vault.ensure()
    op = new_op_id()
    files = os.path.join(ctx.vault.root, "retired", op, "files")
    os.makedirs(files, mode=0o700)
    os.chmod(files, 0o777)
    with pytest.raises(TransactionError) as e:
        check_retired_dir(ctx.vault, op)
    assert e.value.code == Failure.REFUSED and files in str(e.value)


def test_a_vault_that_is_a_link_is_refused_before_its_retired_folder_is_looked_through(tmp_path):
    from tb_footprint_plugin.engine.retire import check_retired_dir
    from tb_footprint_plugin.engine.vault import Vault

    real = tmp_path / "real-vault"
    (real / "retired").mkdir(parents=True, mode=0o700)
    os.chmod(real, 0o700)
    link = tmp_path / "vault"
    os.symlink(real, link)
    with pytest.raises(TransactionError) as e:
        check_retired_dir(Vault(str(link)), new_op_id())
    assert e.value.code == Failure.REFUSED and str(real) in str(e.value)


# --- 2: a bucket journal's backup and tmp keys are plain by storage.store.check_key's rule ----------
@pytest.mark.parametrize("below", ["ab/" + "a" * 64, "a/../b", "a//b", "./a", "a/.", "", "a\0b", "~x", "/a", "ü b/c"])
def test_a_key_is_plain_under_its_prefix_exactly_when_check_key_takes_its_part_below(below):
    from tb_footprint_plugin.engine.bucket_blobs import plain_under
    from tb_footprint_plugin.storage.store import StoreFailure, check_key

    try:
        check_key(below)
        plain = True
    except StoreFailure:
        plain = False
    assert plain_under("bkt/logs/.tb-footprint/tmp/" + below, "bkt/logs/.tb-footprint/tmp/") is plain
    assert not plain_under("elsewhere/" + below, "bkt/logs/.tb-footprint/tmp/")


def test_a_backup_key_with_a_nul_is_not_one_of_our_backups():
    from types import SimpleNamespace

    from tb_footprint_plugin.engine.bucket_blobs import names_our_backup

    vault = SimpleNamespace(root="bkt/logs/.tb-footprint")
    assert names_our_backup(vault, {"backup": "bkt/logs/.tb-footprint/blobs/ab/" + "a" * 64})
    # the rule names_our_backup wrote out again missed the NUL check_key refuses
    assert not names_our_backup(vault, {"backup": "bkt/logs/.tb-footprint/blobs/ab/a\0b"})
    assert not names_our_backup(vault, {"backup": "bkt/logs/.tb-footprint/blobs/../../elsewhere"})


# --- 3: adopting a committed blob (one name) lists no pins ------------------------------------------
def test_a_one_name_blob_is_adopted_without_listing_the_pins(tmp_path, monkeypatch):
    from tb_footprint_plugin.engine.vault import Vault
    from tb_footprint_plugin.storage.files import sha256_file

    logdir = tmp_path / "logs"
    logdir.mkdir()
    data = os.urandom(5000)
    first, second = logdir / "a.pb", logdir / "b.pb"
    first.write_bytes(data)
    second.write_bytes(data)
    sha = sha256_file(str(first))
    vault = Context(str(logdir)).vault
    vault.ensure()
    blob = vault.store(str(first), sha, pin=new_op_id())
    os.unlink(first)  # its transaction swapped: the blob is the one name of those bytes
    assert os.stat(blob).st_nlink == 1
    asked = []
    real = Vault.pinned_by
    monkeypatch.setattr(Vault, "pinned_by", lambda self, *a, **k: asked.append(a) or real(self, *a, **k))
    assert vault.store(str(second), sha, pin=new_op_id()) == blob
    assert asked == []  # no listing of tmp/ for a blob nobody else names
    assert os.stat(blob).st_ino != os.stat(second).st_ino and os.stat(blob).st_nlink == 1
    # a second name still goes through _own_link, then unshare (R11 F1)
    os.unlink(blob)
    assert vault.store(str(second), sha, pin=new_op_id()) == blob and os.stat(blob).st_nlink == 2
    assert vault.store(str(second), sha, pin=new_op_id()) == blob
    assert asked, "a blob of two names is looked up among the pins"


# --- 4: "released, not missing" is one function of the one schema -----------------------------------
def test_released_not_missing_is_an_absent_blob_its_restore_let_go():
    from tb_footprint_plugin.engine import manifest

    a, b = "a" * 64, "b" * 64
    m = {manifest.RESTORED_BY: new_op_id(), manifest.RELEASED: [a, "../x"]}
    assert manifest.released_not_missing(m, a, None)
    assert not manifest.released_not_missing(m, a, "plain")  # there: judged as any backup
    assert not manifest.released_not_missing(m, b, None)  # not let go: missing
    assert not manifest.released_not_missing({manifest.RELEASED: [a]}, a, None)  # never restored: missing

