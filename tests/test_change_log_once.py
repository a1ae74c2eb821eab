"""The change log's rules written once (review R r20: R4, R7, R8, R10, R11, R13).

- R11: "one line per operation" is one check (``ChangeLog.logged`` / ``append_once``) with one
  rule for a log that cannot be read: it has no line, so the line is written (a line twice rather
  than none). The retired purge's recovery let the unreadable log's error fail the recovery, at
  every start, for good.
- R7: which shard a process is, is one label (``lease.shard_label``): the change log's file and
  line follow it.
- R10: following the log (``changes_since``) applies the reader's rules for a seal cut short.
- R8: the disk's append ends a torn last line by the rule every store's append uses.
- R4: an append looks for its log's sealed name only when the log has a second name.
- R13: a start's purged retirements are judged against the vault roots worked out once.
"""
import os

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Finding, Recovery, StoreError
from tb_footprint_plugin.engine import history, lease, retire_purge
from tb_footprint_plugin.engine.front import local_context
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage import files
from tb_footprint_plugin.storage.store import StoreFailure

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _retired(root, runs=("a",)):
    for name in runs:
        with synth.EventWriter(str(root / name)) as w:
            for step in range(10):
                w.scalar("loss", step, 1.0 / (step + 1))
    rep = api.retire(str(root), api.retire_rule(runs=list(runs)), dry_run=False, quiet_period=0)
    assert rep.ok, rep.to_dict()
    return {m["run"]: Vault(str(root / ".tb-footprint")).read_manifest(m["op_id"])
            for m in api.operations(str(root)) if m["kind"] == "retire"}


def _purge_lines(logdir):
    return [e["run"] for e in api.history(str(logdir)) if e["kind"] == "purge"]


def test_a_purge_finished_on_recovery_writes_its_line_when_the_log_cannot_be_read(tmp_path, monkeypatch):
    """A purge killed past its intent (manifest marked purged, folder still there) is finished by
    the next start even when the change log cannot be read: its line written, not a failure
    retried at every start (R11)."""
    logdir = tmp_path / "logs"
    m = _retired(logdir)["a"]
    m.update(backup_purged=True, purged_at=m["finished_at"] + 1)
    m[retire_purge.LINE_FIRST] = True
    Vault(m["vault"]).write_manifest(m)
    assert os.path.isdir(logdir / ".tb-footprint" / "retired" / m["op_id"])

    def unreadable(self):
        raise StoreFailure(StoreError.PERMISSION, "history.jsonl", "Permission denied")
    with monkeypatch.context() as mp:
        mp.setattr(history.ChangeLog, "read", unreadable)
        outs = retire_purge.finish_retired_purges(local_context(str(logdir), None), [m])
    assert [(o.run, o.action, o.code) for o in outs] == [("a", Recovery.COMPLETED, Finding.PURGE_FINISHED)], \
        [(o.run, o.action, o.detail) for o in outs]
    assert not os.path.exists(logdir / ".tb-footprint" / "retired" / m["op_id"])
    assert _purge_lines(logdir) == ["a"]
    assert api.recover_logdir(str(logdir)) == [] and _purge_lines(logdir) == ["a"]


def test_append_once_writes_a_line_of_an_operation_once(tmp_path):
    """One check for every verb: a line of the same operation, kind and outcome is not appended
    again; another outcome of it is."""
    state = tmp_path / ".tb-footprint"
    log = history.disk_log(str(state), create=True)
    line = {"op_id": "op1", "kind": "reduce", "outcome": "rolled_back", "run": "r", "time": 1.0}
    assert log.append_once([line]) == [line]
    assert log.append_once([dict(line, time=2.0)]) == []
    other = dict(line, outcome="verified", time=3.0)
    assert log.append_once([other]) == [other]
    assert [(e["op_id"], e["outcome"]) for e in log.read()] == [("op1", "rolled_back"), ("op1", "verified")]
    assert log.logged(kind="reduce", outcome="verified") == {"op1"} and log.logged(kind="purge") == set()


@pytest.fixture
def no_shard():
    before = lease.shard_label()
    lease.configure(shard=None)
    yield
    lease.configure(shard=before)


def test_the_change_log_follows_the_processs_one_shard_label(tmp_path, no_shard):
    """The shard the leases name is the shard the change log's file and lines name (R7)."""
    state = tmp_path / ".tb-footprint"
    lease.configure(shard="1/2")
    history.append_history(str(state), {"op_id": "op", "kind": "reduce", "run": "r", "outcome": "verified"})
    lease.configure(shard=None)
    own = history.worker_file_name("1/2")
    assert sorted(os.listdir(state)) == [own]
    (e,) = history.read_history(str(state))
    assert e["shard"] == "1/2"
    assert history.configure_writer("0/2") is None and lease.shard_label() == "0/2"  # one label, two names


