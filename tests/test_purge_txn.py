"""Purge as one transaction on the one driver (issue #26): a purge of a disk's vault is
the one ``txn.Purge`` over ``purge.DiskBackups`` and of a bucket's over ``bucket_purge.BucketCopies``
(``engine.purge_run``), each run by
``engine.txn.run`` in the order of ``txn.STEPS``. Its intent (a disk: each operation's ``purge``
record in its log; a bucket: each manifest marked purged) is its commit record, written right
after the driver's last cancel check: a cancel before it deletes nothing and records nothing (the
operations are reported kept, code ``interrupted``), a cancel after it does not stop the purge.
The failpoints (``purge.*``) stay at their instants, and a bucket's purge makes the requests it
always made."""
import os
import time

import pytest

from conftest import user_files
from helpers_txn import observe_txn
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Failure
from tb_footprint_plugin.engine import faults, oplog, txn
from tb_footprint_plugin.engine.context import CancelToken
from tb_footprint_plugin.engine.front import open_engine
from tb_footprint_plugin.engine.vault import Vault

pytestmark = pytest.mark.usefixtures("disarm_faults")

OLD = time.time() - 7 * 86400
STATE = ".tb-footprint/"
RUNS = ("a", "b")
DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}
PURGE_STEPS = ["purge.intent", "purge.blob", "purge.marked", "purge.forget"]
#: the driver's steps before the intent, in order (nothing is recorded or deleted in any of them)
BEFORE_INTENT = ["journal", "backup", "stage", "transform", "verify", "last_look", "record:swap"]


def _logdir(root, runs=RUNS):
    """Each run: scalars, and a profile session of two files of its own (what the reduce drops)."""
    for name in runs:
        with synth.EventWriter(str(root / name)) as w:
            for step in range(5):
                w.scalar("loss", step, 1.0 / (step + 1))
        session = root / name / "plugins" / "profile" / "2026_01_01_00_00_00"
        session.mkdir(parents=True)
        (session / "host.xplane.pb").write_bytes(os.urandom(3000))
        (session / "host.trace.json.gz").write_bytes(os.urandom(2000))
    for d, dirs, files in os.walk(root):
        for n in files + dirs:
            os.utime(os.path.join(d, n), (OLD, OLD))
    return root


