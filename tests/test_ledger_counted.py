"""A folder ledger given a store reads and writes through it (task r22 S2 step 3): a counting
wrapper around the folder counts the ledger's reads and writes, and the state files' rules still
hold (``state_store.state_folder_of``: a plain folder store's wrappers around its ``StateFolder``)."""
import os
import stat

import pytest

from tb_footprint_plugin.engine.ledger import Ledger
from tb_footprint_plugin.engine.state_store import StateFolder
from tb_footprint_plugin.storage.store import CountingStore
from tb_footprint_plugin.storage.store_posix import PosixStore


@pytest.mark.parametrize("inner", [StateFolder, PosixStore])
def test_a_ledger_on_a_counting_store_counts_its_reads_and_writes(tmp_path, inner):
    folder = tmp_path / "ledgers"
    folder.mkdir(mode=0o700)
    target = tmp_path / "elsewhere"
    target.write_bytes(b"keep")
    os.symlink(target, folder / "ledger.json")  # planted: set aside, never written through
    counted = CountingStore(inner(str(folder)))
    book = Ledger(counted, "archive", None, key="ledger.json")
    book.start(["a", "b"])  # the snapshot: one put
    book.mark("a", "reducing")  # one line appended
    book.mark("a", "done")
    assert book.read()["runs"]["a"]["state"] == "done"
    calls = counted.counts.calls
    assert calls["put"] >= 1 and calls["append"] == 2, calls
    assert calls["read"] >= 1, calls
    assert counted.counts.bytes_up > 0
    # the state files' rules, whatever folder store was given: a private file, the link kept aside
    assert stat.S_IMODE(os.lstat(folder / "ledger.json").st_mode) == 0o600
    assert target.read_bytes() == b"keep" and [n for n in os.listdir(folder) if os.path.islink(folder / n)]
    puts = calls["put"]
    book.compact()  # the end of a batch: the snapshot rewritten, through the same store
    assert counted.counts.calls["put"] == puts + 1



def test_a_folder_ledger_s_key_is_a_file_name_in_the_store_s_folder(tmp_path):
    """Review R4 F2: ``Ledger(store, key="sub/book.json")`` wrote ``book.json`` at the store's root
    while its ``path`` named ``sub/book.json``; a key that is a path is refused, naming it."""
    with pytest.raises(ValueError, match="sub/book.json"):
        Ledger(PosixStore(str(tmp_path)), "archive", key="sub/book.json")
    book = Ledger(PosixStore(str(tmp_path)), "archive", key="book.json")
    book.mark("r", "done", original_size_bytes=10, after_size_bytes=5)
    assert book.path == str(tmp_path / "book.json") and (tmp_path / "book.json").exists()
