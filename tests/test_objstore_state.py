"""Issue #25 on bucket logdirs, against the object-store servers (moto S3, the GCS emulator,
Azurite): a damaged state object blocks nothing and is named by its URL (#25.4), and records a
writer put into an object after its reduction are never hidden by a restore (#25.3)."""
import io
import json
import os
import subprocess
import sys

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Finding, Outcome, Recovery
from tb_footprint_plugin.scan.tfrecord import RecordReader, RecordWriter
from tb_footprint_plugin.storage.remote import RemoteFS

from test_objstore import _write_rewrite_logdir

GARBAGE = b"\xff\xfe{not json \x80\x81"
JOURNAL_GARBAGE = b'{"op": "op-damaged", "runs": 7, "step": "swapping"}'


@pytest.fixture(scope="module")
def rewrite_logdir(tmp_path_factory):
    return _write_rewrite_logdir(tmp_path_factory.mktemp("state") / "logs")


def _cli(*args):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    return subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", *args],
                          capture_output=True, text=True, env=env, timeout=300)


def _hashes(bucket, prefix):
    return {k: v for k, v in bucket.hashes(prefix).items() if not k.startswith(".tb-footprint/")}


def _two_reductions(bucket, logdir):
    """Two verified bucket reduces of two runs (lossless gzips the traces of one, archive rewrites
    the event file of the other), each writing the batch ledger; returns (url, hashes before,
    op of the first, op of the second)."""
    url = bucket.upload(logdir, "logs")
    before = _hashes(bucket, "logs")
    ops = []
    for run, policy in (("torch/resnet", "lossless"), ("exp/hist", "archive")):
        rep = api.reduce_logdir(url, policy=policy, dry_run=False, quiet_period=0, runs=[run], ledger="default")
        (o,) = rep.outcomes
        assert o.status == Outcome.VERIFIED, (o.status, o.reason)
        ops.append(o.op_id)
    return url, before, ops[0], ops[1]


