"""Review R8 F4: a stranger at a blob lock's name (``compact/<sha>.lock``) — a symlink to a file
outside, a folder, a FIFO, a second name of the blob itself — was refused with an error naming
only ``<sha>.lock`` and no code, and a pack's round dropped it without a word (the backup stayed
plain at every start). Now it is set aside as every stranger in a state folder of ours is
(``storage.private``: renamed beside itself, never followed or deleted, named by ``status``), and
the lock is taken on a file of its own: the backup is stored and packed, and restores exactly."""
import hashlib
import os
import stat

import pytest

from tb_footprint_plugin.codes import Failure, Finding
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.private import NotPrivate, UNTRUSTED_MARK

OP = "20260101T000000-abcdef"


def planted(tmp_path, kind: str):
    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    v = Vault(str(tmp_path / "vault"))
    v.ensure()
    src = tmp_path / "profile.xplane.pb"
    src.write_bytes(os.urandom(3000))
    sha = hashlib.sha256(src.read_bytes()).hexdigest()
    folder = tmp_path / "vault" / "compact"
    folder.mkdir(mode=0o700, exist_ok=True)
    lock = folder / f"{sha}.lock"
    if kind == "fifo":
        os.mkfifo(lock, 0o600)
    elif kind == "symlink":
        os.symlink(outside, lock)
    elif kind == "folder":
        lock.mkdir()
    return v, src, sha, lock, outside


def set_aside_in(folder) -> list:
    return sorted(n for n in os.listdir(folder) if UNTRUSTED_MARK in n)


@pytest.mark.parametrize("kind", ["symlink", "folder", "fifo"])
def test_a_stranger_at_a_lock_name_is_set_aside_and_the_backup_is_stored_and_packed(tmp_path, kind):
    v, src, sha, lock, outside = planted(tmp_path, kind)
    v.compacts = True  # the backup leaves its lock file for the compaction
    v.store(str(src), sha, pin=OP)
    v.unpin(OP)
    src.unlink()  # the original has left the logdir: the blob is the backup
    assert v.pack([sha]) == {sha: "packed"}
    assert v.blob_form(sha) == "packed" and v.check_blob(sha)
    aside = set_aside_in(lock.parent)
    assert len(aside) == 1 and aside[0].startswith(lock.name)
    assert outside.read_text() == "outside\n" and not os.path.lexists(lock)
    reader = Vault(v.root)
    reader.manifests()  # what status reads: the vault's problems come with its listing
    found = [p for p in reader.problems if p.code == Finding.UNTRUSTED_SET_ASIDE]
    assert [os.path.basename(p.file) for p in found] == aside
    dest = tmp_path / "back.xplane.pb"
    v.restore_blob(sha, str(dest))
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == sha


def test_a_second_name_of_the_blob_at_its_lock_name_is_set_aside_not_unlinked_as_the_lock(tmp_path):
    """A lock's holder removes its lock file: a second name of the blob there would have been
    taken for the lock. It is set aside (the blob keeps both names, so it stays plain: another
    name holds its blocks) and the blob is intact."""
    v, src, sha, lock, _ = planted(tmp_path, "none")
    v.store(str(src), sha, pin=OP)
    v.unpin(OP)
    src.unlink()
    os.link(v.blob_path(sha), lock)  # the blob's bytes under the lock's name
    assert v.pack([sha])[sha] == "kept_shared"
    aside = set_aside_in(lock.parent)
    assert len(aside) == 1 and os.path.samefile(lock.parent / aside[0], v.blob_path(sha))
    assert not os.path.lexists(lock) and v.check_blob(sha)


def test_a_stranger_that_comes_back_at_once_is_refused_with_the_lock_named_and_a_code(tmp_path, monkeypatch):
    v, src, sha, lock, _ = planted(tmp_path, "folder")
    from tb_footprint_plugin.storage import private

    real = private.set_aside_at

    def set_aside_then_plant_again(fd, name):
        out = real(fd, name)
        os.mkdir(name, dir_fd=fd)
        return out

    monkeypatch.setattr("tb_footprint_plugin.engine.vault.set_aside_at", set_aside_then_plant_again)
    with pytest.raises(NotPrivate) as e:
        with v._lock_folder() as fd, v._blob_lock(sha, dir_fd=fd):
            pass
    assert e.value.code == Failure.STATE_NOT_OURS and str(lock) in str(e.value)
    assert stat.S_ISDIR(os.lstat(lock).st_mode)
