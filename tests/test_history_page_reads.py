"""The Activity view at many operations (issue #28, r23 task B): ``api.history_page(newest=N)``
reads the manifests of the N entries it shows, not every manifest of the vault. On a disk the
change log's newest lines are read a block at a time (``ChangeLog.newest``) and their manifests
are looked up by op id (``catalogue.own_manifests_of``); an op id from a line is untrusted and
names no file unless it is of the op-id format. On a bucket the history is streamed into a
bounded heap of the newest N (``bucket_catalogue.history_page``), with no request more than the
whole history costs, and gives the same entries as its cut, on moto S3, the GCS emulator and
Azurite.
"""
from __future__ import annotations

import json
import os

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine.vault import Vault

PY = ("python",)
RUNS = 24


def _logdir(root, n: int = RUNS) -> str:
    """``n`` small runs, each with a profile session the archive policy removes."""
    ld = root / "logs"
    for i in range(n):
        run = ld / f"exp/run{i:03d}"
        with synth.EventWriter(str(run), timestamp=1_700_000_000) as w:
            for s in range(5):
                w.scalar("loss", s, 1.0 / (s + 1 + i))
        synth.write_profile_session(str(run), synth.session_name_for(1_700_000_600), "host", n_events=5, seed=i)
    return str(ld)


@pytest.fixture(scope="module")
def many_ops(tmp_path_factory):
    """A logdir of ``RUNS`` reductions, two of them restored, one purged: every backup state."""
    ld = _logdir(tmp_path_factory.mktemp("many"))
    rep = api.reduce_logdir(ld, policy="archive", dry_run=False, quiet_period=0, verify_backends=PY)
    assert rep.ok and sum(o.status == "verified" for o in rep.outcomes) == RUNS, [o.to_dict() for o in rep.outcomes]
    ops = sorted(rep.outcomes, key=lambda o: o.run)
    for o in ops[-2:]:
        api.restore(ld, op=o.op_id)
    assert [o["op_id"] for o in api.purge(ld, op=ops[-3].op_id, yes=True).ops] == [ops[-3].op_id]
    return ld


def _counting(monkeypatch):
    """Every manifest the vaults read, one op id per read (``Vault.read_manifest``: the one read
    of a manifest, whether a whole vault's is listed or one is looked up)."""
    read = []
    real = Vault.read_manifest

    def counted(self, op_id):
        read.append(op_id)
        return real(self, op_id)

    monkeypatch.setattr(Vault, "read_manifest", counted)
    return read


def test_a_page_of_the_history_reads_the_manifests_it_shows(many_ops, monkeypatch):
    whole = api.history(many_ops)
    assert len(whole) >= RUNS + 3 and {e.get("backup") for e in whole} >= {"kept", "released", "purged"}, whole
    read = _counting(monkeypatch)
    for n in (0, 1, 5, 7, len(whole), len(whole) + 4):
        read.clear()
        page = api.history_page(many_ops, newest=n)
        assert page == {"entries": whole[max(0, len(whole) - n):] if n else [], "total": len(whole), "total_exact": True}, n
        shown = {e["op_id"] for e in page["entries"]}
        # each shown operation's manifest read once (every vault's was read per page before)
        assert sorted(read) == sorted(shown), (n, len(read), len(shown))
    read.clear()
    assert api.history(many_ops, newest=5) == whole[-5:] and len(read) <= 5, read


def test_an_op_id_from_a_line_names_no_file_out_of_the_vault(many_ops, tmp_path, monkeypatch):
    """A planted line whose op id is a path: no file it names is opened, no manifest read for
    it, and it shows as a line with no manifest behind it (``backup: unknown``)."""
    state = os.path.join(many_ops, ".tb-footprint")
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"op_id": "x", "logdir": many_ops}))
    hostile = ["../../../../" + str(outside)[1:-5], str(outside)[:-5], "..", "a/../b", "", "x" * 300]
    path = os.path.join(state, "history.jsonl")
    with open(path, "rb") as f:
        kept = f.read()
    try:
        with open(path, "ab") as f:
            for i, op in enumerate(hostile):
                f.write((json.dumps({"op_id": op, "kind": "reduce", "run": "exp/run000", "before": 2, "after": 1,
                                     "verified": True, "outcome": "verified", "backup_kept": True,
                                     "time": 4e9 + i}) + "\n").encode())
        opened, real_open = [], open

        def watched(file, *a, **kw):
            opened.append(str(file))
            return real_open(file, *a, **kw)

        read = _counting(monkeypatch)
        monkeypatch.setattr("builtins.open", watched)
        page = api.history_page(many_ops, newest=len(hostile))
    finally:
        monkeypatch.undo()
        with open(path, "wb") as f:
            f.write(kept)
    assert [e["op_id"] for e in page["entries"]] == hostile
    assert all(e["backup"] == "unknown" for e in page["entries"]), page["entries"]
    assert read == [] and not [p for p in opened if "outside" in p], opened


# --- a bucket ----------------------------------------------------------------------------------
#: the planted operations' times: few, so many entries share one (ties keep ``history``'s order)
TIMES = (1.7e9, 1.7e9 + 1, 1.7e9 + 2)


