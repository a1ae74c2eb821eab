"""Two processes drop one operation's pins at once: its own, right after its commit or rollback,
and another's start (``upkeep``: the pins of an operation whose journal is closed and whose
manifest is there), as workers of a sharded batch starting together on one logdir do. The second
to list the pins folder found it gone and raised ``FileNotFoundError``: in a rollback that makes the
run ``rollback_incomplete`` (its journal left for the next start) with nothing left to do; after a
commit the transaction took its failure path and was saved by its commit record alone (task S, r21:
found while looking for the official CI's failure of 25e49d1, which it did not cause)."""
import os
import sys

from tb_footprint_plugin.engine.vault import Vault

SHA = "ab" * 32
OP = "20261205T050000-abcdef"


def test_an_unpin_whose_folder_another_unpin_removed_meanwhile_is_done(tmp_path, monkeypatch):
    vault = Vault(str(tmp_path / "vault"))
    vault.pin_blob(OP, SHA)
    pins = os.path.join(vault.tmp, OP, "pins")
    assert os.listdir(pins) == [SHA]
    real = os.listdir
    other = []

    def listdir(path=".", *a, **kw):
        # the other process's unpin lands between this one's look at the folder and its listing
        if not other and path == pins and sys._getframe(1).f_code.co_name == "unpin":
            other.append(None)
            other[0] = Vault(vault.root).unpin(OP)
        return real(path, *a, **kw)

    monkeypatch.setattr(os, "listdir", listdir)
    assert vault.unpin(OP) == 0  # before: FileNotFoundError
    monkeypatch.undo()
    assert other == [1] and not os.path.lexists(os.path.join(vault.tmp, OP))
    assert vault.pins_of(OP) == [] and vault.pinned_ops() == []
