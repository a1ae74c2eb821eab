"""Review R27 F4 (on R26 F1's bucket half): a bucket reduce into a local blob folder killed after its commit record
and before its witness line was written (the batch's append, or a rewrite transaction's) is finished by the next
start, which now writes the witness line of each operation it finishes (once). Before, it wrote none: once that
run's manifest object went missing, a copied run's purge deleted the shared blobs, its only copy, as before the
witness existed. A rewrite transaction now writes its line before its journal goes (a kill later in the command
left every run it had finished unwitnessed). A real SIGKILL of the CLI at the witness append, on moto."""
import json
import os
import subprocess
import sys

import pytest

from helpers_cli import cli_env
from test_bucket_missing_manifest_keeps_shared_blobs import DROP, _json, _logdir, _manifest_key, _missing, _ops

KILLED_AT_THE_WITNESS = r'''
import os, signal, sys
from tb_footprint_plugin.engine import bucket_batch, bucket_reduce, bucket_retire, bucket_rewrite
def killed(*a, **k):
    os.kill(os.getpid(), signal.SIGKILL)
for m in (bucket_batch, bucket_reduce, bucket_rewrite, bucket_retire):  # wherever an operation writes its witness
    if hasattr(m, "append_kept"):
        m.append_kept = killed
from tb_footprint_plugin import cli
sys.exit(cli.main(sys.argv[1:]))
'''


# a batch; each run its own rewrite transaction; a retirement
@pytest.mark.parametrize("policy_name", ["drop", "archive", "retire"])
def test_a_reduce_killed_at_its_witness_is_witnessed_by_the_start_that_finishes_it(s3_bucket, tmp_path, capsys,
                                                                                   policy_name):
    src = _logdir(tmp_path / "src")
    url = s3_bucket.upload(src, "logs")
    want = s3_bucket.hashes("logs", skip=(".tb-footprint/",))
    vault = str(tmp_path / "vault")
    policy = tmp_path / "drop.json"
    policy.write_text(json.dumps(DROP))
    pol = str(policy) if policy_name == "drop" else "archive"
    if policy_name == "retire":
        verb = ["retire", url, "--backup-dir", vault, "--yes", "--quiet-period", "0", "--run"]
    else:
        verb = ["reduce", url, "--backup-dir", vault, "--policy", pol, "--yes", "--quiet-period", "0", "--verify",
                "python", "--run"]
    ops = _ops(_json(capsys, *verb, "x"))
    p = subprocess.run([sys.executable, "-c", KILLED_AT_THE_WITNESS, *verb, "w"],
                       env=cli_env(), capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert p.returncode == -9, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    rec = _json(capsys, "recover", url, "--backup-dir", vault)
    done = [o for o in rec if o.get("action") == "completed"]
    assert [r["run"] for o in done for r in o.get("runs", [])] == ["w"], rec
    ops["w"] = done[0]["runs"][0]["op_id"]
    key = _manifest_key(s3_bucket, ops["w"])
    kept_aside = s3_bucket.fs.cat_file(key)
    s3_bucket.fs.rm(key)  # w's manifest object deleted by hand
    s3_bucket.fs.invalidate_cache()
    (f,) = _missing(capsys, url, vault)  # before: nothing said, nothing named the operation
    assert f["op_id"] == ops["w"], f
    _json(capsys, "purge", url, "--run", "x", "--backup-dir", vault, "--yes")
    s3_bucket.fs.pipe_file(key, kept_aside)
    s3_bucket.fs.invalidate_cache()
    doc = _json(capsys, "restore", url, "--run", "w", "--backup-dir", vault, "--yes")
    assert [o["status"] for o in doc] == ["restored"], doc  # before: backup damaged or missing
    now = s3_bucket.hashes("logs", skip=(".tb-footprint/",))
    assert {k: v for k, v in now.items() if k.startswith("w/")} == {k: v for k, v in want.items() if k.startswith("w/")}


KILLED_AFTER_THE_WITNESS = r'''
import os, signal, sys
from tb_footprint_plugin.engine import bucket_retire
written = bucket_retire.append_kept
def then_killed(*a, **k):
    said = written(*a, **k)
    assert said is None, said
    os.kill(os.getpid(), signal.SIGKILL)
bucket_retire.append_kept = then_killed
from tb_footprint_plugin import cli
sys.exit(cli.main(sys.argv[1:]))
'''


def test_a_retirement_a_start_puts_back_after_its_witness_line_ends_the_line(s3_bucket, tmp_path, capsys):
    """A retirement killed right after its witness line (its journal still there), and an object written into its run
    meanwhile: the next start puts the run back and drops its manifest. Before, its line stayed: status said
    ``manifest_missing`` for good and every purge of the folder freed nothing, forever. Now the rollback ends the line
    before the manifest goes: status is silent and x's purge frees the blobs x alone names now."""
    src = _logdir(tmp_path / "src")
    url = s3_bucket.upload(src, "logs")
    want = s3_bucket.hashes("logs", skip=(".tb-footprint/",))
    vault = str(tmp_path / "vault")
    verb = ["retire", url, "--backup-dir", vault, "--yes", "--quiet-period", "0", "--run"]
    _ops(_json(capsys, *verb, "x"))
    p = subprocess.run([sys.executable, "-c", KILLED_AFTER_THE_WITNESS, *verb, "w"],
                       env=cli_env(), capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert p.returncode == -9, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    s3_bucket.fs.pipe_file(s3_bucket.key("logs/w/notes.txt"), b"a writer's object, written meanwhile")
    s3_bucket.fs.invalidate_cache()
    rec = _json(capsys, "recover", url, "--backup-dir", vault)
    assert [o.get("action") for o in rec] == ["rolled_back"], rec
    now = s3_bucket.hashes("logs", skip=(".tb-footprint/",))
    assert {k: v for k, v in now.items() if k.startswith("w/") and k != "w/notes.txt"} == \
        {k: v for k, v in want.items() if k.startswith("w/")}  # w back whole, beside the writer's object
    assert not _missing(capsys, url, vault)  # before: w's operation named for good
    doc = _json(capsys, "purge", url, "--run", "x", "--backup-dir", vault, "--yes")
    assert [o["run"] for o in doc["ops"]] == ["x"] and not doc["warnings"], doc
    assert doc["folder_freed_bytes"] > 0, doc  # before: 0, every blob kept
    now = s3_bucket.hashes("logs", skip=(".tb-footprint/",))
    assert {k: v for k, v in now.items() if k.startswith("w/") and k != "w/notes.txt"} == \
        {k: v for k, v in want.items() if k.startswith("w/")}
