"""#26 (review R27 LOW, R26's remark (a)): a purge that keeps every blob because an operation the change log (a disk)
or the witness (a bucket with a local blob folder) names has no manifest frees nothing, yet it still marks the
operations it chose purged (their runs can no longer be restored). Before, a bucket's report said what their backups
were worth (`freed 900.9 KB` beside `the local backup folder: freed 0 B`). Now one rule (``purge_run.purge``) of
every store: each row of a layout that said ``manifest_missing`` frees 0 bytes and says why (``kept_by``), the
report's ``freed_bytes`` is their sum and ``every_blob_kept`` says it; a healthy purge is unchanged, and so is a row
of a layout that kept nothing (a disk's retired runs: their own copies, no shared blob)."""
import json
import os
import shutil

from tb_footprint_plugin import api, cli
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine.purge_run import KEPT_BY

from test_bucket_missing_manifest_keeps_shared_blobs import DROP, _json, _logdir, _manifest_key, _ops
from test_missing_manifest_keeps_shared_blobs import OLD, _reduce, _runs, reduce_losing_manifest


def _bucket_twins(s3_bucket, tmp_path, capsys):
    url = s3_bucket.upload(_logdir(tmp_path / "src"), "logs")
    vault = str(tmp_path / "vault")
    policy = tmp_path / "drop.json"
    policy.write_text(json.dumps(DROP))
    ops = {}
    for run in ("x", "w"):
        ops.update(_ops(_json(capsys, "reduce", url, "--run", run, "--backup-dir", vault, "--policy", policy,
                              "--yes", "--quiet-period", "0", "--verify", "python")))
    return url, vault, ops


def test_a_bucket_purge_that_keeps_every_blob_says_it_freed_nothing(s3_bucket, tmp_path, capsys):
    url, vault, ops = _bucket_twins(s3_bucket, tmp_path, capsys)
    s3_bucket.fs.rm(_manifest_key(s3_bucket, ops["w"]))  # w's manifest object deleted by hand
    s3_bucket.fs.invalidate_cache()
    for yes in (["--dry-run"], ["--yes"]):  # the preview and the purge say the same
        doc = _json(capsys, "purge", url, "--run", "x", "--backup-dir", vault, *yes)
        (row,) = doc["ops"]
        assert row["run"] == "x" and row["bytes"] == 0 and row[KEPT_BY] == Finding.MANIFEST_MISSING, doc
        assert doc["freed_bytes"] == 0 and doc["folder_freed_bytes"] == 0 and doc["every_blob_kept"], doc  # before: 900879
        assert doc["originals_lost"] == 3, doc  # x's 3 dropped files: its restore goes with its mark
        assert [w["op_id"] for w in doc["warnings"]] == [ops["w"]], doc


def test_a_healthy_bucket_purge_says_what_it_freed(s3_bucket, tmp_path, capsys):
    url, vault, _ops_ = _bucket_twins(s3_bucket, tmp_path, capsys)
    doc = _json(capsys, "purge", url, "--run", "x", "--backup-dir", vault, "--yes")
    (row,) = doc["ops"]
    assert row["bytes"] > 0 and KEPT_BY not in row and not doc["every_blob_kept"], doc
    assert doc["freed_bytes"] == row["bytes"], doc


def test_a_disk_purge_that_keeps_every_blob_says_why_its_rows_freed_nothing(tmp_path, capsys):
    logdir = _runs(tmp_path)
    shutil.copytree(logdir / "w", logdir / "y", copy_function=shutil.copy2)  # y: retired, its own copy
    for p in [logdir / "y", *(logdir / "y").rglob("*")]:
        os.utime(p, (OLD, OLD), follow_symlinks=False)
    capsys.readouterr()
    assert cli.main(["retire", str(logdir), "--run", "y", "--yes", "--quiet-period", "0"]) == 0, capsys.readouterr()
    _reduce(logdir, "x")
    reduce_losing_manifest(logdir, "w")
    for yes in (False, True):
        rep = api.purge(str(logdir), runs=["x", "y"], yes=yes).to_dict()
        rows = {r["run"]: r for r in rep["ops"]}
        assert set(rows) == {"x", "y"}, rep
        assert rows["x"]["bytes"] == 0 and rows["x"][KEPT_BY] == Finding.MANIFEST_MISSING, rep  # before: no word why
        assert rows["y"]["bytes"] > 0 and KEPT_BY not in rows["y"], rep  # a retired run's own copy goes
        assert rep["freed_bytes"] == rows["y"]["bytes"] and rep["every_blob_kept"], rep
    assert not (logdir / "y").exists()
