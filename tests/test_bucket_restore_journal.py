"""A bucket restore (and a retired run's restore) journals itself before its first put-back, and
the next start finishes one that stopped midway (issue 26); the journal is untrusted input there.
Also: a misspelt ``TB_FOOTPRINT_FAILPOINTS`` is refused by the CLI before anything runs."""
import json

import pytest

from tb_footprint_plugin import api, cli
from tb_footprint_plugin.codes import Outcome, Recovery
from tb_footprint_plugin.engine import faults, trust
from tb_footprint_plugin.storage import remote
from tb_footprint_plugin.storage.remote import RemoteFS

from test_objstore import _write_rewrite_logdir

RUN = "torch/resnet"
STATE = ".tb-footprint"


@pytest.fixture(scope="module")
def rewrite_logdir(tmp_path_factory):
    return _write_rewrite_logdir(tmp_path_factory.mktemp("restore-journal") / "logs")


pytestmark = pytest.mark.usefixtures("disarm_faults")


_n = iter(range(10_000))


def _hashes(bucket, prefix):
    return {k: v for k, v in bucket.hashes(prefix).items() if not k.startswith(STATE + "/")}


def _reduced(bucket, logdir):
    """A bucket logdir with one verified lossless reduce of ``RUN`` (several files changed)."""
    prefix = f"rj{next(_n)}"
    url = bucket.upload(logdir, prefix)
    before = _hashes(bucket, prefix)
    rep = api.reduce_logdir(url, policy="lossless", dry_run=False, quiet_period=0, runs=[RUN])
    (o,) = rep.outcomes
    assert o.status == Outcome.VERIFIED, o.reason
    (m,) = [m for m in RemoteFS(url).list_tree(f"{STATE}/manifests")]
    manifest = json.loads(RemoteFS(url).read_bytes(m))
    assert len(manifest["files"]) >= 2, manifest["files"]  # so a restore can stop halfway
    return prefix, url, before, o.op_id, manifest


def _journal_key(op_id):
    return f"{STATE}/journal/{op_id}.json"


def _stop_after_first_put_back(url, step="restore.file", run=None):
    def fail():
        faults.disarm_all()
        raise faults.InjectedCrash(f"stopped at {step}")

    faults.arm(step, fail)
    with pytest.raises(faults.InjectedCrash):
        api.restore(url, run=run)


def test_a_bucket_restore_journals_every_put_back_before_the_first_and_removes_it_after(s3_bucket, rewrite_logdir):
    prefix, url, before, op_id, manifest = _reduced(s3_bucket, rewrite_logdir)
    seen = []

    def look():  # at the first put-back: the journal is there, naming what is put back
        seen.append(json.loads(RemoteFS(url).read_bytes(_journal_key(op_id))))

    faults.arm("restore.file", look)
    (r,) = api.restore(url)
    assert r.status == Outcome.RESTORED, r.reason
    doc = seen[0]
    assert doc["kind"] == "restore" and doc["op"] == op_id and doc["run"] == RUN
    assert sorted((f["path"], f["backup"]) for f in doc["files"]) == \
        sorted((f["path"], f["backup"]) for f in manifest["files"])
    assert RemoteFS(url).ops.head(RemoteFS(url).path(_journal_key(op_id))) is None  # removed once the manifest says restored
    assert not RemoteFS(url).list_tree(f"{STATE}/locks")
    assert _hashes(s3_bucket, prefix) == before


