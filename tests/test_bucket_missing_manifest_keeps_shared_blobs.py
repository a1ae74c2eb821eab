"""Review R26 F1's bucket half: a bucket logdir with a local blob folder (``--backup-dir /folder``), runs x and w holding
identical bytes (w a copy of x: content-addressed, their blobs stored once), each reduced (or retired) and verified.
w's manifest object goes missing (deleted by hand). Before, status said nothing, and ``purge --run x`` (or a restore of
x, its release of x's claims) forgot the shared blobs, named by x's manifest only: w's only copy; w's restore then
failed once its manifest was put back. A bucket's change log has no line of a clean reduce, so nothing in the bucket
named w's operation once its manifest was gone.
Now every verified reduce and retirement into a blob folder is written to the bucket's witness
(``.tb-footprint/blob-ops/``, one append a batch) and, while an operation it names has no manifest object, every
forget keeps every blob (the disk's rule) and status names the operation and its run (``manifest_missing``).
Through the CLI, on the real moto server: purge x (reduced, retired); the restore of retired x (its release; a
bucket restore of a reduction releases nothing: its purge does)."""
import json
import os
import shutil
import time

from tb_footprint_plugin import cli, synth
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.synth.media import make_png

DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}
STATE = ".tb-footprint/"


def _logdir(root):
    """Runs x and w with the same bytes (w a copy of x): a few scalars, 20 images (archive keeps TensorBoard's 10: a
    rewrite) and profile files (what a drop keeps)."""
    with synth.EventWriter(str(root / "x")) as w:
        for s in range(5):
            w.scalar("loss", s, 1.0 / (s + 1))
        for s in range(20):
            w.image("sample", s, make_png(8, 8, seed=s), 8, 8)
    plugins = root / "x" / "plugins" / "profile" / "2024_01_01_00_00_00"
    plugins.mkdir(parents=True)
    for i in range(3):
        (plugins / f"host{i}.xplane.pb").write_bytes(b"twin" * 64 + bytes(300_000 + 37 * i))
    shutil.copytree(root / "x", root / "w")
    old = time.time() - 3600
    for d, _, names in os.walk(root):
        for n in names:
            os.utime(os.path.join(d, n), (old, old))
    return root


def _cli(capsys, *args) -> str:
    capsys.readouterr()
    rc = cli.main([str(a) for a in args])
    out = capsys.readouterr().out
    assert rc in (0, 1), (rc, out)
    return out


def _json(capsys, *args) -> dict:
    return json.loads(_cli(capsys, *args, "--json"))


def _ops(doc: dict) -> dict:
    return {o["run"]: o["op_id"] for o in doc["outcomes"] if o["status"] == "verified"}


def _manifest_key(s3_bucket, op: str) -> str:
    (k,) = [k for k in s3_bucket.fs.find(s3_bucket.key("logs/" + STATE + "manifests")) if op in k]
    return k


def _missing(capsys, url, vault) -> list:
    doc = _json(capsys, "status", url, "--backup-dir", vault)
    return [p for p in doc["problems"] if p["code"] == Finding.MANIFEST_MISSING]


def _case(s3_bucket, tmp_path, capsys, *, verb: str, retire: bool = False, policy_name: str = "") -> None:
    src = _logdir(tmp_path / "src")
    url = s3_bucket.upload(src, "logs")
    want = s3_bucket.hashes("logs", skip=(STATE,))
    vault = str(tmp_path / "vault")
    policy = tmp_path / "drop.json"
    policy.write_text(json.dumps(DROP))
    ops = {}
    for run in ("x", "w"):  # two commands: two batches, the shared content stored once
        if retire:
            doc = _json(capsys, "retire", url, "--run", run, "--backup-dir", vault, "--yes", "--quiet-period", "0")
        else:
            doc = _json(capsys, "reduce", url, "--run", run, "--backup-dir", vault, "--policy", policy_name or policy,
                        "--yes", "--quiet-period", "0", "--verify", "python")
        ops.update(_ops(doc))
    assert set(ops) == {"x", "w"}, ops
    assert not _missing(capsys, url, vault)  # healthy: nothing said
    key = _manifest_key(s3_bucket, ops["w"])
    kept_aside = s3_bucket.fs.cat_file(key)
    s3_bucket.fs.rm(key)  # w's manifest object deleted by hand
    s3_bucket.fs.invalidate_cache()
    (f,) = _missing(capsys, url, vault)
    assert f["op_id"] == ops["w"] and f["run"] == "w", f
    assert "of run w" in f["detail"] and "every backup is kept" in f["detail"], f
    assert ("retired and verified" if retire else "reduced and verified") in f["detail"], f  # its kind's words
    assert f["file"].endswith("blob-ops/history.jsonl") and f["file"] not in f["detail"], f  # named once, by its row
    if verb == "purge":
        out = _cli(capsys, "purge", url, "--run", "x", "--backup-dir", vault, "--yes")
        assert ops["w"] in out, out  # the purge says why it kept every blob
    else:
        doc = _json(capsys, "restore", url, "--run", "x", "--backup-dir", vault, "--yes")
        assert [o["status"] for o in doc] == ["restored"], doc
    s3_bucket.fs.pipe_file(key, kept_aside)  # w's manifest put back
    s3_bucket.fs.invalidate_cache()
    assert not _missing(capsys, url, vault)
    doc = _json(capsys, "restore", url, "--run", "w", "--backup-dir", vault, "--yes")
    assert [o["status"] for o in doc] == ["restored"], doc
    now = s3_bucket.hashes("logs", skip=(STATE,))
    assert {k: v for k, v in now.items() if k.startswith("w/")} == {k: v for k, v in want.items() if k.startswith("w/")}


def test_a_bucket_purge_keeps_a_missing_manifests_shared_blobs(s3_bucket, tmp_path, capsys):
    _case(s3_bucket, tmp_path, capsys, verb="purge")


def test_a_rewrite_transactions_twin_keeps_them(s3_bucket, tmp_path, capsys):
    # archive compresses the profile files: each run its own rewrite transaction (``bucket_rewrite``), not a batch
    _case(s3_bucket, tmp_path, capsys, verb="purge", policy_name="archive")


def test_a_retirements_twin_keeps_them(s3_bucket, tmp_path, capsys):
    _case(s3_bucket, tmp_path, capsys, verb="purge", retire=True)


def test_a_retired_runs_restore_release_keeps_them(s3_bucket, tmp_path, capsys):
    # a bucket restore of a reduction keeps its backups (a purge frees them); a retired run's restore releases
    # them (``bucket_putback.release_restored``): x's blobs let go, w's the same ones
    _case(s3_bucket, tmp_path, capsys, verb="restore", retire=True)
