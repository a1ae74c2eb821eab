"""The state files' rules written once (``engine/state_store.py``, issue #26): the folder ledger and
the change log write through one ``StateFolder`` store, whose ``put`` and ``append`` keep them: a
private file in a folder of ours, a planted link set aside and never followed, a line no step waits
on left unsynced where the caller says so, a file whose first line is not the append's never
started by it."""
import json
import os
import stat

import pytest

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine import history
from tb_footprint_plugin.engine.ledger import Ledger
from tb_footprint_plugin.engine.state_store import StateFolder
from tb_footprint_plugin.storage.private import UNTRUSTED_MARK
from tb_footprint_plugin.storage.store import StoreFailure


@pytest.fixture
def state(tmp_path):
    d = tmp_path / "logs" / ".tb-footprint"
    d.mkdir(parents=True, mode=0o700)
    return d


def test_a_put_is_a_private_file_and_a_planted_link_is_set_aside_not_followed(state, tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_bytes(b"theirs")
    os.symlink(outside, state / "ledger.json")
    store = StateFolder(str(state))
    version = store.put("ledger.json", b'{"a":1}')
    assert outside.read_bytes() == b"theirs"  # never written through the link
    st = os.lstat(state / "ledger.json")
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert (state / "ledger.json").read_bytes() == b'{"a":1}'
    assert version == store.version("ledger.json") == store.stat("ledger.json").version
    kept = [n for n in os.listdir(state) if UNTRUSTED_MARK in n]
    assert len(kept) == 1 and os.path.islink(state / kept[0])  # the link itself, kept for inspection


def test_an_append_is_fsynced_unless_the_caller_says_no_step_waits_on_it(state, monkeypatch):
    store = StateFolder(str(state))
    store.put("book.json", b"{}")
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    store.append("book.json", b'{"in":"flight"}\n', sync=False, create=False)
    assert synced == []
    store.append("book.json", b'{"settled":1}\n', create=False)
    assert len(synced) == 1
    assert (state / "book.json").read_bytes() == b'{}\n{"in":"flight"}\n{"settled":1}\n'


def test_an_append_that_must_not_start_a_file_never_starts_one(state):
    """``create=False`` (a ledger mark: the file's first line is its snapshot): a missing file is
    ``FileNotFoundError``, a folder planted at the name is set aside (kept) and nothing is started
    in its place; where a fresh file may be started (a log) the line starts it."""
    store = StateFolder(str(state))
    with pytest.raises(FileNotFoundError):
        store.append("missing.json", b"x\n", create=False)
    assert not os.path.lexists(state / "missing.json")
    (state / "dir.json").mkdir()
    with pytest.raises(FileNotFoundError):
        store.append("dir.json", b"x\n", create=False)
    assert not os.path.lexists(state / "dir.json")
    kept = [n for n in os.listdir(state) if n.startswith("dir.json") and UNTRUSTED_MARK in n]
    assert len(kept) == 1 and (state / kept[0]).is_dir()
    store.append("dir.json", b"x\n")
    assert (state / "dir.json").read_bytes() == b"x\n"


def test_the_ledger_and_the_change_log_write_through_the_one_state_store(state, monkeypatch):
    calls = []
    real_put, real_append = StateFolder.put, StateFolder.append

    def put(self, key, data, **kw):
        calls.append(("put", key))
        return real_put(self, key, data, **kw)

    def append(self, key, data, **kw):
        calls.append(("append", key, kw.get("sync", True)))
        return real_append(self, key, data, **kw)

    monkeypatch.setattr(StateFolder, "put", put)
    monkeypatch.setattr(StateFolder, "append", append)
    logdir = str(state.parent)
    book = Ledger(str(state / "ledger.json"), "archive", logdir)
    book.start(["r0"])
    book.mark("r0", "reducing")
    book.mark("r0", "done", op_id="op0")
    history.append_history(str(state), {"kind": "reduce", "run": "r0"})
    assert calls == [("put", "ledger.json"), ("append", "ledger.json", False), ("append", "ledger.json", True),
                     ("append", "history.jsonl", True)]
    # the bytes earlier versions wrote: a compact snapshot, then one line a mark
    first, *marks = (state / "ledger.json").read_bytes().split(b"\n")
    assert set(json.loads(first)) == {"version", "logdir", "policy", "created_at", "runs"}
    assert [json.loads(m)["entry"]["state"] for m in marks if m] == ["reducing", "done"]
    assert first == json.dumps(json.loads(first), sort_keys=True, separators=(",", ":")).encode()
    assert isinstance(history.disk_log(str(state)).store, StateFolder)


def test_a_key_leading_out_of_the_folder_is_refused_every_time(state, tmp_path):
    store = StateFolder(str(state))
    for _ in range(2):  # the checked paths are kept: a refused key never is
        for write in (store.put, store.append):
            with pytest.raises(StoreFailure) as ei:
                write("../escaped.json", b"x\n")
            assert ei.value.code == StoreError.UNSAFE_KEY
    assert not (state.parent / "escaped.json").exists()
