"""A drop-only bucket batch keeps its run locks alive through its journal (issue #28 item 5).

Every third of a lease the lease thread renewed each lock a batch held: one put a lock, so a batch
of 250 runs that took longer than 40 s paid 250 puts more, and twice as many runs in a batch that
took twice as long paid four times the renewals (10,000 runs: 2.17 puts a run, 1.11x a naive
delete; 4 shard workers at 2,000 runs: 5.0 puts a run against 2.3 at 100). Now the journal object
is rewritten once for the batch instead (``bucket_lease.delegate``, ``ObjectJournal.renew``): the
requests a run stay flat however long a batch takes, and a journal changed under its writer loses
every lock of the batch, as a lock changed under its holder is lost.
"""
import json
import time
from urllib.parse import unquote, urlsplit

import pytest

from test_scale_buckets import PROFILE, run_name, templates, upload  # noqa: F401 - the module's fixture
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import bucket_batch, bucket_lease, lease
from tb_footprint_plugin.engine.bucket_state import BucketState, lock_run, new_journal, unlock_all
from tb_footprint_plugin.engine.context import new_op_id
from tb_footprint_plugin.engine.journal import Rec
from tb_footprint_plugin.storage.store_object import ObjectStore


def _kind(path: str) -> str:
    """The kind of state object (or of logdir object) an S3 request's key names."""
    key = unquote(urlsplit(path).path).strip("/").partition("/")[2]
    if "/.tb-footprint/" not in f"/{key}":
        return "logdir"
    return key.split("/.tb-footprint/", 1)[1].split("/", 1)[0].removesuffix(".json")


@pytest.fixture
def by_kind(s3_bucket, monkeypatch):
    """The S3 server behind a counting proxy; ``puts``: the puts (not copies) per state folder."""
    from faulty_proxy import FaultyProxy, Rule

    proxy = FaultyProxy(upstream=s3_bucket.server.endpoint).start()
    puts = {}

    def record(method, path):
        if method == "PUT":
            puts[_kind(path)] = puts.get(_kind(path), 0) + 1
        return False  # never a fault: only watching

    proxy.rules.append(Rule(match=record, fault=(500, b""), times=0))
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("S3_ENDPOINT", proxy.endpoint)
    try:
        yield s3_bucket, proxy, puts
    finally:
        proxy.stop()


def test_a_batch_pays_the_same_requests_a_run_however_long_it_takes(by_kind, templates, monkeypatch):
    """Each backup copy of a batch is made to take a third of a lease (the lease thread's clock is
    moved on and it wakes after each): at 8 and at 24 runs, one batch each, the requests a run
    (backup copies aside) are the same by kind — one lock object and one manifest a run, the locks
    written once (created), the journal rewritten once a third of a lease for the whole batch.
    Before, each held lock was written again at each wake-up: its puts a run grew with the batch."""
    bucket, proxy, puts = by_kind
    clock = [0.0]
    real = bucket_batch.backup_object

    def slow_copy(ostore, f):  # a third of a lease passes during each copy, then the lease thread wakes
        real(ostore, f)
        clock[0] = max(clock[0], time.time()) + lease.lease_seconds() / 3 + 1
        bucket_lease.renew_all(now=clock[0])

    monkeypatch.setattr(bucket_batch, "backup_object", slow_copy)
    shared = {}
    for n, prefix in ((8, "small"), (24, "large")):
        upload(bucket, prefix, n, templates)
        url = bucket.url(prefix)
        api.scan(url)
        proxy.reset()
        puts.clear()
        rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0)
        assert sorted(o.run for o in rep.outcomes if o.status == "verified") == [run_name(i) for i in range(n)]
        counts = dict(proxy.counts)
        assert counts.get("copy") == 3 * n  # one backup copy per profile object: each one a third of a lease
        assert puts.get("locks") == n, (n, puts)  # each lock created once, never written again
        assert puts.get("manifests") == n, (n, puts)
        # the journal: created, its commit record, and one renewal per third of a lease (3 copies a run)
        assert puts.get("journal") == 2 + 3 * n, (n, puts)
        own = sum(counts.values()) - counts["copy"]
        # beyond the journal (its renewals follow the time taken): a lock and a manifest a run, and
        # what the batch shares (listings, its batched deletes, the ledger and history objects)
        shared[n] = own - puts["journal"] - 2 * n
        assert not any(f"/{PROFILE}" in k and "/.tb-footprint/" not in k for k in bucket.fs.find(bucket.key(prefix)))
    # flat: three times the runs in a batch three times as long add two requests a run, nothing more
    assert shared[24] == shared[8] and 0 < shared[8] <= 20, shared


def test_a_journal_changed_under_its_batch_loses_every_lock_it_kept_alive(bucket):
    """Two locks delegated to their batch's journal: a renewal rewrites the journal (one put) and
    leaves the locks as written; once someone else rewrote the journal, the next renewal loses
    both locks (never released as the holder's: the batch's last look leaves its runs as they were)."""
    ostore = ObjectStore(bucket.url("logs"))
    st = BucketState(ostore)
    op = new_op_id()
    locks = [lock_run(st, run, op) for run in ("exp/a", "exp/b")]
    before = {lk.path: st.read(lk.path)[1] for lk in locks}
    jnl = new_journal(st, op, {"op": op, "step": Rec.PLANNED, "runs": [{"run": "exp/a"}, {"run": "exp/b"}]})
    assert bucket_lease.delegate(locks, jnl.renew) == 2
    v0 = jnl.version
    t = time.time() + lease.lease_seconds()
    bucket_lease.renew_all(now=t)
    assert jnl.version != v0 and json.loads(st.read_bytes(jnl.path))["renewed"] == t
    assert {lk.path: st.read(lk.path)[1] for lk in locks} == before  # no lock written
    assert all(lk.still_held() for lk in locks)
    jnl.step(Rec.BACKED_UP)  # the writer's own records go on under the renewed version
    st.put(jnl.path, json.dumps({"op": op, "step": Rec.ROLLING_BACK, "runs": []}).encode())  # another's
    bucket_lease.renew_all(now=t + lease.lease_seconds())
    assert not any(lk.still_held() for lk in locks)
    ours, _ = unlock_all(locks)
    assert ours == []
    assert json.loads(st.read_bytes(jnl.path))["step"] == Rec.ROLLING_BACK  # never written back


