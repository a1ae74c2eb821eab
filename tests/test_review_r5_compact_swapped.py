"""Review R5 F3 (a regression of d7195a2, found and fixed the same session): the blob locks of a
packing skipped the compact/ check because pack_lock had checked it; compact/ swapped for a link
between that check and the blob locks led every lock file out of the vault (invariant 4). Each
blob lock checks compact/ again."""
import contextlib
import os

from test_pack_fast_paths import _vault_with_plain
from tb_footprint_plugin.engine.vault import Vault


def test_compact_swapped_after_the_pack_lock(tmp_path, monkeypatch):
    vault, shas = _vault_with_plain(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    compact = os.path.join(vault.root, "compact")
    real_lock = Vault.pack_lock
    made = []

    @contextlib.contextmanager
    def lock_then_swap(self, exclusive):
        with real_lock(self, exclusive):
            # another process of the same user swaps compact/ right after pack_lock's check
            os.rename(compact, compact + ".old")
            os.symlink(str(outside), compact)
            yield

    monkeypatch.setattr(Vault, "pack_lock", lock_then_swap)
    seen = []
    real_open = os.open

    def spy_open(path, *a, **kw):
        if isinstance(path, str) and path.endswith(".lock") and "/compact/" in path:
            seen.append((path, os.path.realpath(os.path.dirname(path))))
        return real_open(path, *a, **kw)

    monkeypatch.setattr(os, "open", spy_open)
    vault.pack(shas)
    monkeypatch.undo()


    through = [p for p, real in seen if real == str(outside)]
    assert not through, f"blob lock files made through the link, outside the vault: {through}"
    # the locks are taken through a descriptor of the folder checked once a pack (``_lock_folder``),
    # which the spy above does not see by path: nothing was made through the link either way
    assert os.listdir(outside) == []


def test_compact_swapped_between_two_blob_locks_of_a_pack(tmp_path, monkeypatch):
    """The blob locks of a pack go through one descriptor of compact/, checked ours once: the
    folder swapped for a link after the first lock leads none of the others out of the vault."""
    vault, shas = _vault_with_plain(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    compact = os.path.join(vault.root, "compact")
    real_lock = Vault._blob_lock
    swapped = []

    @contextlib.contextmanager
    def lock_then_swap(self, sha, *a, **kw):
        with real_lock(self, sha, *a, **kw) as mine:
            if not swapped:
                os.rename(compact, compact + ".old")
                os.symlink(str(outside), compact)
                swapped.append(sha)
            yield mine

    monkeypatch.setattr(Vault, "_blob_lock", lock_then_swap)
    out = vault.pack(shas)
    monkeypatch.undo()
    assert swapped and os.listdir(outside) == []
    assert out == {s: "packed" for s in shas}
    assert [n for n in os.listdir(compact + ".old") if n.endswith(".lock") and n != "packs.lock"] == []