def _reduce(url):
    rep = api.reduce_logdir(str(url), policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",))
    assert sorted(o.run for o in rep.outcomes if o.status == "verified" and o.removed_files) == list(RUNS), \
        rep.to_dict()


def _observe(monkeypatch):
    return observe_txn(monkeypatch, PURGE_STEPS)


def _reduces(url):
    return [m for m in api.operations(str(url)) if m["kind"] == "reduce"]


# --- a disk ------------------------------------------------------------------------------------
def _local_state(logdir):
    """Per reduce operation: purged or not, the purge records of its log (``purge``: the intent,
    ``purged``: its end), and which of its backups are still in the vault."""
    out = {}
    for m in _reduces(logdir):
        vault = Vault(m["vault"])
        records = [r["type"] for r in oplog.read_log(vault.root, m["op_id"]).records
                   if r.get("type") in ("purge", "purged")]
        out[m["op_id"]] = (bool(m.get("backup_purged")), records,
                           sorted(f["sha256"] for f in m["files"] if vault.has_blob(f["sha256"])))
    return out


def test_a_local_purge_is_the_one_Purge_run_by_the_driver_step_by_step(tmp_path, monkeypatch):
    """The driver's steps in order: nothing before the swap record, the intents as the swap
    record (``purge.intent`` right after), each blob deleted in the swap, each manifest marked
    in the commit."""
    logdir = _logdir(tmp_path / "logs")
    _reduce(logdir)
    seen, log = _observe(monkeypatch)
    rep = api.purge(str(logdir), yes=True)
    assert seen == ["Purge"]
    assert sorted(o["run"] for o in rep.ops) == list(RUNS) and rep.freed_bytes > 0 and rep.kept == []
    assert log[:len(BEFORE_INTENT) + 2] == BEFORE_INTENT + ["purge.intent", "swap"], log
    rest = log[len(BEFORE_INTENT) + 2:]
    blobs = rest[:rest.index("commit")]
    assert blobs and set(blobs) == {"purge.blob"}, log  # one per blob deleted
    assert rest[len(blobs):] == ["commit", "purge.marked", "purge.marked"], log
    # purged, its intent finished (a ``purged`` record after it), no backup of it left
    assert all(purged and records == ["purge", "purged"] and kept == []
               for purged, records, kept in _local_state(logdir).values())


def test_a_cancel_before_the_intent_purges_nothing_and_records_nothing_on_a_disk(tmp_path):
    """A cancel seen before the intent (here: set before the purge started): no blob deleted, no
    intent written, no manifest marked, no change-log line, a retired run's vault copy kept too;
    the report lists every operation as kept with code ``interrupted`` and frees nothing, and
    each run still restores byte for byte. Before, ``purge`` took no cancel."""
    logdir = _logdir(tmp_path / "logs")
    with synth.EventWriter(str(logdir / "c")) as w:  # c: scalars only, retired below
        w.scalar("loss", 0, 1.0)
    original = user_files(logdir)
    _reduce(logdir)
    assert api.retire(str(logdir), api.retire_rule(runs=["c"]), dry_run=False, quiet_period=0).ok
    before = _local_state(logdir)
    assert all(not purged and records == [] and kept for purged, records, kept in before.values())
    history = api.history(str(logdir))
    token = CancelToken()
    token.cancel()
    rep = api.purge(str(logdir), yes=True, cancel=token)
    assert rep.ops == [] and rep.freed_bytes == 0 and rep.originals_lost == 0, rep.to_dict()
    assert sorted((k["run"], k["code"]) for k in rep.kept) == [(r, Failure.INTERRUPTED) for r in RUNS + ("c",)]
    assert all("not purged" in k["detail"] for k in rep.kept)
    assert _local_state(logdir) == before
    assert api.history(str(logdir)) == history
    assert [r["run"] for r in api.retired(str(logdir))] == ["c"]
    outs = api.restore(str(logdir))
    assert sorted((o.run, o.status) for o in outs) == [(r, "restored") for r in RUNS + ("c",)], \
        [o.to_dict() for o in outs]
    assert user_files(logdir) == original


def test_a_cancel_after_the_intent_does_not_stop_a_local_purge(tmp_path):
    """A cancel that arrives right after the intents: the purge finishes (every blob deleted,
    every manifest marked, nothing left for the next start to finish), reported as purged."""
    logdir = _logdir(tmp_path / "logs")
    _reduce(logdir)
    token = CancelToken()
    faults.arm("purge.intent", token.cancel)
    rep = api.purge(str(logdir), yes=True, cancel=token)
    assert token.cancelled
    assert sorted(o["run"] for o in rep.ops) == list(RUNS) and rep.freed_bytes > 0, rep.to_dict()
    assert rep.kept == [], rep.kept
    # purged, its intent finished (a ``purged`` record after it), no backup of it left
    assert all(purged and records == ["purge", "purged"] and kept == []
               for purged, records, kept in _local_state(logdir).values())
    assert api.status(str(logdir))["unfinished_operations"] == []
    assert [r.action for r in api.recover_logdir(str(logdir))] == []


# --- a bucket (moto's S3) ----------------------------------------------------------------------
def _bucket_state(bucket):
    """Every object of the tool's state (manifests, backup copies, journals) with its sha256."""
    return {k: v for k, v in bucket.hashes("logs").items() if k.startswith(STATE)}


def test_a_bucket_purge_is_the_one_Purge_run_by_the_driver_with_the_requests_it_always_made(
        s3_bucket, tmp_path, monkeypatch):
    """The driver's steps in order (the marks as the swap record, ``purge.intent`` right after,
    each operation's copies deleted in the swap), and the requests of the purge itself as before
    it ran on the driver: one conditional put to mark each manifest, one delete of each
    operation's copies, and its journal's put and delete (issue #26: what lets the next start
    finish a purge killed past its intent from the listing it makes anyway), no other request."""
    url = s3_bucket.upload(_logdir(tmp_path / "logs"), "logs")
    _reduce(url)
    eng = open_engine(url, None)
    seen, log = _observe(monkeypatch)
    before = eng.request_counts()
    rep = eng.purge(older_than=None, yes=True, op=None, runs=None, op_ids=None)
    after = eng.request_counts()
    assert seen == ["Purge"]
    assert sorted(o["run"] for o in rep.ops) == list(RUNS) and rep.kept == [], rep.to_dict()
    assert log == BEFORE_INTENT + ["purge.intent", "swap", "purge.blob", "purge.blob", "commit"], log
    # the listing of the manifests and one of the journals before the transaction (every op id a
    # journal names is under way, a batch's runs' too: review R21 PD16; it replaced a journal HEAD an
    # operation, one request fewer for each operation past the first), then its journal, 2 marks and
    # 2 deletes, then its journal removed
    spent = {k: after[k] - before[k] for k in ("list", "read", "head", "copy", "put", "delete")}
    assert spent == {"list": 2, "read": 2, "head": 0, "copy": 0, "put": 3, "delete": 3}, spent
    assert all(m["backup_purged"] for m in _reduces(url))


def test_a_cancel_before_the_intent_purges_nothing_in_a_bucket(s3_bucket, tmp_path):
    """A cancel before the marks: every object of the vault as it was (no manifest marked, no
    copy deleted), each operation reported kept with code ``interrupted``; a restore still gives
    back every original. Before, ``purge`` took no cancel."""
    original = {k: v for k, v in user_files(_logdir(tmp_path / "logs")).items() if v != "dir"}
    url = s3_bucket.upload(tmp_path / "logs", "logs")
    _reduce(url)
    state = _bucket_state(s3_bucket)
    token = CancelToken()
    token.cancel()
    rep = api.purge(url, yes=True, cancel=token)
    assert rep.ops == [] and rep.freed_bytes == 0, rep.to_dict()
    assert sorted((k["run"], k["code"]) for k in rep.kept) == [(r, Failure.INTERRUPTED) for r in RUNS]
    assert _bucket_state(s3_bucket) == state
    assert not any(m["backup_purged"] for m in _reduces(url))
    outs = api.restore(url)
    assert sorted((o.run, o.status) for o in outs) == [(r, "restored") for r in RUNS], [o.to_dict() for o in outs]
    assert {k: v for k, v in s3_bucket.hashes("logs").items() if not k.startswith(STATE)} == original


def test_a_cancel_after_the_intent_does_not_stop_a_bucket_purge(s3_bucket, tmp_path):
    url = s3_bucket.upload(_logdir(tmp_path / "logs"), "logs")
    _reduce(url)
    copies = {f["backup"] for m in _reduces(url) for f in m["files"]}
    token = CancelToken()
    faults.arm("purge.intent", token.cancel)
    rep = api.purge(url, yes=True, cancel=token)
    assert token.cancelled
    assert sorted(o["run"] for o in rep.ops) == list(RUNS) and rep.kept == [], rep.to_dict()
    assert all(m["backup_purged"] for m in _reduces(url))
    left = set(s3_bucket.hashes("logs"))
    assert copies and not any(c.endswith(k) for c in copies for k in left), "a backup copy was left"


def test_a_bucket_purge_killed_after_its_first_mark_leaves_the_other_operations_as_they_were(s3_bucket, tmp_path):
    """A bucket's marks and deletes go one operation at a time: a purge stopped right after its
    intent (the first mark) has marked one operation only; every other keeps its manifest and its
    copies (a restore could still use them), and the next purge purges them. Marking them all
    before any delete left every marked operation's copies behind, which nothing deletes later."""
    url = s3_bucket.upload(_logdir(tmp_path / "logs"), "logs")
    _reduce(url)
    before = _bucket_state(s3_bucket)
    faults.arm("purge.intent", "raise")  # a crash right after the intent
    with pytest.raises(faults.InjectedFault):
        api.purge(url, yes=True)
    faults.disarm_all()
    ms = _reduces(url)
    assert sorted(bool(m["backup_purged"]) for m in ms) == [False, True], ms
    after = _bucket_state(s3_bucket)
    journals = [k for k in after if k.startswith(f"{STATE}journal/")]
    assert len(journals) == 1, sorted(after)  # the purge's own, naming what it was about to mark
    assert set(after) - set(journals) == set(before), "no copy deleted yet"
    changed = [k for k in before if before[k] != after[k]]
    assert len(changed) == 1 and changed[0].endswith(".json"), changed  # one manifest marked, no other
    unmarked = next(m for m in ms if not m["backup_purged"])
    marked = next(m for m in ms if m["backup_purged"])
    # the next purge's start finishes the killed one (its manifest, the intent, says purged: its
    # copies go too, as a disk's start finishes a killed purge), then it purges the other operation
    rep = api.purge(url, yes=True)
    assert [(o["run"], bool(o.get("finished"))) for o in rep.ops] == [(unmarked["run"], False)], rep.to_dict()
    assert all(m["backup_purged"] for m in _reduces(url))
    left = _bucket_state(s3_bucket)
    assert not any("/blobs/" in k for k in left), sorted(left)
    assert rep.freed_bytes == sum(o["bytes"] for o in rep.ops) > 0
    assert marked["op_id"] not in {o["op_id"] for o in rep.ops}
    # and a purge with nothing left to finish lists nothing more than it did
    again = api.purge(url, yes=True)
    assert again.ops == [] and again.freed_bytes == 0, again.to_dict()
