"""The exit's seal of the operation log never makes a removed vault again: a vault (or the whole
logdir holding it) deleted while the process runs — a user's ``rm -rf`` of a logdir TensorBoard
still serves, a bench's temporary folder — stays deleted when the process ends."""
import os
import shutil

from tb_footprint_plugin.engine import oplog


def test_sealing_the_segment_of_a_removed_vault_creates_nothing(tmp_path):
    top = tmp_path / "logdir"
    vault = top / ".tb-footprint" / "vault"
    vault.mkdir(parents=True, mode=0o700)
    oplog.append(str(vault), "op-1", {"state": {"op_id": "op-1"}})
    assert os.listdir(oplog.segments_dir(str(vault)))
    shutil.rmtree(top)
    assert oplog.seal(str(vault)) is False
    assert not top.exists()
    oplog.seal_all()  # what the exit runs: nothing left of this vault to seal, nothing made
    assert not top.exists()