def test_damaged_state_objects_block_nothing_and_are_named(s3_bucket, rewrite_logdir):
    """Non-UTF-8 bytes in one manifest and one ledger object, JSON of the wrong shape in one
    journal object of a bucket logdir: `status` (exit 0), `verify` (exit 1), `recover` (exit 1: a
    journal it could not settle) and `restore --all --yes` (exit 1: a manifest it could not read
    may hide a backup) each name the damaged objects by their URL; the intact reduction is still
    listed and restored byte for byte, and the damaged reduction's backups stay in the vault.

    On S3 alone (CI time): a state object is read by the same ``Store`` call on every store, and
    the contract trust matrix plants damaged state on each (tests/contract/test_trust_matrix.py)."""
    bucket = s3_bucket
    url, before, damaged_op, intact_op = _two_reductions(bucket, rewrite_logdir)
    rfs = RemoteFS(url)
    state = rfs.list_tree(".tb-footprint")
    manifest_key = f".tb-footprint/manifests/{damaged_op}.json"
    ledger_key = next(k for k in state if k.startswith(".tb-footprint/ledgers/"))
    journal_key = ".tb-footprint/journal/op-damaged.json"
    # not UTF-8 (manifest, ledger); JSON of the wrong shape (journal)
    damage = {manifest_key: GARBAGE, ledger_key: GARBAGE, journal_key: JOURNAL_GARBAGE}
    for key, data in damage.items():
        bucket.fs.pipe_file(bucket.key("logs/" + key), data)
    urls = {k: rfs.url_of(k) for k in (manifest_key, ledger_key, journal_key)}
    blobs_before = {k for k in rfs.list_tree(".tb-footprint") if k.startswith(f".tb-footprint/blobs/{damaged_op}/")}
    assert blobs_before

    # the tab's status: the intact reduction listed, the damaged manifest and ledger object named
    st = api.status(url)
    assert [o["op_id"] for o in st["operations"]] == [intact_op]
    named = json.dumps(st)
    assert urls[manifest_key] in named and urls[ledger_key] in named
    assert any(p.get("code") == Finding.MANIFEST_DAMAGED and urls[manifest_key] in p.get("detail", "")
               for p in st["problems"]), st["problems"]
    out = _cli("status", url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert urls[manifest_key] in out.stdout and urls[ledger_key] in out.stdout, out.stdout

    # verify checks every intact backup and fails naming the manifest that may hide one
    res = api.verify(url)
    assert [r["op_id"] for r in res if r["ok"]] == [intact_op]
    assert any(not r["ok"] and r.get("code") == Finding.MANIFEST_DAMAGED for r in res), res
    out = _cli("verify", url)
    assert out.returncode == 1 and urls[manifest_key] in out.stdout, out.stdout + out.stderr

    out = _cli("recover", url)
    assert out.returncode == 1, out.stdout + out.stderr
    assert urls[journal_key] in out.stdout + out.stderr
    assert any(p.get("code") == Finding.DAMAGED_FILE and p.get("file") == urls[journal_key]
               for p in api.status(url)["problems"])

    # the tab's restore of everything: the intact one comes back, the damaged manifest is an outcome
    outs = api.restore(url)
    restored = [o for o in outs if o.status == Outcome.RESTORED]
    assert [o.op_id for o in restored] == [intact_op], [(o.op_id, o.status, o.reason) for o in outs]
    blocked = [o for o in outs if o.status == Outcome.FAILED]
    assert blocked and blocked[0].code == Failure.RESTORE_BLOCKED and urls[manifest_key] in blocked[0].reason
    now = _hashes(bucket, "logs")
    assert all(now[k] == h for k, h in before.items() if k.startswith("exp/hist/"))
    assert {k for k in rfs.list_tree(".tb-footprint") if k.startswith(f".tb-footprint/blobs/{damaged_op}/")} == blobs_before

    out = _cli("restore", url, "--all", "--yes")
    assert out.returncode == 1, out.stdout + out.stderr
    assert urls[manifest_key] in out.stdout + out.stderr
    # nothing was hidden or destroyed: the damaged objects are still there, as they were
    for key, data in damage.items():
        assert bucket.fs.cat_file(bucket.key("logs/" + key)) == data


def _grow_reduced_event_object(bucket, rewrite_logdir):
    """A bucket logdir whose exp/hist event object was rewritten by archive and then rewritten by
    a resumed writer as the reduced bytes plus five records and a partial one; returns
    (url, hashes before the reduce, event key, records, their framed bytes, grown object)."""
    url = bucket.upload(rewrite_logdir, "logs")
    before = _hashes(bucket, "logs")
    rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0, runs=["exp/hist"])
    (o,) = rep.outcomes
    assert o.status == Outcome.VERIFIED, (o.status, o.reason)
    ev = next(k for k in before if k.startswith("exp/hist/") and "tfevents" in k)
    reduced = bucket.fs.cat_file(bucket.key("logs/" + ev))
    late = [f"late record {i}".encode() * (i + 1) for i in range(5)]
    buf = io.BytesIO()
    w = RecordWriter(buf)
    for p in late:
        w.write(p)
    framed = buf.getvalue()
    grown = reduced + framed + framed[:7]  # and a record the writer is in the middle of
    bucket.fs.pipe_file(bucket.key("logs/" + ev), grown)
    return url, before, ev, late, framed, grown


def test_records_written_after_a_bucket_rewrite_come_back_beside_the_restored_original(bucket, rewrite_logdir):
    """A resumed job "appends" to a reduced event object the only way a store allows: it writes
    a new version holding the reduced bytes plus its new records. `restore` then puts back the
    original byte for byte and the complete late records go back into the run as
    `<file>.salvaged-001` (TensorBoard reads it next); a trailing partial record is not passed
    off as one. The grown object itself is kept in the vault; the outcome carries
    `late_records_restored`, and `status` lists what was kept and how to bring it back."""
    url, before, ev, late, framed, grown = _grow_reduced_event_object(bucket, rewrite_logdir)
    outs = api.restore(url)
    (r,) = outs
    assert r.status == Outcome.RESTORED, r.reason
    assert r.code == Finding.LATE_RECORDS_RESTORED, (r.code, r.reason)
    salvaged = ev + ".salvaged-001"
    assert salvaged in r.reason
    now = _hashes(bucket, "logs")
    assert {k: h for k, h in now.items() if k != salvaged} == before  # every original byte back
    data = bucket.fs.cat_file(bucket.key("logs/" + salvaged))
    assert data == framed
    assert [x.data for x in RecordReader(io.BytesIO(data), verify=True)] == late
    # the grown object (reduced bytes, late records, the partial one) is kept in the vault
    st = api.status(url)
    (kb,) = st["kept_blobs"]
    assert kb["code"] == Finding.LATE_RECORDS_RESTORED and kb["path"] == ev
    assert kb["late_records"] == len(late) and kb["late_records_file"] == salvaged
    kept_path = kb["blob"].split("://", 1)[1]
    assert bucket.fs.cat_file(kept_path) == grown
    assert kb["present"] and kb["bring_back"]
    out = _cli("status", url)
    assert out.returncode == 0 and salvaged in out.stdout and kb["blob"] in out.stdout, out.stdout + out.stderr