def _bucket_with_many_ops(bucket, tmp_path, count: int, pad: int = 0, odd_lines: bool = True) -> str:
    """A bucket logdir of three real reductions (one restored, one purged), ``count`` manifests
    planted as copies of theirs under other op ids, times and states (shared times, restored,
    purged), some with ``pad`` numbers of verification each, and rolled-back lines in the change
    log (``odd_lines``: one untimed, one with an op id that is no string)."""
    url = bucket.upload(_logdir(tmp_path, 3), "v")
    rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0, verify_backends=PY)
    ops = sorted((o for o in rep.outcomes if o.status == "verified"), key=lambda o: o.run)
    assert len(ops) == 3, [o.to_dict() for o in rep.outcomes]
    api.restore(url, op=ops[1].op_id)
    api.purge(url, op=ops[2].op_id, yes=True)
    state = bucket.key("v/.tb-footprint")
    bucket.fs.invalidate_cache()
    docs = [json.loads(bucket.fs.cat_file(f"{state}/manifests/{o.op_id}.json")) for o in ops]
    planted = {}
    for i in range(count):
        doc = json.loads(json.dumps(docs[i % 3]))
        op = f"20250101T000000-{i:06x}"
        doc["op_id"] = op
        if "op" in doc:
            doc["op"] = op
        doc["started_at"] = TIMES[i % 2] - 10
        doc["finished_at"] = TIMES[(i // 3) % 3]
        for k in ("restored_at", "purged_at"):
            if doc.get(k):
                doc[k] = TIMES[i % 3] + 0.5
        if pad and i % 2:
            doc["verification"] = {"series": list(range(10 ** 6, 10 ** 6 + pad))}
        planted[f"{state}/manifests/{op}.json"] = json.dumps(doc).encode()
    lines = [{"op_id": f"20250101T000001-{i:06x}", "kind": "reduce", "run": f"exp/run{i:03d}", "before": 5,
              "after": 5, "verified": False, "outcome": "rolled_back", "backup_kept": False,
              "time": TIMES[i % 3]} for i in range(7)]
    if odd_lines:
        lines += [{"op_id": ["not", "a", "key"], "kind": "reduce", "time": TIMES[0]}, {"kind": "untimed"}]
    log = f"{state}/history.jsonl"
    old = bucket.fs.cat_file(log) if bucket.fs.exists(log) else b""
    planted[log] = old + b"".join(json.dumps(e).encode() + b"\n" for e in lines)
    bucket.fs.pipe(planted)
    bucket.fs.invalidate_cache()
    return url


def test_a_buckets_page_is_the_cut_of_its_history_with_no_request_more(bucket, tmp_path, monkeypatch):
    """The page's entries and total are ``history``'s cut for every N, its requests no more than
    ``history``'s; operations held by a journal are left out of both. A planted line whose op id
    is a list is shown, not a ``TypeError`` (it was looked up in the set of held operations)."""
    from tb_footprint_plugin.engine.front_bucket import BucketEngine

    url = _bucket_with_many_ops(bucket, tmp_path, 40)
    whole_engine = BucketEngine(url)
    whole = whole_engine.history()
    cost = whole_engine.request_counts()
    assert len(whole) > 40 + 7 and {e["kind"] for e in whole} >= {"reduce", "restore", "purge"}, whole
    for n in (0, 1, 5, 17, len(whole) - 1, len(whole), len(whole) + 3):
        eng = BucketEngine(url)
        page = eng.history_page(n)
        assert page == (whole[max(0, len(whole) - n):] if n else [], len(whole), True), n
        got = eng.request_counts()
        assert got["requests"] <= cost["requests"] and got["read"] <= cost["read"], (n, got, cost)
    # operations a journal holds uncommitted are left out of both, their change-log lines too
    held = {whole[-1]["op_id"], whole[-2]["op_id"], next(e["op_id"] for e in whole if e.get("outcome") == "rolled_back")}
    monkeypatch.setattr(BucketEngine, "_unreduced", lambda self: set(held))
    less = BucketEngine(url).history()
    assert len(less) < len(whole) and not {e["op_id"] for e in less if isinstance(e["op_id"], str)} & held
    for n in (1, 6, len(less)):
        assert BucketEngine(url).history_page(n) == (less[-n:], len(less), True), n


def test_a_buckets_page_holds_the_newest_not_every_manifest(s3_bucket, tmp_path):
    import tracemalloc

    from tb_footprint_plugin.engine.front_bucket import BucketEngine

    url = _bucket_with_many_ops(s3_bucket, tmp_path, 160, pad=5000, odd_lines=False)
    peaks = []
    for fn in (lambda e: e.history(), lambda e: e.history_page(5)):
        eng = BucketEngine(url)
        tracemalloc.start()
        try:
            fn(eng)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    # every manifest held at once (80 padded ones, ~0.2 MB each as objects: ~15 MB measured) against
    # those in flight and the newest 5 entries (~2 MB)
    assert peaks[0] > 10 * (1 << 20) and peaks[1] < peaks[0] / 3, [p / (1 << 20) for p in peaks]
