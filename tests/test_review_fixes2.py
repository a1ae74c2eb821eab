"""Review fixes: a failed append's undo never cuts another writer's entry; a damaged
vaults.json never makes other vaults' backups disappear."""
import errno
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from conftest import copy_real, user_files
from helpers_cli import run_cli as cli
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import history, oplog, state_store, trust
from tb_footprint_plugin.storage.paths import state_dir

OLD = time.time() - 3600
OLD_NS = 1_700_000_000_123_456_789


def _enospc():
    return OSError(errno.ENOSPC, "No space left on device")


# --- 5: undoing a torn append --------------------------------------------------------------
def test_undo_keeps_an_entry_another_writer_appended_before_this_one_failed(tmp_path):
    """Another writer (no lock: an older version, say) appends a whole entry; then this append
    fails with ENOSPC having written nothing. The other entry survives the undo."""
    path = tmp_path / "history.jsonl"
    path.write_text('{"time": 1, "op_id": "first"}\n')
    other = '{"time": 2, "op_id": "other"}\n'
    with pytest.raises(OSError):
        with trust.undo_partial_append(str(path), '{"time": 3, "op_id": "mine"}\n'):
            with open(path, "a") as f:
                f.write(other)
            raise _enospc()
    assert path.read_text() == '{"time": 1, "op_id": "first"}\n' + other


def test_undo_keeps_an_entry_appended_after_a_torn_part_of_this_one(tmp_path):
    """This append took part of a line, another writer's whole entry landed after it: no cut
    (the torn bytes stay and are skipped as one damaged line; the other entry is kept)."""
    path = tmp_path / "history.jsonl"
    path.write_text('{"time": 1}\n')
    mine = '{"time": 3, "op_id": "mine"}\n'
    with pytest.raises(OSError):
        with trust.undo_partial_append(str(path), mine):
            with open(path, "a") as f:
                f.write(mine[:7])
                f.write('{"time": 2, "op_id": "other"}\n')
            raise _enospc()
    assert '{"time": 2, "op_id": "other"}' in path.read_text()