def test_a_restore_stopped_midway_is_finished_at_the_next_start_without_rewriting_what_is_back(
        bucket, rewrite_logdir, monkeypatch):
    """On every store: what is back already is recognised by the store's checksums (not put back
    again, and not taken for a file written again at the name)."""
    s3_bucket = bucket
    prefix, url, before, op_id, manifest = _reduced(s3_bucket, rewrite_logdir)
    reduced = _hashes(s3_bucket, prefix)
    _stop_after_first_put_back(url)
    half = _hashes(s3_bucket, prefix)
    assert half not in (before, reduced)  # half restored
    back = {k for k, h in half.items() if before.get(k) == h and reduced.get(k) != h}
    assert back
    assert api.status(url)["unfinished_operations"] == [op_id]
    copied = []
    ops_class = type(RemoteFS(url).ops)
    real_copy = ops_class.copy

    def spy(self, src, dst, **kw):
        copied.append(dst)
        return real_copy(self, src, dst, **kw)

    monkeypatch.setattr(ops_class, "copy", spy)
    (o,) = api.recover_logdir(url)
    assert o.action == Recovery.COMPLETED and o.op_id == op_id, (o.action, o.detail)
    assert _hashes(s3_bucket, prefix) == before
    rel = {d.split(f"/{prefix}/", 1)[-1] for d in copied}
    assert copied and not rel & back, (rel, back)  # what was back already is not put back again
    assert not api.status(url)["unfinished_operations"]
    assert not RemoteFS(url).list_tree(f"{STATE}/locks")
    m = json.loads(RemoteFS(url).read_bytes(f"{STATE}/manifests/{op_id}.json"))
    assert m["status"] == "restored" and not m.get("not_restored"), m.get("not_restored")
    assert api.restore(url) == []  # nothing left to restore


@pytest.mark.parametrize("tamper,code", [
    ("backup_outside", trust.PATH_OUTSIDE),
    ("other_backup", trust.BAD_RECORD),
    ("other_op", trust.BAD_RECORD),
])
def test_a_tampered_restore_journal_is_left_alone(s3_bucket, rewrite_logdir, tamper, code):
    """The journal is untrusted: one naming a key outside the vault, a backup its manifest does not
    name for that file, or another operation than its name is never acted on."""
    prefix, url, before, op_id, manifest = _reduced(s3_bucket, rewrite_logdir)
    _stop_after_first_put_back(url)
    half = _hashes(s3_bucket, prefix)
    rfs = RemoteFS(url)
    doc = json.loads(rfs.read_bytes(_journal_key(op_id)))
    if tamper == "backup_outside":
        doc["files"][-1]["backup"] = s3_bucket.key(f"{prefix}/torch/elsewhere")
    elif tamper == "other_backup":
        doc["files"][-1]["backup"], doc["files"][0]["backup"] = doc["files"][0]["backup"], doc["files"][-1]["backup"]
    else:
        doc["op"] = "20200101T000000-abcdef"
    s3_bucket.fs.pipe_file(s3_bucket.key(f"{prefix}/{_journal_key(op_id)}"), json.dumps(doc).encode())
    (o,) = api.recover_logdir(url)
    assert o.action == Recovery.REFUSED and o.code == code, (o.action, o.code, o.detail)
    assert _hashes(s3_bucket, prefix) == half  # nothing changed
    assert rfs.ops.head(rfs.path(_journal_key(op_id))) is not None  # left in place, reported


def test_a_retired_runs_restore_journals_itself_and_is_finished_at_the_next_start(s3_bucket, rewrite_logdir):
    prefix = f"rj{next(_n)}"
    url = s3_bucket.upload(rewrite_logdir, prefix)
    before = _hashes(s3_bucket, prefix)
    rep = api.retire(url, api.retire_rule(runs=[RUN]), dry_run=False, quiet_period=0)
    (o,) = rep.outcomes
    assert o.status == Outcome.VERIFIED, o.reason
    seen = []

    def stop():
        faults.disarm_all()
        seen.append(json.loads(RemoteFS(url).read_bytes(_journal_key(o.op_id))))
        raise faults.InjectedCrash("stopped")

    faults.arm("unretire.mid_move", stop)
    with pytest.raises(faults.InjectedCrash):
        api.restore(url, run=RUN)
    assert seen[0]["kind"] == "unretire" and seen[0]["op"] == o.op_id and seen[0]["run"] == RUN
    assert _hashes(s3_bucket, prefix) != before
    (r,) = api.recover_logdir(url)
    assert r.action == Recovery.COMPLETED, (r.action, r.detail)
    assert _hashes(s3_bucket, prefix) == before
    assert not api.status(url)["unfinished_operations"]
    assert not RemoteFS(url).list_tree(f"{STATE}/locks")