def test_a_renewal_that_landed_with_its_answer_lost_keeps_the_batch_going(by_kind, templates, monkeypatch):
    """The journal renewal's put lands but its answer is lost (the server wrote it, then answered
    500): the client's retry fails its precondition against the version just written, or all its
    tries fail. The writer reads the journal again, finds the document it put and goes on under
    that version: the batch commits every run. Before, the renewal was taken for another's write
    (every lock of the batch lost: no run reduced) or left the writer's version stale (its next
    record failed its precondition: the batch rolled back)."""
    from faulty_proxy import AFTER_500, Rule

    bucket, proxy, puts = by_kind
    armed = [False]
    lost = Rule(match=lambda method, path: armed[0] and method == "PUT" and _kind(path) == "journal",
                fault=AFTER_500, times=1)
    proxy.rules.append(lost)
    real = bucket_batch.backup_object

    def copy_then_renew(ostore, f):  # the first copy outlives a third of a lease: one renewal, its answer lost
        real(ostore, f)
        if not lost.hits:
            armed[0] = True
            try:
                bucket_lease.renew_all(now=time.time() + lease.lease_seconds())
            finally:
                armed[0] = False

    monkeypatch.setattr(bucket_batch, "backup_object", copy_then_renew)
    upload(bucket, "lost", 3, templates)
    url = bucket.url("lost")
    api.scan(url)
    rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0)
    assert lost.hits == 1  # the renewal landed and its answer was lost
    assert sorted(o.run for o in rep.outcomes if o.status == "verified") == [run_name(i) for i in range(3)], \
        [(o.run, o.status, o.code) for o in rep.outcomes]
    assert not any(f"/{PROFILE}" in k and "/.tb-footprint/" not in k for k in bucket.fs.find(bucket.key("lost")))
    assert not bucket.fs.find(bucket.key("lost") + "/.tb-footprint/journal")  # committed and closed


def test_a_renewal_whose_answer_is_lost_adopts_only_the_document_it_put(s3_bucket):
    """A renewal put that fails with another code than precondition/not-found: when it landed (the
    journal holds the document put, ``renewed`` included) its version is taken and the writer's
    records go on, its locks kept; when it did not land the version held is kept, nothing lost, and
    the next renewal (the next wake-up: one try a wake-up, not one a lock) writes; a journal that
    holds another's document is never adopted."""
    from tb_footprint_plugin.codes import StoreError
    from tb_footprint_plugin.storage.store import StoreFailure

    class AnswerLost:  # the state objects, each update failing once its put is done (or before it)
        def __init__(self, st):
            self.st, self.mode, self.calls = st, None, 0

        def __getattr__(self, name):
            return getattr(self.st, name)

        def update(self, path, doc, version):
            self.calls += 1
            mode, self.mode = self.mode, None
            if mode == "landed":
                self.st.update(path, doc, version)
            if mode:
                raise StoreFailure(StoreError.STORE_ERROR, path, "read timed out")
            return self.st.update(path, doc, version)

    st = BucketState(ObjectStore(s3_bucket.url("logs")))
    op = new_op_id()
    locks = [lock_run(st, run, op) for run in ("exp/a", "exp/b")]
    jnl = new_journal(st, op, {"op": op, "step": Rec.PLANNED, "runs": [{"run": "exp/a"}, {"run": "exp/b"}]})
    jnl.st = flaky = AnswerLost(st)
    assert bucket_lease.delegate(locks, jnl.renew) == 2
    t = time.time() + lease.lease_seconds()
    flaky.mode = "landed"
    bucket_lease.renew_all(now=t)
    assert json.loads(st.read_bytes(jnl.path))["renewed"] == t
    assert jnl.version == st.read(jnl.path)[1] and all(lk.still_held() for lk in locks)
    jnl.step(Rec.BACKED_UP)  # under the version adopted: no precondition failure
    v = jnl.version
    flaky.mode, flaky.calls = "not landed", 0
    bucket_lease.renew_all(now=t + lease.lease_seconds())
    assert flaky.calls == 1  # one try a wake-up for the batch, not one a lock it keeps alive
    assert jnl.version == v and all(lk.still_held() for lk in locks)
    bucket_lease.renew_all(now=t + 2 * lease.lease_seconds())
    assert jnl.version != v and json.loads(st.read_bytes(jnl.path))["renewed"] == t + 2 * lease.lease_seconds()
    # another's document in place, the renewal's answer lost: never adopted, its locks lost next time
    theirs = {"op": op, "step": Rec.ROLLING_BACK, "runs": []}
    st.put(jnl.path, json.dumps(theirs).encode())
    flaky.mode = "not landed"
    bucket_lease.renew_all(now=t + 3 * lease.lease_seconds())
    assert all(lk.still_held() for lk in locks)
    bucket_lease.renew_all(now=t + 4 * lease.lease_seconds())
    assert not any(lk.still_held() for lk in locks) and unlock_all(locks)[0] == []
    assert json.loads(st.read_bytes(jnl.path)) == theirs