def test_undo_still_cuts_back_this_appends_own_torn_bytes(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text('{"time": 1}\n')
    mine = '{"time": 3, "op_id": "mine"}\n'
    for line in (mine, None):  # the text known, or not (then: at most one line past the old end)
        with pytest.raises(OSError):
            with trust.undo_partial_append(str(path), line):
                with open(path, "a") as f:
                    f.write(mine[:9])
                raise _enospc()
        assert path.read_text() == '{"time": 1}\n'


def test_a_cut_back_leaves_the_file_at_the_version_it_had(tmp_path):
    """Review R4 F5: the plain append's undo cut the torn bytes off but left the file's time at the
    torn write's, so the file was not at its version (inode, size, mtime) again, as the conditional
    append's undo leaves it: a journal holding that version was refused its next record. One
    cut-back now (``trust.cut_back_to``) for both."""
    from tb_footprint_plugin.storage.store_posix import version_of

    path = tmp_path / "history.jsonl"
    path.write_text('{"time": 1}\n')
    os.utime(path, ns=(OLD_NS, OLD_NS))
    before = version_of(os.stat(path))
    mine = '{"time": 3, "op_id": "mine"}\n'
    with pytest.raises(OSError):
        with trust.undo_partial_append(str(path), mine):
            with open(path, "a") as f:
                f.write(mine[:9])
            raise _enospc()
    assert path.read_text() == '{"time": 1}\n'
    assert version_of(os.stat(path)) == before


def test_a_line_appended_after_one_torn_by_a_crash_is_read_whole(tmp_path):
    """A crash tore the last line (no undo ran: SIGKILL, power loss); the next append starts a
    line of its own, so only the torn one is damaged and the new record is read (second review:
    the oplog's next delta was glued onto the torn line and lost with it)."""
    from tb_footprint_plugin.storage.files import append_line

    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    path = d / "log.jsonl"
    path.write_text('{"a": 1}\n{"b": 2, "to')  # torn
    os.chmod(path, 0o600)
    append_line(str(path), '{"c": 3}\n')
    got = trust.read_json_lines(str(path))
    assert got.records == [{"a": 1}, {"c": 3}], got.records
    assert len(got.damaged) == 1 and not got.torn, got.damaged
    # the undo of a failed append after the torn line still cuts back only its own bytes
    before = path.read_text()
    mine = '{"d": 4}\n'
    with pytest.raises(OSError):
        with trust.undo_partial_append(str(path), mine):
            with open(path, "a") as f:
                f.write(mine[:3])
            raise _enospc()
    assert path.read_text() == before


def test_undo_without_the_line_never_cuts_two_lines(tmp_path):
    path = tmp_path / "j.jsonl"
    path.write_text('{"a": 1}\n')
    with pytest.raises(OSError):
        with trust.undo_partial_append(str(path)):
            with open(path, "a") as f:
                f.write('{"other": 1}\n{"mi')
            raise _enospc()
    assert path.read_text() == '{"a": 1}\n{"other": 1}\n{"mi'


def test_concurrent_history_append_survives_a_failed_one(tmp_path, monkeypatch):
    """Two --jobs threads append to history.jsonl: the first one's append fails with ENOSPC
    after the second one started. The second entry is in the file afterwards."""
    state = str(tmp_path)
    history.append_history(state, {"op_id": "first"})
    real = state_store.append_line
    started = threading.Event()
    second = threading.Thread(target=history.append_history, args=(state, {"op_id": "second"}))

    def failing_once(path, line, **kw):
        if '"failing"' in line:
            second.start()
            started.set()
            time.sleep(0.5)  # the other thread's append lands now, unless a lock keeps it out
            raise _enospc()
        return real(path, line, **kw)

    monkeypatch.setattr(state_store, "append_line", failing_once)
    with pytest.raises(OSError):
        history.append_history(state, {"op_id": "failing"})
    assert started.is_set()
    second.join(10)
    ops = [e["op_id"] for e in history.read_history(state)]
    assert ops == ["first", "second"], ops


def test_oplog_append_failure_keeps_a_concurrent_record(tmp_path, monkeypatch):
    vault = str(tmp_path)
    op = "20240101-000000-abcdef"
    oplog.append(vault, op, {"type": "note", "n": 1})
    real = oplog.append_line

    def other_lands_then_fails(path, line, **kw):
        real(path, json.dumps({"op": op, "seq": 2, "type": "note", "n": 2}) + "\n")  # another writer's record
        raise _enospc()

    monkeypatch.setattr(oplog, "append_line", other_lands_then_fails)
    with pytest.raises(OSError):
        oplog.append(vault, op, {"type": "note", "n": 3})
    assert [r.get("n") for r in oplog.records(vault, op)] == [1, 2]


# --- 4: a damaged vaults.json never hides other vaults' backups ---------------------------


def runs_logdir(root: Path, names) -> Path:
    """A logdir of runs of different bytes, each with a profile the archive policy removes."""
    src = copy_real("tf/keras_profiled", root / "src")
    logdir = root / "logdir"
    for run in names:
        shutil.copytree(src / "train", logdir / run, copy_function=shutil.copy2)
        with open(next((logdir / run).rglob("*.xplane.pb")), "ab") as f:
            f.write(run.encode() * 7)
    for p in [logdir, *logdir.rglob("*")]:
        os.utime(p, (OLD, OLD), follow_symlinks=False)
    shutil.rmtree(src)
    return logdir


def reduce_into(logdir: Path, run: str, vault: Path) -> str:
    rep = api.reduce_logdir(str(logdir), str(vault), policy="archive", dry_run=False, runs=[run],
                            verify_backends=("python",))
    assert rep.ok and [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]
    return rep.outcomes[0].op_id


def test_damaged_vault_index_is_merged_so_earlier_vaults_stay_restorable(tmp_path):
    logdir = runs_logdir(tmp_path, ("a", "b", "c"))
    before = user_files(logdir)
    v1, v2, v3 = (tmp_path / f"vault{i}" for i in (1, 2, 3))
    ops = {"a": reduce_into(logdir, "a", v1), "b": reduce_into(logdir, "b", v2)}
    index = Path(state_dir(str(logdir))) / "vaults.json"
    assert json.loads(index.read_text()) == [str(v1), str(v2)]
    # damaged: torn, with bytes that are not UTF-8
    index.write_bytes(b'["' + str(v1).encode() + b'", "' + str(v2).encode() + b'", \xff\xfe{')
    ops["c"] = reduce_into(logdir, "c", v3)

    assert set(json.loads(index.read_text())) == {str(v1), str(v2), str(v3)}
    asides = sorted(index.parent.glob("vaults.json.damaged-*"))
    assert len(asides) == 1 and asides[0].read_bytes().endswith(b"\xff\xfe{")

    st = api.status(str(logdir))
    assert {o["op_id"] for o in st["operations"]} >= set(ops.values())
    out = cli("status", logdir)
    assert out.returncode == 0, out.stderr
    assert str(asides[0]) in out.stdout and "delete this file" in out.stdout, out.stdout
    assert "[damaged_state_file]" in out.stdout

    res = cli("restore", logdir, "--all", "--yes")
    # everything restored; the set-aside index still named (exit 1) until the user removes it
    assert res.stdout.count(": restored") == 3, res.stdout + res.stderr
    assert res.returncode == 1 and str(asides[0]) in res.stdout, res.stdout
    assert user_files(logdir) == before  # byte for byte

    asides[0].unlink()
    assert str(asides[0]) not in cli("status", logdir).stdout


def test_vault_index_keeps_entries_not_used_now(tmp_path):
    """An unmounted vault and a vault reached through a symlink are not used, but a reduce into
    another vault never forgets them: when the mount is back, its backups are found again."""
    logdir = runs_logdir(tmp_path, ("a", "b"))
    v1, v2 = tmp_path / "vault1", tmp_path / "vault2"
    reduce_into(logdir, "a", v1)
    index = Path(state_dir(str(logdir))) / "vaults.json"
    link = tmp_path / "vault-link"
    link.symlink_to(v1)
    unmounted = str(tmp_path / "mnt" / "vault")
    index.write_text(json.dumps([str(v1), unmounted, str(link), 7]))
    reduce_into(logdir, "b", v2)
    assert json.loads(index.read_text()) == [str(v1), unmounted, str(link), str(v2)]
    assert not list(index.parent.glob("vaults.json.damaged-*"))  # a well-formed index is not damage


def test_append_still_works_where_the_filesystem_has_no_locks(tmp_path, monkeypatch):
    """flock failing (ENOLCK on some network filesystems) never stops a history append."""
    state = str(tmp_path)
    history.append_history(state, {"op_id": "first"})

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(trust.fcntl, "flock", no_locks)
    history.append_history(state, {"op_id": "second"})
    assert [e["op_id"] for e in history.read_history(state)] == ["first", "second"]
