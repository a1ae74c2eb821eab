"""Issue #27 audit gap 6: every kind of file a reduce takes out round-trips through the vault in
its default form, packs included.

``test_every_kind_round_trips_through_the_compressed_vault`` (test_vault_compressed.py) pins
``PACK_BELOW=0`` so each backup is a ``.zst`` of its own. Here ``PACK_BELOW`` keeps today's default:
small backups go into packs, big ones into a ``.zst`` each. For each kind: reduce, check every
backup is in the vault once in a compacted form (no plain blob, no temp left) and hashes to its
name, then restore and compare bytes, mode and mtime_ns of every file.
"""
from pathlib import Path

import pytest

from conftest import copy_real
from test_restore_exact import assert_exact, dress, snapshot
from test_vault_compressed import KINDS, blobs, manifest_files, reduce, restore_all
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine import vault as vault_mod
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.paths import state_dir

#: PACK_BELOW as this module is imported: the product's default, never patched here
DEFAULT_PACK_BELOW = vault_mod.PACK_BELOW


@pytest.fixture(autouse=True)
def _disarm():
    yield
    faults.disarm_all()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_round_trips_through_the_default_packed_vault(tmp_path, kind):
    assert vault_mod.PACK_BELOW == DEFAULT_PACK_BELOW > 0  # the default form, packs on
    fixture, policy = KINDS[kind]
    logdir = copy_real(fixture, tmp_path / "logdir")
    dress(logdir)
    before = snapshot(logdir)
    reduce(logdir, policy)
    files = manifest_files(logdir)
    assert files
    vault = Vault(str(Path(state_dir(str(logdir)))))
    forms = {}
    for _m, f in files:
        assert vault.check_blob(f["sha256"]), f["path"]  # whole, hashing to its name
        forms[f["sha256"]] = (vault.blob_form(f["sha256"]), f["size"])
    # the default form: a backup below PACK_BELOW packed, a bigger one a .zst of its own (or
    # plain when it does not compress); the torch traces are all big, the other kinds are mostly small
    for sha, (form, size) in forms.items():
        if size < DEFAULT_PACK_BELOW:
            assert form == "packed", (sha, form, size)
        else:
            assert form in ("zst", "plain"), (sha, form, size)
    small = [sha for sha, (_, size) in forms.items() if size < DEFAULT_PACK_BELOW]
    packs = list((Path(state_dir(str(logdir))) / "packs").rglob("*.pack"))
    assert bool(packs) == bool(small), (packs, small)
    if kind != "torch_traces_gzipped":
        assert small, forms  # these fixtures' backups are small: the packed form is what runs
    held = blobs(logdir)
    # nothing left behind: no temp, no plain blob beside its .zst, no plain copy of a packed one
    assert not [n for n in held if ".tmp" in n], held
    assert not [n for n in held if not n.endswith(".zst") and n + ".zst" in held], held
    assert not [sha for sha, (form, _) in forms.items() if form == "packed" and (sha in held or sha + ".zst" in held)]
    restore_all(logdir)
    assert_exact(logdir, before)
