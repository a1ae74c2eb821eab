"""#26, the blob-folder witness (``.tb-footprint/blob-ops/``): every witness line can end. A retirement into a local
blob folder writes its witness line before its journal goes; when it is then rolled back after all (its journal's
close refused by the store, or a start that finds an object written into its run meanwhile: the kill case is in
``test_bucket_witness_after_kill.py``), its manifest goes with its originals back. Before, its line stayed: status said
``manifest_missing`` for good and every purge of the folder kept every blob, forever. Now the rollback writes a line
that ends it (``history.ended_line``) before the manifest goes, read by the one rule (``said_kept_into``); a store
that refuses that line keeps the manifest (the rollback is left to the next start). CLI, on moto."""
import json

from tb_footprint_plugin.codes import Failure, StoreError
from tb_footprint_plugin.engine import bucket_retire, history
from tb_footprint_plugin.engine.bucket_state import BucketTxnError
from tb_footprint_plugin.storage.store import StoreFailure

from test_bucket_missing_manifest_keeps_shared_blobs import STATE, _json, _logdir, _missing, _ops


def _w(s3_bucket) -> dict:
    return {k: v for k, v in s3_bucket.hashes("logs", skip=(STATE,)).items() if k.startswith("w/")}


def _witness(s3_bucket) -> list:
    s3_bucket.fs.invalidate_cache()
    raw = s3_bucket.fs.cat_file(s3_bucket.key("logs/" + STATE + "blob-ops/history.jsonl"))
    return [json.loads(x) for x in raw.splitlines() if x.strip()]


def _refused_once(real, refusal):
    calls = []

    def close(*a, **k):
        if not calls:
            calls.append(1)
            raise refusal
        return real(*a, **k)
    return close


def test_a_retirement_whose_journal_would_not_close_ends_its_line(s3_bucket, tmp_path, capsys, monkeypatch):
    src = _logdir(tmp_path / "src")
    url = s3_bucket.upload(src, "logs")
    want = _w(s3_bucket)
    vault = str(tmp_path / "vault")
    verb = ["retire", url, "--backup-dir", vault, "--yes", "--quiet-period", "0", "--run"]
    _ops(_json(capsys, *verb, "x"))
    # the store refuses the journal's delete once, right after the witness line was written: rolled back in-process
    monkeypatch.setattr(bucket_retire, "must_close", _refused_once(
        bucket_retire.must_close, BucketTxnError(Failure.STORE_ERROR, "journal: could not be deleted (refused)")))
    doc = _json(capsys, *verb, "w")
    (o,) = doc["outcomes"]
    assert o["status"] == "rolled_back", o
    monkeypatch.undo()
    lines = [x for x in _witness(s3_bucket) if x.get("run") == "w"]
    assert [x["outcome"] for x in lines] == ["verified", "rolled_back"], lines  # written, then ended
    assert _w(s3_bucket) == want  # w back whole
    assert not _missing(capsys, url, vault)  # before: w's operation named for good
    purged = _json(capsys, "purge", url, "--run", "x", "--backup-dir", vault, "--yes")
    assert not purged["warnings"] and purged["folder_freed_bytes"] > 0, purged  # before: 0, every blob kept
    assert _w(s3_bucket) == want


def test_a_refused_ending_line_keeps_the_manifest_until_a_start_ends_it(s3_bucket, tmp_path, capsys, monkeypatch):
    src = _logdir(tmp_path / "src")
    url = s3_bucket.upload(src, "logs")
    want = _w(s3_bucket)
    vault = str(tmp_path / "vault")
    verb = ["retire", url, "--backup-dir", vault, "--yes", "--quiet-period", "0", "--run"]
    monkeypatch.setattr(bucket_retire, "must_close", _refused_once(
        bucket_retire.must_close, BucketTxnError(Failure.STORE_ERROR, "journal: could not be deleted (refused)")))
    real_append = history.ChangeLog.append_lines

    def no_ending(self, lines):  # the witness refuses the ending line (and only it)
        if any(x.get("outcome") == "rolled_back" for x in lines) and self.folder == history.BUCKET_KEPT:
            raise StoreFailure(StoreError.PERMISSION, "blob-ops/history.jsonl", "refused")
        return real_append(self, lines)
    monkeypatch.setattr(history.ChangeLog, "append_lines", no_ending)
    doc = _json(capsys, *verb, "w")
    (o,) = doc["outcomes"]
    assert o["status"] == "failed" and o["code"] == "rollback_incomplete", o
    ops = [k for k in s3_bucket.fs.find(s3_bucket.key("logs/" + STATE + "manifests"))]
    assert len(ops) == 1, ops  # the manifest stays while its line is not ended (it names w's blobs)
    monkeypatch.undo()
    rec = _json(capsys, "recover", url, "--backup-dir", vault)
    assert [r.get("action") for r in rec] == ["rolled_back"], rec
    assert [x["outcome"] for x in _witness(s3_bucket) if x.get("run") == "w"] == ["verified", "rolled_back"]
    assert not s3_bucket.fs.find(s3_bucket.key("logs/" + STATE + "manifests"))
    assert not _missing(capsys, url, vault)
    assert _w(s3_bucket) == want


def test_the_one_rule_reads_an_ending_line_as_the_end_of_its_operation():
    kept, ended = set(), set()
    history.said_kept_into([history.kept_line("op-a", "retire", "w"), history.kept_line("op-b", "reduce", "x"),
                            history.ended_line("op-a", "retire", "w"),
                            # a rollback that kept its backups (its manifest names them) ends nothing
                            dict(history.ended_line("op-b", "reduce", "x"), backup_kept=True)], kept, ended)
    assert kept - ended == {"op-b"}
