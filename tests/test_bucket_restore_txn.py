"""A bucket's restore of a reduction is one transaction run by ``engine.txn.run`` (issue #26 item 2):
``bucket_restore.ObjectRestore``, its journal the commit point. A cancel is honoured by the driver
before the first original goes back (the run left as it was, no journal or lock left, the outcome
coded ``interrupted``) and never after (a restore is finished, not undone)."""
from __future__ import annotations

import json

import pytest

from helpers_txn import observe_txn
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine import bucket_restore, faults, txn
from tb_footprint_plugin.engine.bucket_manifests import manifests
from tb_footprint_plugin.engine.bucket_state import BucketVault
from tb_footprint_plugin.engine.context import CancelToken
from tb_footprint_plugin.storage.remote import RemoteFS
from tb_footprint_plugin.storage.store_object import ObjectStore

from test_objstore import _write_rewrite_logdir

RUN = "torch/resnet"
STATE = ".tb-footprint"

pytestmark = pytest.mark.usefixtures("disarm_faults")

_n = iter(range(10_000))


@pytest.fixture(scope="module")
def rewrite_logdir(tmp_path_factory):
    return _write_rewrite_logdir(tmp_path_factory.mktemp("restore-txn") / "logs")


def _user(bucket, prefix):
    return {k: v for k, v in bucket.hashes(prefix).items() if not k.startswith(STATE + "/")}


def _state(bucket, prefix, under):
    return sorted(k for k in bucket.hashes(prefix) if k.startswith(f"{STATE}/{under}/"))


def _reduced(bucket, logdir):
    """A bucket logdir with one verified lossless reduce of ``RUN`` (several objects changed):
    its URL and prefix, the user's objects before the reduce and after it."""
    prefix = f"rt{next(_n)}"
    url = bucket.upload(logdir, prefix)
    before = _user(bucket, prefix)
    rep = api.reduce_logdir(url, policy="lossless", dry_run=False, quiet_period=0, runs=[RUN])
    (o,) = rep.outcomes
    assert o.status == Outcome.VERIFIED, o.reason
    after = _user(bucket, prefix)
    assert after != before
    return url, prefix, before, after


def _restore(url, cancel):
    """``bucket_restore.restore_op`` of the logdir's one reduction, with ``cancel``."""
    ostore = ObjectStore(url)
    vault = BucketVault.for_logdir(ostore)
    (m,) = manifests(ostore, vault)
    assert len(m["files"]) >= 2, m["files"]  # so a cancel during the put-back has one still to go
    return bucket_restore.restore_op(ostore, vault, m, cancel=cancel)


def test_a_bucket_restore_is_an_ObjectRestore_run_by_the_driver_step_by_step(s3_bucket, rewrite_logdir, monkeypatch):
    """The driver's steps in order: the journal (lock, checks, journal object), the empty steps and
    the swap record (the journal is the commit point), the put-backs with ``restore.file`` after
    each, then the commit; every original back byte for byte."""
    url, prefix, before, _after = _reduced(s3_bucket, rewrite_logdir)
    seen, log = observe_txn(monkeypatch, ["restore.file"])
    (r,) = api.restore(url)
    assert r.status == Outcome.RESTORED, r.to_dict()
    assert seen == ["ObjectRestore"]
    files = log.count("restore.file")
    assert files >= 2
    assert log == ["journal", "backup", "stage", "transform", "verify", "last_look", "record:swap",
                   "swap"] + ["restore.file"] * files + ["commit"], log
    assert _user(s3_bucket, prefix) == before
    assert _state(s3_bucket, prefix, "journal") == [] and _state(s3_bucket, prefix, "locks") == []


def test_a_cancel_before_the_put_back_leaves_every_object_as_it_was(s3_bucket, rewrite_logdir, monkeypatch):
    url, prefix, before, after = _reduced(s3_bucket, rewrite_logdir)
    journals = []
    token = CancelToken()
    token.cancel()  # e.g. Ctrl-C while the restore took its lock and wrote its journal
    real = bucket_restore.start_journal

    def start(st, doc):  # the journal is written before the driver looks at the cancel
        journals.append(doc["op"])
        return real(st, doc)

    monkeypatch.setattr(bucket_restore, "start_journal", start)
    out = _restore(url, token)
    assert (out.status, out.code) == (Outcome.FAILED, Failure.INTERRUPTED), out.to_dict()
    assert "cancelled" in out.reason and "nothing was put back" in out.reason, out.reason
    assert journals == [out.op_id]
    assert out.created_files == [] and out.removed_files == []
    assert _user(s3_bucket, prefix) == after  # every object as the reduce left it, byte for byte
    assert _state(s3_bucket, prefix, "journal") == [] and _state(s3_bucket, prefix, "locks") == []
    ops = api.operations(url)
    assert [(m["op_id"], m.get("restored_by")) for m in ops] == [(out.op_id, None)]  # still restorable
    assert api.recover_logdir(url) == []  # nothing left for the next start to settle
    (r,) = api.restore(url)
    assert r.status == Outcome.RESTORED, r.to_dict()
    assert _user(s3_bucket, prefix) == before


