"""The change log is one module over the ``Store`` interface (issue #26 item 2: "history ...
written once"): given the same bytes, a disk's state folder and a bucket's ``.tb-footprint/``
read back the same entries, name the same damage (file and line) and treat a planted oversize
log and a torn last line by the same rule; what only a disk has (a planted symlink under a log's
name, never followed; its set-aside) stays below. The ``shallow`` listing the disk's worker files
are found with is checked on every store in ``test_store_shallow.py``."""
import json
import os
import time
import uuid

import pytest

from contract_stores import buckets  # noqa: F401 - the bucket fixture
from tb_footprint_plugin.codes import Finding, Outcome
from tb_footprint_plugin.engine import history, lease
from tb_footprint_plugin.engine.context import RunOutcome
from tb_footprint_plugin.storage.store_object import ObjectStore

STATE = ".tb-footprint"


def _line(run, t, **kw):
    return (json.dumps(dict({"time": t, "run": run, "op_id": f"{run}-{t}", "kind": "reduce",
                             "outcome": "verified"}, **kw), sort_keys=True) + "\n").encode()


#: good lines out of order, a line that is not UTF-8, one that is not JSON, one that is a JSON
#: object with no time, a JSON list, an infinite time, then a torn last line (no newline)
LOG = (_line("b", 2.0) + _line("a", 1.0) + b"\xc3\x28 not utf-8\n" + b"{not json\n"
       + b'{"run": "no-time"}\n' + b"[1, 2]\n" + b'{"time": Infinity, "run": "inf"}\n'
       + _line("c", 3.0) + b'{"time": 4.0, "run": "tor')
DAMAGED_LINES = [3, 4, 6]  # the object with no time and the infinite one are skipped, not damage


@pytest.fixture(params=["posix", "s3"])
def where(request, tmp_path):
    """(kind, a function writing raw bytes as a log of the given name, the change log over it)."""
    if request.param == "posix":
        state = tmp_path / "logs" / STATE
        state.mkdir(parents=True)

        def plant(name: str, data: bytes) -> None:
            (state / name).write_bytes(data)

        yield "posix", plant, lambda **kw: history.ChangeLog(history.StateFolder(str(state)), **kw)
    else:
        s = ObjectStore(request.getfixturevalue("buckets")("s3").url(f"logs-{uuid.uuid4().hex[:8]}"))

        def plant(name: str, data: bytes) -> None:
            s.put(f"{STATE}/{name}", data)

        yield "s3", plant, lambda **kw: history.ChangeLog(s, STATE, **{"workers": history.BUCKET_WORKERS, **kw})
        s.close()


def test_a_disk_and_a_bucket_read_the_same_entries_and_name_the_same_damage(where):
    kind, plant, log_of = where
    plant("history.jsonl", LOG)
    log = log_of()
    assert [(e["run"], e["time"]) for e in log.read()] == [("a", 1.0), ("b", 2.0), ("c", 3.0)]
    damage = log.damage()
    assert [(d.code, d.line) for d in damage] == [(Finding.DAMAGED_LINE, n) for n in DAMAGED_LINES]
    assert all(d.file.endswith(f"{STATE}/history.jsonl") for d in damage), [d.file for d in damage]
    assert all(d.file.startswith("s3://") for d in damage) == (kind == "s3")


def test_status_names_the_lines_with_no_time_too_on_every_store(where):
    """``ChangeLog.problems`` (what a disk's and a bucket's ``status`` name): the damaged lines and
    the JSON objects with no finite time (skipped by ``read``), by file and line, in line order."""
    kind, plant, log_of = where
    plant("history.jsonl", LOG)
    problems = log_of().problems()
    assert [d.line for d in problems] == [3, 4, 5, 6, 7]
    assert all(d.code == Finding.DAMAGED_LINE and d.file.endswith(f"{STATE}/history.jsonl") for d in problems)
    assert [d.line for d in problems if "no time" in str(d)] == [5, 7]
    assert all(d.file.startswith("s3://") for d in problems) == (kind == "s3")

def test_an_entry_appended_after_a_planted_line_without_its_newline_is_not_lost(where):
    """A log whose last line has no newline (planted, or torn): the next entry starts a line of its
    own on every store, so it is read, and only the torn line is named damaged."""
    _kind, plant, log_of = where
    plant("history.jsonl", _line("a", 1.0) + b'{"time": 2.0, "run": "tor')
    log = log_of()
    log.append({"run": "b", "op_id": "b-op", "kind": "reduce", "outcome": "rolled_back"})
    assert [e["run"] for e in log.read()] == ["a", "b"]
    assert [d.line for d in log.damage()] == [2]

def test_a_planted_oversize_log_is_read_only_as_far_as_the_limit_and_named(where):
    """A log larger than any append makes (a planted one): only the whole lines of its first
    ``limit`` bytes are entries, on every store, and the log is named (``damaged_state_file``)."""
    _kind, plant, log_of = where
    body = b"".join(_line(f"r{i}", float(i)) for i in range(40))
    plant("history.jsonl", body)
    limit = len(body) // 2
    log = log_of(limit=limit)
    kept = body[:limit][:body[:limit].rfind(b"\n") + 1].count(b"\n")
    assert 0 < kept < 40
    assert [e["run"] for e in log.read()] == [f"r{i}" for i in range(kept)]
    (d,) = log.damage()
    assert d.code == Finding.DAMAGED_FILE and d.file.endswith(f"{STATE}/history.jsonl") and d.line == 0


