"""The disk journal writes through the state files' store (task r22 S2 step 2): its begin record by
``StateFolder.put(if_absent=True)``, each later record by ``StateFolder.append(if_version=...)``,
the version its own last write left. So a record the disk took only part of is cut off again and
the file left at its version (every journal, not only a reduce's: ``reduce_journal.append_record``
did the cut alone), the next record lands on a line of its own and reads back; and a file put in
the journal's place is never written."""
import errno
import json
import os

import pytest

from tb_footprint_plugin.engine import state_store
from tb_footprint_plugin.engine.journal import Journal
from tb_footprint_plugin.storage.private import NotPrivate


def _journal(tmp_path) -> Journal:
    return Journal.create(str(tmp_path / ".tb-footprint" / "journal"), "op1",
                          {"type": "begin", "op_id": "op1", "kind": "restore"})


def test_a_record_the_disk_took_only_part_of_leaves_the_journal_as_it_was(tmp_path, monkeypatch):
    j = _journal(tmp_path)
    j.append({"type": "backup", "path": "a"})
    before = open(j.path, "rb").read()
    st = os.lstat(j.path)
    real = os.write
    torn = []

    def full_disk(fd, data):
        if not torn and b'"staged"' in bytes(data):
            torn.append(real(fd, bytes(data)[:12]))  # part of the line, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(OSError) as e:
        j.append({"type": "staged", "tmp": "a.tmp"})
    assert e.value.errno == errno.ENOSPC and torn == [12]
    monkeypatch.setattr(os, "write", real)
    assert open(j.path, "rb").read() == before
    now = os.lstat(j.path)
    assert (now.st_ino, now.st_size, now.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)  # time set back too
    j.append({"type": "rollback", "reason": "disk full"})
    assert [r["type"] for r in j.records()] == ["begin", "backup", "rollback"]
    assert all(json.loads(line) for line in open(j.path, "rb").read().splitlines())


def test_a_file_put_in_the_journals_place_is_never_written(tmp_path):
    j = _journal(tmp_path)
    j.append({"type": "backup", "path": "a"})
    other = tmp_path / "other.jsonl"
    other.write_bytes(b'{"type": "begin", "op_id": "op1"}\n')
    os.chmod(other, 0o600)
    os.replace(other, j.path)  # another file of ours at its name: same name, another inode
    with pytest.raises(NotPrivate):
        j.append({"type": "swap"})
    assert open(j.path, "rb").read() == b'{"type": "begin", "op_id": "op1"}\n'
    # the same file written by someone else since this object's last write is refused too
    k = _journal(tmp_path / "k")
    with open(k.path, "ab") as f:
        f.write(b'{"type": "swap", "t": 1}\n')
    with pytest.raises(NotPrivate):
        k.append({"type": "commit"})
    assert [r["type"] for r in k.records()] == ["begin", "swap"]


def test_the_journal_goes_through_the_state_folder(tmp_path, monkeypatch):
    calls = []
    real_put, real_append = state_store.StateFolder.put, state_store.StateFolder.append

    def put(self, key, data, **kw):
        calls.append(("put", key, kw.get("if_absent")))
        return real_put(self, key, data, **kw)

    def append(self, key, data, **kw):
        calls.append(("append", key, kw.get("if_version") is not None))
        return real_append(self, key, data, **kw)

    monkeypatch.setattr(state_store.StateFolder, "put", put)
    monkeypatch.setattr(state_store.StateFolder, "append", append)
    j = _journal(tmp_path)
    j.append({"type": "backup", "path": "a"}, sync=False)
    assert calls == [("put", "op1.jsonl", True), ("append", "op1.jsonl", True)]
    assert oct(os.stat(j.path).st_mode & 0o777) == "0o600"