def test_a_cancel_during_the_put_back_does_not_stop_it(s3_bucket, rewrite_logdir):
    url, prefix, before, _after = _reduced(s3_bucket, rewrite_logdir)
    token = CancelToken()
    hits = []

    def cancel_now():
        hits.append(token.cancelled)
        token.cancel()

    faults.arm("restore.file", cancel_now)  # after the first original is back
    out = _restore(url, token)
    assert token.cancelled and hits[0] is False and len(hits) >= 2  # the put-back went on after the cancel
    assert out.status == Outcome.RESTORED, out.to_dict()
    assert _user(s3_bucket, prefix) == before  # finished, not undone
    assert _state(s3_bucket, prefix, "journal") == [] and _state(s3_bucket, prefix, "locks") == []
    (m,) = [json.loads(RemoteFS(url).read_bytes(k)) for k in RemoteFS(url).list_tree(f"{STATE}/manifests")]
    assert m.get("restored_by")


DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


def _two_runs(root):
    """Runs ``a`` and ``b``: scalars and a profile session of two objects each (a drop-only reduce
    removes the session)."""
    import os
    import time

    from tb_footprint_plugin import synth

    for name in ("a", "b"):
        with synth.EventWriter(str(root / name)) as w:
            for s in range(5):
                w.scalar("loss", s, 1.0 / (s + 1))
        session = root / name / "plugins" / "profile" / "2026_01_01_00_00_00"
        session.mkdir(parents=True)
        (session / "host.xplane.pb").write_bytes(os.urandom(3000))
        (session / "host.trace.json.gz").write_bytes(os.urandom(2000))
    old = time.time() - 7 * 86400
    for d, dirs, names in os.walk(root):
        for n in names + dirs:
            os.utime(os.path.join(d, n), (old, old))
    return root


def test_a_cancel_reaches_a_bucket_restore_through_the_api(s3_bucket, tmp_path, monkeypatch):
    """``api.restore(cancel=)`` on a bucket: the run under way when the cancel comes (its journal
    written, nothing put back) is left as it was, coded ``interrupted``; the run after it is not
    started (``cancelled``); both are given to ``on_outcome``, and a later restore brings both back."""
    prefix = f"rt{next(_n)}"
    url = s3_bucket.upload(_two_runs(tmp_path / "logs"), prefix)
    before = _user(s3_bucket, prefix)
    rep = api.reduce_logdir(url, policy=DROP, dry_run=False, quiet_period=0)
    assert sorted((o.run, o.status) for o in rep.outcomes) == [("a", Outcome.VERIFIED), ("b", Outcome.VERIFIED)]
    after = _user(s3_bucket, prefix)
    assert after != before
    token = CancelToken()
    real = bucket_restore.start_journal

    def start(st, doc):  # Ctrl-C right after the first run's journal is written
        made = real(st, doc)
        token.cancel()
        return made

    monkeypatch.setattr(bucket_restore, "start_journal", start)
    landed = []
    outs = api.restore(url, cancel=token, on_outcome=landed.append)
    assert [(o.status, o.code) for o in outs] == [(Outcome.FAILED, Failure.INTERRUPTED),
                                                   (Outcome.SKIPPED, "cancelled")], [o.to_dict() for o in outs]
    assert landed == outs and {o.run for o in outs} == {"a", "b"}
    assert _user(s3_bucket, prefix) == after  # neither run changed
    assert _state(s3_bucket, prefix, "journal") == [] and _state(s3_bucket, prefix, "locks") == []
    monkeypatch.undo()
    outs = api.restore(url)
    assert [o.status for o in outs] == [Outcome.RESTORED] * 2, [o.to_dict() for o in outs]
    assert _user(s3_bucket, prefix) == before
