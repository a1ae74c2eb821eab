"""A bucket's ``status`` shows each unfinished operation with what ``recover`` will do, and offers
``recover`` only when it will settle something (r27 W5's note; a disk's ``status`` already did).

Before, ``BucketEngine.status`` left ``unfinished`` empty: the CLI said only "unfinished
operations: 1" and "run `tb-footprint recover` to settle this", and recover then refused (a copy
lost from the vault: backup_damaged) — the status offered a command that settles nothing and did
not say why."""
import subprocess
import sys

from test_bucket_finish_checks_copies import STATE
from test_bucket_status_judges_journals import RUN, _killed_at, _logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Recovery


def _cli(*args) -> str:
    out = subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", *args], capture_output=True,
                         text=True, timeout=300)
    return out.stdout + out.stderr


def test_status_names_a_refusal_and_offers_no_recover(s3_bucket, tmp_path):
    url = s3_bucket.upload(_logdir(tmp_path), "logs-lost")
    _killed_at(url, "reduce.swap_record")  # committed; recover would finish it from its copies
    for k in sorted(k for k in s3_bucket.hashes("logs-lost") if k.startswith(STATE + "blobs/")):
        s3_bucket.fs.rm(f"{s3_bucket.key('logs-lost')}/{k}")  # lost by hand before the next start
    s3_bucket.fs.invalidate_cache()
    st = api.status(url)
    [row] = st["unfinished"]
    will = row["recover_will"]
    assert row["run"] == RUN and will["action"] == Recovery.REFUSED and will["code"] == Finding.BACKUP_DAMAGED, row
    assert st["settle_command"] is None, st["settle_command"]
    [out] = [r for r in api.recover_logdir(url) if r.run == RUN]
    assert (out.action, out.detail) == (Recovery.REFUSED, will["detail"])  # the words status said
    text = _cli("status", url)
    assert f"on run {RUN!r} (interrupted): recover: {will['detail']}" in text, text
    assert "to settle this" not in text, text


def test_status_offers_recover_for_what_it_settles(s3_bucket, tmp_path):
    url = s3_bucket.upload(_logdir(tmp_path), "logs-settles")
    _killed_at(url, "reduce.swap_record")
    st = api.status(url)
    [row] = st["unfinished"]
    assert row["recover_will"]["action"] == Recovery.COMPLETED, row
    assert st["settle_command"] and "recover" in st["settle_command"], st