def test_a_restore_stopped_after_putting_the_original_back_records_the_late_records_when_finished(
        s3_bucket, rewrite_logdir):
    """A restore that stops right after putting the original over a grown object (before the
    manifest records anything) is finished by the next start from its journal: the records already
    back in the run are found as they are (no second `.salvaged-` file), and the grown object kept
    in the vault is recorded and listed by status."""
    from tb_footprint_plugin.engine import faults

    url, before, ev, late, framed, grown = _grow_reduced_event_object(s3_bucket, rewrite_logdir)
    faults.arm("restore.file", "crash")
    try:
        with pytest.raises(faults.InjectedCrash):
            api.restore(url)
    finally:
        faults.disarm_all()
    assert api.status(url)["kept_blobs"] == []  # nothing recorded yet
    assert api.status(url)["unfinished_operations"]  # the restore's journal
    (r,) = api.recover_logdir(url)
    salvaged = ev + ".salvaged-001"
    assert r.action == Recovery.COMPLETED and r.code == Finding.RECOVERED, (r.action, r.detail)
    assert salvaged in r.detail, r.detail
    assert api.restore(url) == [] and not api.status(url)["unfinished_operations"]
    now = _hashes(s3_bucket, "logs")
    assert {k: h for k, h in now.items() if k != salvaged} == before
    assert s3_bucket.fs.cat_file(s3_bucket.key("logs/" + salvaged)) == framed
    (kb,) = api.status(url)["kept_blobs"]
    assert kb["late_records_file"] == salvaged and kb["late_records"] == len(late)
    assert s3_bucket.fs.cat_file(kb["blob"].split("://", 1)[1]) == grown


def test_an_original_a_restore_could_not_put_back_is_never_purged(bucket, rewrite_logdir, monkeypatch):
    """A restore that finds a file written again at a deleted original's name keeps it in the
    vault and puts the original over it only while it is that file (issue #26, review R21 PD12:
    a disk's rule); a file written there once more before the put is left as it is, so the
    original exists only in the vault: the restore says so, and `purge --yes` keeps that
    operation's backups (listed with `not_restored`) instead of deleting the only copy.
    (It tested the bucket's old way, a file written again left there whatever it held; the
    original goes back over it now, ``test_bucket_restore_written_again``.)"""
    from tb_footprint_plugin.engine import bucket_restore

    url = bucket.upload(rewrite_logdir, "logs")
    before = _hashes(bucket, "logs")
    rep = api.reduce_logdir(url, policy="lossless", dry_run=False, quiet_period=0, runs=["torch/resnet"])
    (o,) = rep.outcomes
    assert o.status == Outcome.VERIFIED, o.reason
    gone = sorted(set(before) - set(_hashes(bucket, "logs")))
    assert gone, "the reduce removed no original"
    bucket.fs.pipe_file(bucket.key("logs/" + gone[0]), b"written again by someone")
    real = bucket_restore.keep_standing

    def kept_then_written_once_more(*a, **kw):
        kept = real(*a, **kw)
        bucket.fs.pipe_file(bucket.key("logs/" + gone[0]), b"and once more, before the original's put")
        return kept

    monkeypatch.setattr(bucket_restore, "keep_standing", kept_then_written_once_more)
    (r,) = api.restore(url)
    monkeypatch.undo()
    assert r.status == Outcome.RESTORED, r.reason
    assert gone[0] in r.reason, r.reason  # named; that its original stays is purge's code below
    # coded as every store codes an original left in the vault (a disk's unretire, a bucket's):
    # the CLI's restore exits 1 for it, since what was asked for is not all back
    assert r.code == Finding.NOT_RESTORED, (r.code, r.reason)
    bucket.fs.invalidate_cache()
    assert bucket.fs.cat_file(bucket.key("logs/" + gone[0])) == b"and once more, before the original's put"
    backups = {k for k in RemoteFS(url).list_tree(".tb-footprint") if k.startswith(".tb-footprint/blobs/")}
    assert backups
    p = api.purge(url, yes=True)
    assert not [x for x in p.ops if x["op_id"] == o.op_id], p.ops
    (k,) = [x for x in p.kept if x["op_id"] == o.op_id]
    assert k["code"] == Finding.NOT_RESTORED and gone[0] in k["detail"], k
    after = {k for k in RemoteFS(url).list_tree(".tb-footprint") if k.startswith(".tb-footprint/blobs/")}
    assert after == backups  # the only copy of the original is still there
