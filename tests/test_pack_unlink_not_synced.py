"""A packing unlinks each packed backup's plain blob without syncing its folder (the pack and its
index are durable first): a crash may undo those unlinks, leaving a plain copy of the same bytes
beside the pack. That state must read as healthy, restore exactly and be let go like any backup."""
import shutil
from pathlib import Path

from test_restore_exact import assert_exact, snapshot
from test_vault_packs import make_logdir, reduce, vault_files
from tb_footprint_plugin import api
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.paths import state_dir


def _undo_unlinks(root: Path) -> int:
    """Bring back every packed backup's plain blob, as a crash losing the unlinks would."""
    vault = Vault(state_dir(str(root)))
    n = 0
    for m in api.operations(str(root)):
        for f in m["files"]:
            assert vault.blob_form(f["sha256"]) == "packed"
            p = Path(vault.blob_path(f["sha256"]))
            p.parent.mkdir(parents=True, exist_ok=True)
            with vault.open_blob(f["sha256"]) as src, open(p, "wb") as dst:
                shutil.copyfileobj(src, dst)
            n += 1
    return n


def test_plain_blobs_back_beside_their_pack_are_healthy_and_restore_exactly(tmp_path):
    root = make_logdir(tmp_path / "logs", runs=("a", "b"))
    before = snapshot(root)
    reduce(root)
    assert _undo_unlinks(root) == 60
    st = api.status(str(root))
    assert st["problems"] == [] and not st["kept_blobs"] and not st["unfinished"], st
    outs = api.restore(str(root))
    assert sorted(o.status.value for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    assert_exact(root, before)
    left = vault_files(root)
    assert not [k for k in left if k.startswith("blobs/")], left  # both forms let go by the release
