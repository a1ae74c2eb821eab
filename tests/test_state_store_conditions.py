"""``StateFolder.put``'s conditional forms keep the state files' rules (task r22 S2 step 1): a
private 0600 file, only in a folder of ours, a link planted at the name set aside (never written
through), and the condition itself: ``if_absent`` never over a file of ours, ``if_version`` only
at the version ``StateFolder.version`` reports."""
import os
import stat

import pytest

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine.state_store import StateFolder
from tb_footprint_plugin.storage.private import NotPrivate
from tb_footprint_plugin.storage.store import StoreFailure


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    return d


def test_if_absent_makes_a_private_file_sets_a_planted_link_aside_and_never_writes_over_ours(folder, tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_bytes(b"not yours to write")
    os.symlink(target, folder / "j.jsonl")
    store = StateFolder(str(folder))
    v = store.put("j.jsonl", b'{"type": "begin"}\n', if_absent=True)
    assert not os.path.islink(folder / "j.jsonl") and (folder / "j.jsonl").read_bytes() == b'{"type": "begin"}\n'
    assert _mode(folder / "j.jsonl") == 0o600
    assert target.read_bytes() == b"not yours to write"
    assert [n for n in os.listdir(folder) if n.startswith("j.jsonl.") and os.path.islink(folder / n)]  # kept aside
    assert v == store.version("j.jsonl")
    with pytest.raises(StoreFailure) as e:
        store.put("j.jsonl", b"again\n", if_absent=True)
    assert e.value.code == StoreError.ALREADY_EXISTS
    assert (folder / "j.jsonl").read_bytes() == b'{"type": "begin"}\n'
    assert not [n for n in os.listdir(folder) if n.startswith(".tmp-")]  # no temporary left


def test_if_version_writes_a_private_file_only_at_the_version_reported(folder):
    store = StateFolder(str(folder))
    (folder / "ledger.json").write_bytes(b"old")
    os.chmod(folder / "ledger.json", 0o644)
    v = store.version("ledger.json")
    new = store.put("ledger.json", b"new", if_version=v)
    assert (folder / "ledger.json").read_bytes() == b"new" and _mode(folder / "ledger.json") == 0o600
    with pytest.raises(StoreFailure) as e:
        store.put("ledger.json", b"stale", if_version=v)  # the version before the last write
    assert e.value.code == StoreError.PRECONDITION_FAILED
    assert (folder / "ledger.json").read_bytes() == b"new" and new == store.version("ledger.json")
    with pytest.raises(StoreFailure) as e:
        store.put("absent.json", b"x", if_version=v)
    assert e.value.code == StoreError.PRECONDITION_FAILED and not (folder / "absent.json").exists()
    assert not [n for n in os.listdir(folder) if n.startswith(".tmp-")]


def test_mode_keeps_a_state_file_closed_to_others_and_only_in_a_folder_of_ours(folder, tmp_path):
    store = StateFolder(str(folder))
    store.put("a.json", b"{}", mode=0o644)
    assert _mode(folder / "a.json") == 0o600
    open_to_all = tmp_path / "shared"
    open_to_all.mkdir()
    os.chmod(open_to_all, 0o777)  # a folder others may write to: no state file of ours goes there
    shared = StateFolder(str(open_to_all))
    for kw in ({"mode": 0o600}, {"if_absent": True}):
        with pytest.raises(NotPrivate):
            shared.put("a.json", b"{}", **kw)
    assert os.listdir(open_to_all) == []
