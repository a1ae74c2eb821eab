"""A removed name written again before the restore: a bucket's restore does what a disk's does
(issue #26, review R21 PD12). The disk puts the original back and keeps what stood at the path in
the vault (``displaced_kept``, exit 0); the bucket left the newcomer and kept the original
(``not_restored``, exit 1). Now the bucket copies the newcomer into the vault at the version it
read (its ``displaced`` record in the restore's journal first), checks the copy, and copies the
original over the name conditional on that version; ``status`` lists the kept copy with the
command that brings it back beside the path, and purge keeps it.

- a crash at each instant of it (after the journal record, after the newcomer's copy, after the
  original's put) leaves both byte strings, and the next start finishes the restore;
- a name written once more between the restore's look and its put is left as it is, and its
  original kept in the vault (``not_restored``), the newcomer's copy listed too: nothing lost."""
import json

import pytest

from helpers_crash import Killed
from tb_footprint_plugin import api, cli
from tb_footprint_plugin.codes import Finding, Outcome, Recovery
from tb_footprint_plugin.engine import bucket_restore, faults

from test_objstore import _write_rewrite_logdir

pytestmark = pytest.mark.usefixtures("disarm_faults")

RUN = "torch/resnet"
NEW = b"a job wrote this name again after the reduce\n"
NEWER = b"and once more, between the restore's look and its put\n"


@pytest.fixture(scope="module")
def rewrite_logdir(tmp_path_factory):
    return _write_rewrite_logdir(tmp_path_factory.mktemp("again") / "logs")


def _user(bucket):
    return {k: v for k, v in bucket.hashes("logs").items() if not k.startswith(".tb-footprint/")}


def _reduced_then_written_again(bucket, logdir):
    """RUN reduced (lossless: its traces gzipped, the originals' names removed), then its first
    removed name written again: (url, hashes before the reduce, that name, its original bytes)."""
    url = bucket.upload(logdir, "logs")
    before = _user(bucket)
    (o,) = api.reduce_logdir(url, policy="lossless", dry_run=False, quiet_period=0, runs=[RUN]).outcomes
    assert o.status == Outcome.VERIFIED, o.reason
    gone = sorted(set(before) - set(_user(bucket)))
    assert gone, "the reduce removed no original"
    original = (logdir / gone[0]).read_bytes()
    bucket.fs.pipe_file(bucket.key("logs/" + gone[0]), NEW)
    return url, before, gone[0], original


def _kept_rows(url, path):
    return [k for k in api.status(url)["kept_blobs"] if k["path"] == path]


def _kept_bytes(bucket, row):
    bucket.fs.invalidate_cache()
    return bucket.fs.cat_file(row["blob"].split("://", 1)[1])


def test_the_original_goes_back_and_the_newcomer_is_kept_in_the_vault(bucket, rewrite_logdir, capsys):
    url, before, name, original = _reduced_then_written_again(bucket, rewrite_logdir)
    assert cli.main(["restore", url, RUN, "--yes"]) == cli.EXIT_OK, capsys.readouterr()
    out = capsys.readouterr().out
    assert "as they stood before the restore kept in the vault" in out and "how to bring them back" in out, out
    assert _user(bucket) == before  # every original back at its name, the gzipped copies gone
    (row,) = _kept_rows(url, name)
    assert (row["code"], row["present"], row["size"]) == (Finding.DISPLACED_KEPT, True, len(NEW)), row
    assert "as it stood before the restore" in row["holds"], row
    assert _kept_bytes(bucket, row) == NEW
    # brought back beside the path, as a disk's ``<path>.kept`` (not an event file's name)
    assert row["bring_back"].endswith(" " + url + "/" + name + ".kept"), row["bring_back"]
    [op] = [m for m in api.operations(url) if m.get("run") == RUN]
    assert op["restored_by"] and not op.get("not_restored"), op
    # status says it as a disk's does
    assert cli.main(["status", url]) == cli.EXIT_OK
    assert f"[{Finding.DISPLACED_KEPT}]" in capsys.readouterr().out
    # and history's line of the restore, as a disk's
    [line] = [e for e in api.history(url) if e["kind"] == "restore" and e["run"] == RUN]
    assert line["code"] == Finding.DISPLACED_KEPT, line
    # purge frees the operation's backups and keeps what the restore kept (no backup holds it)
    rep = api.purge(url, yes=True)
    assert [x["op_id"] for x in rep.ops] == [op["op_id"]] and not rep.kept, rep.to_dict()
    (row,) = _kept_rows(url, name)
    assert row["present"] and _kept_bytes(bucket, row) == NEW


def _crash(monkeypatch, when):
    """Stop the restore (a ``Killed``, as a SIGKILL would) right after the newcomer's journal
    record (``record``), after its copy into the vault (``copy``), or after the original's put
    (``put``: the ``restore.file`` failpoint)."""
    if when == "put":
        faults.arm("restore.file", lambda: (_ for _ in ()).throw(Killed()))
        return
    real = bucket_restore.keep_standing

    def keep_then_killed(*a, **kw):
        if when == "copy":
            real(*a, **kw)
        raise Killed()

    monkeypatch.setattr(bucket_restore, "keep_standing", keep_then_killed)


