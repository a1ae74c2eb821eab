"""An unretire puts each file back create-only: a file a writer makes at a retired file's path
between the put-back's look (nothing there) and its move is kept, never replaced, and the
retired file stays in the vault, the run restored with that path named ``not_restored`` (C2's
note on ``retire_tree.put_back``: it looked, then renamed over whatever stood there by then). The writer is placed at that instant by a hook on the look
itself, not by timing."""
import hashlib
import os
from pathlib import Path

import pytest

from conftest import copy_real
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import retire_tree

WRITER = b"a writer's new bytes, made while the run came back\n"


def _sha(p) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


@pytest.mark.parametrize("vault_elsewhere", [False, True], ids=["same-filesystem", "copied"])
def test_a_file_made_at_the_path_during_unretire_is_kept(tmp_path, monkeypatch, vault_elsewhere):
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    target = next((logdir / "train").glob("*tfevents*"))
    retired_sha = _sha(target)
    vault = tmp_path / "vault"
    if vault_elsewhere:
        # another filesystem: the put-back copies to a temporary, then moves it into place
        vault = Path("/dev/shm") / f"tbfp-test-{os.getpid()}-{tmp_path.name}"
    vault.mkdir()
    try:
        rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, backup_dir=str(vault))
        assert rep.ok, rep.to_dict()
        assert not target.exists()

        real = retire_tree._look  # the put-back's look, in the folder the store's walk reaches
        made = []

        def look(ctx, key):
            found = real(ctx, key)
            if ctx.abs(key) == str(target) and not made:
                made.append(key)
                target.write_bytes(WRITER)  # the writer, right after the look found the path free
            return found

        monkeypatch.setattr(retire_tree, "_look", look)
        outs = api.restore(str(logdir), op=rep.outcomes[0].op_id, backup_dir=str(vault))
        monkeypatch.undo()
        assert made, "the put-back never looked at the file's path"
        assert target.read_bytes() == WRITER, "the writer's file was replaced"
        # the path is left to the writer's file: restored, saying so (#26: one rule on every store)
        assert [(o.status, o.code) for o in outs] == [("restored", "not_restored")], [o.to_dict() for o in outs]
        assert "train/" in outs[0].reason and "purge keeps them" in outs[0].reason, outs[0].reason
        # the retired file is still whole in the vault
        kept = [p for p in vault.rglob("*") if p.is_file() and not p.is_symlink() and _sha(p) == retired_sha]
        assert kept, "the retired file's bytes are nowhere in the vault"
    finally:
        if vault_elsewhere:
            import shutil
            shutil.rmtree(vault, ignore_errors=True)
