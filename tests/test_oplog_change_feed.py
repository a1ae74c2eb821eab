"""The operation log's change feed (issue #28): a pass of ``Vault.manifests`` through a command's
``ManifestMemo`` asks the log which operations had a record indexed since its last pass and
looks at those only — a restore of N runs made three passes over every operation id per run
(a key look-up, index entries and a stat each), O(N) per run. What a pass returns is still what
a fresh read gives: a change, a new operation, an older version's manifest file, a seal (the
index reset: every key looked at again) and a damaged line (nothing reused) are all seen."""
import json
import os

import pytest

from test_oplog_hot_path import a_manifest
from tb_footprint_plugin.engine import oplog
from tb_footprint_plugin.engine.vault import ManifestMemo, Vault
from tb_footprint_plugin.engine.vault_reads import slim

N = 40


@pytest.fixture()
def vault(tmp_path):
    v = Vault(str(tmp_path / "vault"))
    v.ensure()
    for i in range(N):
        v.write_manifest(dict(a_manifest(i), outcome="verified"))
    return v


@pytest.fixture()
def looked(monkeypatch):
    """The op ids whose key a memo looks at (``ManifestMemo.key``) and the manifests read."""
    seen = {"keys": [], "reads": []}
    real_key, real_read = ManifestMemo.key, Vault.read_manifest
    monkeypatch.setattr(ManifestMemo, "key", lambda self, v, op: seen["keys"].append(op) or real_key(self, v, op))
    monkeypatch.setattr(Vault, "read_manifest", lambda self, op: seen["reads"].append(op) or real_read(self, op))
    return seen


def fresh(vault: Vault) -> list:
    return Vault(vault.root).manifests(slim(vault.root))


def test_the_index_says_which_operations_changed_since_a_mark(vault):
    idx = oplog.index(vault.root)
    mark = idx.mark()
    assert idx.changed_since(mark) == set()
    m = vault.read_manifest(a_manifest(3)["op_id"])
    vault.write_manifest(dict(m, restored_by="20260102T000000-000001"))
    idx = oplog.index(vault.root)
    assert idx.changed_since(mark) == {m["op_id"]}
    again = idx.mark()
    vault.write_manifest(dict(a_manifest(N), outcome="verified"))
    assert oplog.index(vault.root).changed_since(again) == {a_manifest(N)["op_id"]}
    assert oplog.index(vault.root).changed_since(mark) == {m["op_id"], a_manifest(N)["op_id"]}
    oplog.seal(vault.root)  # the plain segment goes: the index is read again from the pieces
    assert oplog.index(vault.root).changed_since(again) is None


def test_a_damaged_line_ends_what_the_feed_can_tell(vault):
    mark = oplog.index(vault.root).mark()
    seg = next(os.path.join(oplog.segments_dir(vault.root), n) for n in os.listdir(oplog.segments_dir(vault.root))
               if n.endswith(".jsonl"))
    with open(seg, "ab") as f:
        f.write(b'{"op": "20260101T000000-000003", "seq": 9, "type": "manifest_change", "chan\xff\n')
    assert oplog.index(vault.root).changed_since(mark) is None


def test_a_second_pass_looks_only_at_what_changed(vault, looked):
    memo = ManifestMemo()
    first = vault.manifests(slim(vault.root), memo=memo)
    assert len(first) == N and len(looked["keys"]) == N
    looked["keys"].clear()
    looked["reads"].clear()
    assert vault.manifests(slim(vault.root), memo=memo) == first
    assert looked["keys"] == [] and looked["reads"] == []  # nothing changed: nothing looked at
    op = a_manifest(7)["op_id"]
    m = vault.read_manifest(op)
    vault.write_manifest(dict(m, restored_by="20260102T000000-000001", restored_at=5.0))
    vault.write_manifest(dict(a_manifest(N), outcome="verified"))  # another process's new operation
    looked["keys"].clear()
    looked["reads"].clear()
    got = vault.manifests(slim(vault.root), memo=memo)
    assert sorted(looked["keys"]) == sorted([op, a_manifest(N)["op_id"]])
    assert sorted(looked["reads"]) == sorted([op, a_manifest(N)["op_id"]])
    assert got == fresh(vault) and len(got) == N + 1
    assert next(x for x in got if x["op_id"] == op)["restored_by"] == "20260102T000000-000001"


def test_a_caller_changing_what_it_was_given_changes_no_later_pass(vault):
    memo = ManifestMemo()
    for m in vault.manifests(slim(vault.root), memo=memo):
        m["backup_purged"] = True
        m["files"].clear()
    assert vault.manifests(slim(vault.root), memo=memo) == fresh(vault)


def test_an_older_versions_file_and_a_seal_are_read_again(vault, looked):
    memo = ManifestMemo()
    vault.manifests(slim(vault.root), memo=memo)
    legacy = dict(a_manifest(N + 1), outcome="verified")
    os.makedirs(vault.ops, exist_ok=True)
    with open(vault.manifest_path(legacy["op_id"]), "w") as f:
        json.dump(legacy, f)
    looked["keys"].clear()
    got = vault.manifests(slim(vault.root), memo=memo)
    assert looked["keys"] == [legacy["op_id"]]  # the file's own op only
    assert got == fresh(vault) and legacy["op_id"] in {m["op_id"] for m in got}
    oplog.seal(vault.root)
    looked["keys"].clear()
    got = vault.manifests(slim(vault.root), memo=memo)
    assert len(looked["keys"]) == N + 1  # the index was reset: every key is looked at again
    assert got == fresh(vault)


def test_the_feed_is_bounded_and_says_so(vault, monkeypatch):
    monkeypatch.setattr(oplog, "FEED_KEPT", 3)
    idx = oplog.index(vault.root)
    mark = idx.mark()
    for i in range(4):  # a state is logged twice: 8 records, past the bound
        vault.write_manifest(dict(a_manifest(N + i), outcome="verified"))
    idx = oplog.index(vault.root)
    assert len(idx.changes) <= 3
    assert idx.changed_since(mark) is None  # cannot tell: every key is looked at


def test_a_pass_copies_out_only_what_its_caller_takes(vault, monkeypatch):
    """``where(run, kind)`` is judged on what the memo holds beside each manifest: one it does not
    take is never copied out (a restore's checks want one run's operations and the retirements)."""
    from tb_footprint_plugin.engine import vault as vault_mod

    memo = ManifestMemo()
    vault.manifests(slim(vault.root), memo=memo)
    run = a_manifest(5)["run"]
    loads = []
    real = vault_mod.marshal.loads
    monkeypatch.setattr(vault_mod.marshal, "loads", lambda b: loads.append(1) or real(b))
    got = vault.manifests(slim(vault.root), memo=memo, where=lambda r, kind: r == run)
    assert [m["op_id"] for m in got] == [a_manifest(5)["op_id"]] and len(loads) == 1
    monkeypatch.undo()
    assert got == [m for m in fresh(vault) if m["run"] == run]
    # and without a memo, the same answer
    assert Vault(vault.root).manifests(slim(vault.root), where=lambda r, kind: r == run) == got