@pytest.mark.parametrize("when", ["record", "copy", "put"])
def test_a_crash_at_any_instant_leaves_both_and_the_next_start_finishes(s3_bucket, rewrite_logdir, monkeypatch, when):
    url, before, name, original = _reduced_then_written_again(s3_bucket, rewrite_logdir)
    _crash(monkeypatch, when)
    with pytest.raises(Killed):
        api.restore(url, run=RUN)
    monkeypatch.undo()
    faults.disarm_all()
    s3_bucket.fs.invalidate_cache()
    (jkey,) = [k for k in s3_bucket.fs.find(s3_bucket.key("logs/.tb-footprint/journal")) if k.endswith(".json")]
    doc = json.loads(s3_bucket.fs.cat_file(jkey))
    [rec] = doc["displaced"]  # recorded before the copy and the put
    assert rec["path"] == name and rec["size"] == len(NEW), rec
    kept = s3_bucket.fs.exists(rec["kept"])
    at_name = s3_bucket.fs.cat_file(s3_bucket.key("logs/" + name))
    # both byte strings somewhere: the newcomer at its name until the original's put, then in the vault
    assert (at_name, kept) == {"record": (NEW, False), "copy": (NEW, True), "put": (original, True)}[when]
    if kept:
        assert s3_bucket.fs.cat_file(rec["kept"]) == NEW
    [r] = [r for r in api.recover_logdir(url) if r.run == RUN]
    assert r.action == Recovery.COMPLETED, vars(r)
    assert _user(s3_bucket) == before
    (row,) = _kept_rows(url, name)
    assert (row["code"], row["present"]) == (Finding.DISPLACED_KEPT, True) and _kept_bytes(s3_bucket, row) == NEW
    assert not s3_bucket.fs.find(s3_bucket.key("logs/.tb-footprint/journal"))


def test_a_name_written_once_more_before_the_put_is_left_and_its_original_kept(s3_bucket, rewrite_logdir, monkeypatch):
    url, before, name, original = _reduced_then_written_again(s3_bucket, rewrite_logdir)
    real = bucket_restore.keep_standing

    def keep_then_written_again(*a, **kw):
        kept = real(*a, **kw)
        s3_bucket.fs.pipe_file(s3_bucket.key("logs/" + name), NEWER)
        return kept

    monkeypatch.setattr(bucket_restore, "keep_standing", keep_then_written_again)
    (r,) = api.restore(url, run=RUN)
    monkeypatch.undo()
    assert (r.status, r.code) == (Outcome.RESTORED, Finding.NOT_RESTORED), (r.code, r.reason)
    s3_bucket.fs.invalidate_cache()
    assert s3_bucket.fs.cat_file(s3_bucket.key("logs/" + name)) == NEWER  # never overwritten blindly
    rows = {k["code"]: k for k in _kept_rows(url, name)}
    assert set(rows) == {Finding.DISPLACED_KEPT, Finding.NOT_RESTORED}, rows
    assert _kept_bytes(s3_bucket, rows[Finding.DISPLACED_KEPT]) == NEW
    assert s3_bucket.fs.cat_file(rows[Finding.NOT_RESTORED]["blob"].split("://", 1)[1]) == original
    # purge keeps the original's only copy
    rep = api.purge(url, yes=True)
    assert [(k["code"], name in k["detail"]) for k in rep.kept] == [(Finding.NOT_RESTORED, True)], rep.to_dict()
    assert s3_bucket.fs.cat_file(rows[Finding.NOT_RESTORED]["blob"].split("://", 1)[1]) == original


def test_a_reduced_object_rewritten_since_is_kept_and_the_original_put_back(s3_bucket, rewrite_logdir):
    """The same rule for a rewritten event object changed since the reduce other than by records
    appended to it (a grown one has its own test, ``test_bucket_restore_displaced_code``): a disk
    keeps whatever stood at the path and puts the original back; the bucket left it and kept the
    original (``not_restored``)."""
    url = s3_bucket.upload(rewrite_logdir, "logs")
    before = _user(s3_bucket)
    (o,) = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0, runs=["exp/hist"]).outcomes
    assert o.status == Outcome.VERIFIED, o.reason
    ev = next(k for k in before if k.startswith("exp/hist/") and "tfevents" in k)
    s3_bucket.fs.pipe_file(s3_bucket.key("logs/" + ev), NEW)
    (r,) = api.restore(url, run="exp/hist")
    assert (r.status, r.code) == (Outcome.RESTORED, Finding.DISPLACED_KEPT), (r.code, r.reason)
    assert _user(s3_bucket) == before
    (row,) = _kept_rows(url, ev)
    assert (row["code"], row["present"], row["late_records"]) == (Finding.DISPLACED_KEPT, True, 0), row
    assert _kept_bytes(s3_bucket, row) == NEW
