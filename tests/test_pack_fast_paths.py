"""The packed vault's per-blob fast paths (issue #27 item 5) keep the checks they replace: the
pack store's folder is found through a cached name but still refused when it is a link, and a
packing checks ``compact/`` ours once (``pack_lock``) rather than once a blob, but still checks it."""
import hashlib
import os
import stat

from tb_footprint_plugin.engine import remote_vault
from tb_footprint_plugin.engine.vault import PACKED, Vault


def _vault_with_plain(tmp_path, n=3):
    vault = Vault(str(tmp_path / "v"))
    vault.ensure()
    shas = []
    for i in range(n):
        p = tmp_path / f"f{i}"
        p.write_bytes(bytes([i]) * (1000 + i))
        sha = hashlib.sha256(p.read_bytes()).hexdigest()
        vault.store(str(p), sha)
        os.unlink(p)  # the live name gone: the blob is a file of its own, packable
        shas.append(sha)
    return vault, shas


def test_packs_behind_a_link_are_not_the_vaults_even_once_looked_up(tmp_path):
    """has_packs/packed_ref answer from one lstat and a cached name: a pack store swapped for a
    link to the same folder (same name, so the cached root still matches) is refused at once."""
    vault, shas = _vault_with_plain(tmp_path)
    assert vault.pack(shas) == {s: PACKED for s in shas}
    assert remote_vault.has_packs(vault.root) and remote_vault.packed_ref(vault.root, shas[0]) is not None
    real = os.path.join(vault.root, "packs")
    moved = str(tmp_path / "elsewhere")
    os.rename(real, moved)
    os.symlink(moved, real)
    assert not remote_vault.has_packs(vault.root)
    assert remote_vault.packed_ref(vault.root, shas[0]) is None
    assert remote_vault.pack_store(vault.root) is None
    assert vault.blob_form(shas[0]) is None  # never read through the link


def test_a_relative_vault_root_finds_the_same_packs(tmp_path, monkeypatch):
    """Only an absolute root's packs folder is cached; a relative one follows the cwd as before."""
    vault, shas = _vault_with_plain(tmp_path)
    vault.pack(shas)
    monkeypatch.chdir(tmp_path)
    assert remote_vault.packs_root("v") == os.path.join(str(tmp_path), "v", "packs")
    assert remote_vault.packed_ref("v", shas[1]) is not None
    monkeypatch.chdir(tmp_path / "v")
    assert remote_vault.packs_root("v") == os.path.join(str(tmp_path), "v", "v", "packs")
    assert not remote_vault.has_packs("v")


def test_a_packing_still_checks_a_compact_folder_that_is_not_ours(tmp_path):
    """The blobs' locks skip the per-blob folder check only because the pack lock made it: a
    ``compact/`` that is a link out of the vault is set aside and a folder of ours made, so no
    lock file is ever made through the link, and the blobs are packed as usual."""
    vault, shas = _vault_with_plain(tmp_path)
    compact = os.path.join(vault.root, "compact")
    outside = tmp_path / "outside"
    outside.mkdir()
    if os.path.isdir(compact) and not os.path.islink(compact):
        os.rmdir(compact)
    os.symlink(str(outside), compact)
    assert vault.pack(shas) == {s: PACKED for s in shas}
    assert os.listdir(outside) == []
    st = os.lstat(compact)
    assert stat.S_ISDIR(st.st_mode) and st.st_mode & 0o077 == 0
    assert all(vault.check_blob(s) for s in shas)