@pytest.mark.parametrize("value", ["reduce.swapp=raise", "reduce.swap=kil"])
def test_the_cli_refuses_a_misspelt_failpoint_before_anything_runs(tmp_path, monkeypatch, capsys, value):
    logdir = tmp_path / "logs"
    (logdir / "run").mkdir(parents=True)
    (logdir / "run" / "events.out.tfevents.1.host").write_bytes(b"")
    monkeypatch.setenv("TB_FOOTPRINT_FAILPOINTS", value)
    rc = cli.main(["scan", str(logdir)])  # a verb that hits no failpoint: refused all the same
    err = capsys.readouterr().err
    assert rc == cli.EXIT_FAILED and "TB_FOOTPRINT_FAILPOINTS" in err and value.split("=")[0] in err, err
    rc = cli.main(["reduce", str(logdir), "--policy", "archive", "--quiet-period", "0", "--yes"])
    assert rc == cli.EXIT_FAILED
    assert sorted(p.name for p in logdir.iterdir()) == ["run"]  # no state written, nothing changed


def test_a_restore_a_store_error_stops_midway_keeps_its_journal_and_the_next_start_finishes_it(
        s3_bucket, rewrite_logdir, monkeypatch):
    """Not only a crash: a failed request after the first put-back leaves the journal (and the
    run's lock) for the next start, and says so; the next start finishes the restore."""
    prefix, url, before, op_id, manifest = _reduced(s3_bucket, rewrite_logdir)
    real_copy = remote._S3Ops.copy
    calls = []

    def second_fails(self, src, dst, **kw):
        calls.append(dst)
        if len(calls) == 2:
            raise remote.RemoteError("unavailable", "store unavailable (injected)")
        return real_copy(self, src, dst, **kw)

    monkeypatch.setattr(remote._S3Ops, "copy", second_fails)
    (r,) = api.restore(url)
    monkeypatch.setattr(remote._S3Ops, "copy", real_copy)
    assert r.status == Outcome.FAILED and "next start" in r.reason, r.reason
    assert api.status(url)["unfinished_operations"] == [op_id]
    assert RemoteFS(url).list_tree(f"{STATE}/locks")  # the journal keeps the run locked
    (o,) = api.recover_logdir(url)
    assert o.action == Recovery.COMPLETED, (o.action, o.detail)
    assert _hashes(s3_bucket, prefix) == before
    assert not api.status(url)["unfinished_operations"] and not RemoteFS(url).list_tree(f"{STATE}/locks")


def test_a_manifest_naming_a_file_outside_its_run_is_refused_before_any_journal_or_put_back(
        s3_bucket, rewrite_logdir):
    """The journal is written from the manifest: one naming a key outside its run (which the next
    start would refuse to act on, leaving a half-done restore) is refused before anything moves."""
    prefix, url, before, op_id, manifest = _reduced(s3_bucket, rewrite_logdir)
    reduced = _hashes(s3_bucket, prefix)
    manifest["files"][-1]["path"] = "exp/hist/" + manifest["files"][-1]["path"].rsplit("/", 1)[-1]
    s3_bucket.fs.pipe_file(s3_bucket.key(f"{prefix}/{STATE}/manifests/{op_id}.json"), json.dumps(manifest).encode())
    outs = api.restore(url)
    assert [o.status for o in outs] == [Outcome.FAILED] and "outside its run" in outs[0].reason, \
        [(o.status, o.reason) for o in outs]
    assert _hashes(s3_bucket, prefix) == reduced
    assert not api.status(url)["unfinished_operations"] and not RemoteFS(url).list_tree(f"{STATE}/locks")