def test_following_the_log_after_a_seal_cut_short_sees_each_line_once(tmp_path, monkeypatch):
    """A seal stopped between its link and its unlink leaves two names of one log: the reader
    reads its lines once, and so does ``changes_since`` (R10)."""
    monkeypatch.setattr(history, "_FOLLOWED", {})
    state = tmp_path / ".tb-footprint"
    log = history.disk_log(str(state), create=True)
    log.append_lines([{"op_id": "op", "kind": "reduce", "run": "r", "outcome": "verified", "time": 5.0}])
    key = log.own_key()
    os.link(state / key, state / log.sealed_key(key, log.store.stat(key)))
    assert [e["op_id"] for e in log.read()] == ["op"]
    got = history.changes_since(str(state), "r", 0.0, {"verified"})
    assert [e["op_id"] for e in got] == ["op"]


def test_a_disk_append_ends_a_torn_line_by_the_stores_one_rule(tmp_path, monkeypatch):
    """The disk change log's append goes through ``storage.store.on_a_new_line``, the rule the
    contract suite tests of every store's ``append`` (R8)."""
    state = tmp_path / ".tb-footprint"
    state.mkdir(mode=0o700)
    (state / "history.jsonl").write_bytes(b'{"torn": ')
    asked = []
    real = files.on_a_new_line

    def spied(last, data):
        asked.append(last)
        return real(last, data)
    monkeypatch.setattr(files, "on_a_new_line", spied)
    history.append_history(str(state), {"op_id": "op", "kind": "reduce", "run": "r", "outcome": "verified"})
    assert asked == [b" "]
    assert (state / "history.jsonl").read_bytes().startswith(b'{"torn": \n{')
    assert [e["op_id"] for e in history.read_history(str(state))] == ["op"]


def test_an_append_looks_for_a_sealed_name_only_when_the_log_has_a_second_name(tmp_path, monkeypatch):
    """One stat of the log per append: its link count says whether a seal was cut short (R4)."""
    state = tmp_path / ".tb-footprint"
    entry = {"op_id": "op", "kind": "reduce", "run": "r", "outcome": "verified"}
    history.append_history(str(state), entry)
    stats = []
    real = history.StateFolder.stat

    def counted(self, key):
        stats.append(key)
        return real(self, key)
    monkeypatch.setattr(history.StateFolder, "stat", counted)
    history.append_history(str(state), entry)
    assert stats == ["history.jsonl"]
    log = history.disk_log(str(state))
    key = log.own_key()
    sealed = log.sealed_key(key, real(log.store, key))
    os.link(state / key, state / sealed)  # a seal cut short: the next append finishes it first
    del stats[:]
    history.append_history(str(state), entry)
    assert stats[:2] == ["history.jsonl", sealed]  # (the seal then looks at what holds its name)
    assert not (state / key).read_bytes().count(b"\n") > 1  # the fresh log holds the new line alone
    assert len(history.read_history(str(state))) == 3


def test_a_starts_purged_retirements_work_out_the_vault_roots_once(tmp_path, monkeypatch):
    """Every verb's start asks of each purged retirement whether it is in one of the logdir's
    vaults: the roots' real paths are worked out once a start, not once a retirement (R13)."""
    logdir = tmp_path / "logs"
    _retired(logdir)
    api.purge(str(logdir), yes=True)
    (m,) = [m for m in _retired_manifests(logdir)]
    assert m.get("backup_purged") and m.get(retire_purge.LINE_FIRST)
    ctx = local_context(str(logdir), None)
    calls = []
    real = os.path.realpath

    def counted(p, *a, **kw):
        calls.append(p)
        return real(p, *a, **kw)
    monkeypatch.setattr(os.path, "realpath", counted)

    def asked(n):
        del calls[:]
        many = [dict(m, op_id=f"{m['op_id']}-{i}") for i in range(n)]
        assert retire_purge.finish_retired_purges(ctx, many) == []
        return len(calls)
    assert asked(8) == asked(1)


def _retired_manifests(logdir):
    return [Vault(str(logdir / ".tb-footprint")).read_manifest(m["op_id"])
            for m in api.operations(str(logdir)) if m["kind"] == "retire"]
