"""A bucket's Activity page reads only what it shows (issue #28, r26 K3): ``history_page(N)`` lists
the vault's manifests and reads them in the order of their objects' dates, newest first, until
none left can hold an entry newer than the N kept (``bucket_history.SKEW``: a manifest is
written once its operation's last change is, by a writer whose clock a store accepts), so its
requests grow with N, not with the vault (moto S3, the GCS emulator, Azurite); the entries are
``history``'s newest N, an old operation restored or purged lately among them (its manifest
rewritten then).

A vault written over 200 days cannot be made on a test server (it dates each object when it is
written), so the planted manifests' dates in the listings are set to when each was last written
(``ObjectStore.list`` answers them so); every request is the server's, counted by the store."""
from __future__ import annotations

import dataclasses
import json
import time

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine.front_bucket import BucketEngine
from tb_footprint_plugin.storage.store_object import ObjectStore

PY = ("python",)
PLANTED = 150
DAY = 86400.0


def _logdir(root) -> str:
    ld = root / "logs"
    for i in range(3):
        run = ld / f"exp/run{i:03d}"
        with synth.EventWriter(str(run), timestamp=1_700_000_000) as w:
            w.scalar("loss", 0, 1.0 / (i + 1))
        synth.write_profile_session(str(run), synth.session_name_for(1_700_000_600), "host", n_events=5, seed=i)
    return str(ld)


def _vault_of_many(bucket, tmp_path, monkeypatch) -> str:
    """Three real reductions (one restored, one purged) and ``PLANTED`` manifests of operations
    one an hour from 200 days ago, some restored or purged days later, a few of them lately; each
    planted manifest listed as written when its last change was."""
    url = bucket.upload(_logdir(tmp_path), "v")
    rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0, verify_backends=PY)
    ops = sorted((o for o in rep.outcomes if o.status == "verified"), key=lambda o: o.run)
    assert len(ops) == 3, [o.to_dict() for o in rep.outcomes]
    api.restore(url, op=ops[1].op_id)
    api.purge(url, op=ops[2].op_id, yes=True)
    state = bucket.key("v/.tb-footprint")
    bucket.fs.invalidate_cache()
    docs = [json.loads(bucket.fs.cat_file(f"{state}/manifests/{o.op_id}.json")) for o in ops]
    now = time.time()
    planted, dated = {}, {}
    for i in range(PLANTED):
        doc = json.loads(json.dumps(docs[i % 3]))
        op = f"20250101T000000-{i:06x}"
        doc["op_id"] = op
        if "op" in doc:
            doc["op"] = op
        doc["started_at"] = now - 200 * DAY + i * 3600
        doc["finished_at"] = doc["started_at"] + 60
        for k in ("restored_at", "purged_at"):
            if doc.get(k):  # days later; every 25th today (an old operation's line among the newest)
                doc[k] = now - DAY / 2 - i * 60 if i % 25 == 1 else doc["finished_at"] + (i % 5 + 1) * DAY
        planted[f"{state}/manifests/{op}.json"] = json.dumps(doc).encode()
        dated[f"manifests/{op}.json"] = max(doc[k] for k in ("finished_at", "restored_at", "purged_at")
                                            if doc.get(k)) + 2
    bucket.fs.pipe(planted)
    bucket.fs.invalidate_cache()
    real = ObjectStore.list

    def listed(self, prefix: str = "", **kw):
        for e in real(self, prefix, **kw):
            when = dated.get("/".join(e.key.split("/")[-2:]))
            yield e if when is None else dataclasses.replace(e, mtime=when)

    monkeypatch.setattr(ObjectStore, "list", listed)
    return url


def test_a_buckets_page_reads_as_many_manifests_as_it_shows(bucket, tmp_path, monkeypatch):
    url = _vault_of_many(bucket, tmp_path, monkeypatch)
    whole_engine = BucketEngine(url)
    whole = whole_engine.history()
    cost = whole_engine.request_counts()
    assert len(whole) > PLANTED + 40 and cost["read"] > PLANTED, (len(whole), cost)
    assert sum(e["kind"] in ("restore", "purge") and e["time"] > time.time() - DAY for e in whole[-10:]) >= 4
    for n in (1, 10, 30):
        eng = BucketEngine(url)
        entries, total, exact = eng.history_page(n)
        got = eng.request_counts()
        assert entries == whole[-n:], n
        # the listing, the change log and n manifests (each gives one entry at least) and those
        # written within SKEW of the page's oldest (the three real ones, written together): the
        # whole history read every manifest, a request each
        assert got["read"] <= n + 3 and got["list"] <= cost["list"], (n, got, cost)
        assert got["requests"] <= n + 6 < cost["requests"], (n, got, cost)
        # each manifest not read counts one entry: no more than the whole, no fewer than its operations
        assert PLANTED + 3 <= total < len(whole), (n, total, len(whole))
        # and says so: the tab shows "at least" (api.history_page's total_exact, the route's)
        assert exact is False, n
    # a page as long as the history reads every manifest: the whole, its total exact
    assert BucketEngine(url).history_page(len(whole)) == (whole, len(whole), True)
    page = api.history_page(url, newest=10)
    assert (page["total_exact"], page["total"] < len(whole)) == (False, True), page["total"]
    assert api.history_page(url, newest=len(whole))["total_exact"] is True
    # an operation a journal holds is left out of the page, read or not
    held = {whole[-1]["op_id"], whole[-3]["op_id"]}
    monkeypatch.setattr(BucketEngine, "_unreduced", lambda self: set(held))
    less = [e for e in whole if e["op_id"] not in held]
    assert BucketEngine(url).history_page(5)[0] == less[-5:]
