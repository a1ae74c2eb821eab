"""``status`` decodes each manifest's log records once, not once per pass (issue #28).

A status lists the operations, checks the catalogue (every blob a manifest names, the log's
damage), counts what a purge would free (purge's own rule, which reads the manifests again and
the blobs they claim) and names each vault's problems: six passes over the manifests, plus one
over each operation's log. Each used to read and decode every record from the operation log
again (~8 s at 1,000 operations on a loaded machine). The log's index now keeps the last read of
each operation while nothing new came in for it (``oplog.Index.memo``, bounded): the records are
read from the log files about once.
"""
import copy
import os

from tb_footprint_plugin import api
from tb_footprint_plugin.engine import oplog
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.paths import state_dir

from helpers_runs import aged_small_runs

N = 150


def test_status_reads_each_record_of_the_log_about_once(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    logdir = aged_small_runs(tmp_path / "logdir", 2)
    rep = api.reduce_logdir(logdir, policy="archive", dry_run=False)
    assert [o.status for o in rep.outcomes] == ["verified"] * 2
    root = state_dir(logdir)
    vault = Vault(root)
    model = vault.manifests()[0]
    for i in range(N):  # N more operations of this logdir, as a long history leaves them
        m = copy.deepcopy(model)
        m.pop("vault", None)
        m["op_id"] = f"20260101T{i // 3600:02d}{i // 60 % 60:02d}{i % 60:02d}-{i:06x}"
        vault.write_manifest(m)
    vault.seal_log()
    oplog._INDEXES.clear()  # a fresh process's status

    reads = [0]
    real = oplog.Index.raw

    def counted(self, *a):
        reads[0] += 1
        return real(self, *a)
    monkeypatch.setattr(oplog.Index, "raw", counted)
    st = api.status(logdir)

    assert len(st["operations"]) == N + 2
    assert not st["problems"], st["problems"]
    idx = oplog.index(root)
    records = sum(len(idx.entries(op)) for op in idx.op_ids())
    assert records >= 2 * (N + 2)  # each state is written twice (its twin line)
    # once each, and a little: before, each pass read them all again (~7 reads a record)
    assert reads[0] <= 1.2 * records + 20, (reads[0], records)


def test_a_change_logged_between_two_reads_is_seen(tmp_path):
    """What the memo kept is not served once the operation has a newer record, nor once a
    damaged line came in that may have been one of its records; a caller changing what it got
    changes nothing kept."""
    from test_oplog_segments import manifest

    vault = Vault(str(tmp_path / "vault"))
    vault.ensure()
    op = manifest(1)["op_id"]
    vault.write_manifest(manifest(1))
    vault.seal_log()  # sealed pieces: what the memo keeps
    assert "restored_by" not in vault.read_manifest(op)
    got = vault.read_manifest(op)  # from the memo
    got["files"][0]["size"] = 999
    assert vault.read_manifest(op)["files"][0]["size"] == manifest(1)["files"][0]["size"]
    vault.write_manifest(manifest(1, restored_by="20260102T000000-aaaaaa"))  # into a new segment
    assert vault.read_manifest(op)["restored_by"] == "20260102T000000-aaaaaa"
    vault.seal_log()
    assert vault.read_manifest(op)["restored_by"] == "20260102T000000-aaaaaa"
    assert vault.read_manifest(op)["restored_by"] == "20260102T000000-aaaaaa"  # from the memo
    # a third process's line of it, damaged (a kill mid-append): not hidden by what was kept
    seg = os.path.join(oplog.segments_dir(vault.root), "20260103T000000-1-00000000.jsonl")
    with open(seg, "wb") as f:
        f.write(b'{"op":"' + op.encode() + b'","seq":9,"type":"manifest_change","set":{"outcome":\n')
    assert vault.manifest_damage(op) is not None
    assert vault.read_manifest(op)["restored_by"] == "20260102T000000-aaaaaa"
