"""#26, a manifest gone for good, the bucket half: ``tb-footprint purge URL --forget-missing OP_ID --backup-dir F``.

A bucket logdir whose backups went to a local blob folder, runs x and w with the same bytes (their blobs stored once),
each reduced and verified; w's manifest object is deleted by hand (the set-up of
tests/test_bucket_missing_manifest_keeps_shared_blobs.py, on the real moto server). While the witness
(``.tb-footprint/blob-ops/``) names w's operation with no manifest object, every purge keeps every blob of the folder
(status: ``manifest_missing``). The verb says what ending w's line means, and with ``--yes`` appends one purge line of
w's operation to the witness (nothing deleted): status no longer says ``manifest_missing``, a purge of x frees its
blobs in the folder. Refused for x (its manifest object is listed)."""
import json

import pytest

from tb_footprint_plugin import api, cli
from tb_footprint_plugin.codes import Failure, Finding
from tb_footprint_plugin.engine.context import TransactionError
from tb_footprint_plugin.engine.purge_run import KEPT_BY

from test_bucket_missing_manifest_keeps_shared_blobs import STATE, _json, _manifest_key, _missing
from test_purge_every_blob_kept import _bucket_twins


def _witness(s3_bucket) -> list:
    raw = s3_bucket.fs.cat_file(s3_bucket.key("logs/" + STATE + "blob-ops/history.jsonl"))
    return [json.loads(x) for x in raw.decode().splitlines() if x.strip()]


def test_a_bucket_missing_manifests_line_ended_lets_a_purge_of_x_free(s3_bucket, tmp_path, capsys):
    url, vault, ops = _bucket_twins(s3_bucket, tmp_path, capsys)
    s3_bucket.fs.rm(_manifest_key(s3_bucket, ops["w"]))  # w's manifest object deleted by hand
    s3_bucket.fs.invalidate_cache()
    assert [f["op_id"] for f in _missing(capsys, url, vault)] == [ops["w"]]
    witness = _witness(s3_bucket)

    # x's manifest object is listed: refused, nothing written
    with pytest.raises(TransactionError) as e:
        api.forget_missing(url, ops["x"], yes=True, backup_dir=vault)
    assert e.value.code == Failure.REFUSED and "its manifest is there" in str(e.value), e.value

    # the preview: the operation, its kind and run, what ending it means; nothing written
    capsys.readouterr()
    assert cli.main(["purge", url, "--forget-missing", ops["w"], "--backup-dir", vault, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"operation {ops['w']} (reduce) of run w" in out and "blob-ops/history.jsonl" in out, out
    assert "run w cannot be restored by this tool whatever is chosen" in out, out
    assert "ending its line lets the next purge forget blobs no manifest names" in out, out
    assert "put the manifest back instead if you can" in out, out
    s3_bucket.fs.invalidate_cache()
    assert _witness(s3_bucket) == witness
    doc = _json(capsys, "purge", url, "--run", "x", "--backup-dir", vault, "--dry-run")
    assert doc["ops"][0][KEPT_BY] == Finding.MANIFEST_MISSING and doc["folder_freed_bytes"] == 0, doc

    # --yes: one line, a purge line of w's operation, appended to the witness
    doc = _json(capsys, "purge", url, "--forget-missing", ops["w"], "--backup-dir", vault, "--yes")
    assert doc["ended"] and doc["op_id"] == ops["w"] and doc["run"] == "w", doc
    s3_bucket.fs.invalidate_cache()
    now = _witness(s3_bucket)
    assert now[:len(witness)] == witness and len(now) == len(witness) + 1, now
    assert now[-1]["kind"] == "purge" and now[-1]["op_id"] == ops["w"] and now[-1]["freed"] == 0, now[-1]
    assert not _missing(capsys, url, vault)  # before: manifest_missing for good
    doc = _json(capsys, "purge", url, "--run", "x", "--backup-dir", vault, "--yes")
    (row,) = doc["ops"]
    assert row["run"] == "x" and row["bytes"] > 0 and KEPT_BY not in row and not doc["every_blob_kept"], doc
    assert doc["folder_freed_bytes"] > 0, doc  # before: 0, every blob of the folder kept
    # ended once: a second time is refused
    with pytest.raises(TransactionError) as e:
        api.forget_missing(url, ops["w"], yes=True, backup_dir=vault)
    assert e.value.code == Failure.REFUSED, e.value