def test_an_append_lands_whole_after_the_lines_already_there_on_every_store(where):
    kind, plant, log_of = where
    plant("history.jsonl", _line("a", 1.0))
    log = log_of()
    log.append({"run": "b", "op_id": "b-op", "kind": "reduce", "outcome": "verified"})
    log.append_lines([{"run": "c", "op_id": "c-op", "kind": "reduce", "time": 9e9}])
    assert [e["run"] for e in log.read()] == ["a", "b", "c"]
    assert log.damage() == []


def test_a_bucket_read_lists_its_workers_folder_alone_never_the_vault(buckets):  # noqa: F811
    """A bucket's state folder holds its vault: its workers' logs are found by a listing of their
    own folder (one page), never of the state folder; the single object is one read."""
    s = ObjectStore(buckets("s3").url("one-read"))
    s.put(f"{STATE}/history.jsonl", _line("a", 1.0))
    s.put(f"{STATE}/manifests/history-shard-0-of-2@h.jsonl", _line("in-the-vault", 2.0))
    before = dict(s.stats.to_dict())
    assert [e["run"] for e in history.bucket_log(s).read()] == ["a"]
    after = s.stats.to_dict()
    assert {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)
            and k in ("list", "read", "head", "put")} == {"list": 1, "read": 1}, (before, after)


def test_each_worker_of_a_sharded_batch_appends_to_its_own_log_on_every_store(where):
    """Two workers of a sharded batch (and a process of no shard) append each to a log of its
    own, on a disk beside the single one, on a bucket in its workers' folder (no conditional
    rewrite of one object they take turns on); the read merges them by time."""
    kind, _plant, log_of = where
    log = log_of()
    try:
        for shard, run in (("0/2", "w0"), ("1/2", "w1"), (None, "single")):
            history.configure_writer(shard)
            log.append({"run": run, "op_id": f"op-{run}", "kind": "reduce", "outcome": "verified"})
            time.sleep(0.01)
    finally:
        history.configure_writer(None)
    keys = log.keys()
    assert len(keys) == 3 and sum(k.endswith("/history.jsonl") or k == "history.jsonl" for k in keys) == 1, keys
    if kind == "s3":
        assert all(k.startswith(f"{history.BUCKET_WORKERS}/") for k in keys if "shard" in k), keys
    entries = log.read()
    assert [(e["run"], e.get("shard")) for e in entries] == [("w0", "0/2"), ("w1", "1/2"), ("single", None)]


def test_the_rolled_back_line_is_the_disk_lines_shape(tmp_path):
    """A bucket's rolled-back line and a disk's (``catalogue.write_manifest``) are built by one
    function: the same fields, outcome ``rolled_back`` with its code, no backup kept."""
    out = RunOutcome(run="r", status=Outcome.ROLLED_BACK, reason="why", code="verification_failed", bytes_before=7)
    before = lease.shard_label()
    lease.configure(shard=None)  # a process of no shard (a sharded reduce earlier leaves its label)
    try:
        line = history.rolled_back_line(out, "op", "archive")
        lease.configure(shard="1/2")
        assert history.rolled_back_line(out, "op", "archive")["shard"] == "1/2"
    finally:
        lease.configure(shard=before)
    disk = history.reduce_line(op_id="op", run="r", policy="archive", before=7, after=7, outcome="rolled_back",
                               reason="why", code="verification_failed")
    assert {k: v for k, v in line.items() if k != "time"} == disk
    assert disk["backup_kept"] is False and disk["verified"] is False and disk["code"] == "verification_failed"


# --- what only a disk has ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["history.jsonl", "history-shard-1-of-2@evil.jsonl"])
def test_a_planted_symlink_under_a_history_name_is_never_followed(tmp_path, name):
    state = tmp_path / STATE
    state.mkdir()
    secret = tmp_path / "secret.jsonl"
    secret.write_bytes(_line("planted", 1.0))
    os.symlink(secret, state / name)
    (state / "history-shard-0-of-2@good.jsonl").write_bytes(_line("ours", 2.0))
    log = history.disk_log(str(state))
    assert [e["run"] for e in log.read()] == ["ours"]
    assert [e["run"] for e in history.read_history(str(state))] == ["ours"]
    assert history.history_damage(str(state)) == []
    assert history.changes_since(str(state), "planted", 0.0, {"verified"}) == []


def test_an_append_over_a_planted_symlink_sets_it_aside_and_never_writes_through_it(tmp_path):
    state = tmp_path / STATE
    state.mkdir(mode=0o700)
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"must survive")
    os.symlink(secret, state / "history.jsonl")
    history.append_history(str(state), {"run": "r", "op_id": "op", "kind": "reduce"})
    assert secret.read_bytes() == b"must survive"
    assert (state / "history.jsonl").is_file() and not (state / "history.jsonl").is_symlink()
    (aside,) = [p for p in state.iterdir() if p.name.startswith("history.jsonl.refused-")]
    assert aside.is_symlink() and os.readlink(aside) == str(secret)
    assert [e["run"] for e in history.read_history(str(state))] == ["r"]


def test_a_workers_history_files_on_a_disk_are_found_beside_the_vault_without_walking_it(tmp_path):
    """The disk's worker files are found by a shallow listing of the state folder: a file under a
    history name deeper down (in the vault) is no log."""
    state = tmp_path / STATE
    (state / "vault" / "ops").mkdir(parents=True)
    (state / "vault" / "ops" / "history.jsonl").write_bytes(_line("deep", 1.0))
    (state / "history-shard-0-of-2@h.jsonl").write_bytes(_line("w0", 2.0))
    (state / "history.jsonl").write_bytes(_line("single", 3.0))
    assert [e["run"] for e in history.read_history(str(state))] == ["w0", "single"]
    assert [os.path.basename(p) for p in history.history_files(str(state))] == [
        "history-shard-0-of-2@h.jsonl", "history.jsonl"]
