"""A bucket purge's journal (``engine.bucket_purge_journal``, issue #26): what a bucket's start
finishes a killed purge from, as a disk's start finishes one from its intents.

A start leaves a purge whose holder still runs alone (its operations said ``skipped_live``,
``run_locked``, as a disk's start says of a run another process holds) and finishes it once its
holder is gone; a journal whose purge never reached its intent (nothing marked) goes with
nothing changed; a journal is untrusted input: only copies a purged manifest names are deleted.
And the purge report's ``originals_lost`` is one derivation of its rows."""
import os
import socket
import subprocess
import sys
import time

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Finding, Recovery
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.front import open_engine
from tb_footprint_plugin.engine.journal_object import PURGING, journal_unreadable
from tb_footprint_plugin.engine.purge_run import PurgeReport

pytestmark = pytest.mark.usefixtures("disarm_faults")

OLD = time.time() - 7 * 86400
STATE = ".tb-footprint/"
JOURNALS = STATE + "journal/"
RUNS = ("a", "b")
DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


def _logdir(root):
    """Each run: scalars, and a profile session of two files of its own (what the reduce drops)."""
    for name in RUNS:
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


def _reduced(s3_bucket, tmp_path) -> str:
    url = s3_bucket.upload(_logdir(tmp_path / "logs"), "logs")
    rep = api.reduce_logdir(url, policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",))
    assert sorted(o.run for o in rep.outcomes if o.status == "verified" and o.removed_files) == list(RUNS)
    return url


def _reduces(url):
    return {m["op_id"]: m for m in api.operations(url) if m["kind"] == "reduce"}


def _journal(s3_bucket):
    keys = [k for k in s3_bucket.hashes("logs") if k.startswith(JOURNALS)]
    assert len(keys) <= 1, keys
    return keys[0] if keys else None


def _rewrite(url, key, **fields):
    """The journal object ``key`` (relative to the logdir) with ``fields`` changed."""
    st = open_engine(url, None).state
    path = f"{st.logdir.root}/{key}"
    doc, version = st.read(path)
    st.update(path, dict(doc, **fields), version)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _copies(s3_bucket, op_id):
    return [k for k in s3_bucket.hashes("logs") if f"/blobs/{op_id}/" in k]


def test_a_start_leaves_a_live_purge_alone_and_finishes_it_once_its_holder_is_gone(s3_bucket, tmp_path):
    url = _reduced(s3_bucket, tmp_path)
    faults.arm("purge.intent", "raise")  # stopped right after its intent: one operation marked
    with pytest.raises(faults.InjectedFault):
        api.purge(url, yes=True)
    faults.disarm_all()
    key = _journal(s3_bucket)
    marked = [op for op, m in _reduces(url).items() if m["backup_purged"]]
    assert key and len(marked) == 1 and _copies(s3_bucket, marked[0])
    # held by a process of another host whose lease has not ended: left alone, said as a held run
    _rewrite(url, key, host="another-host", pid=1, pid_start=None, renewed=time.time(),
             expires=time.time() + 3600)
    outs = api.recover_logdir(url)
    assert [(o.op_id, o.action, o.code) for o in outs] == \
        [(marked[0], Recovery.SKIPPED_LIVE, Finding.RUN_LOCKED)], [vars(o) for o in outs]
    assert _journal(s3_bucket) == key and _copies(s3_bucket, marked[0])
    # its holder gone (a process of this host that no longer runs): finished, its journal gone
    _rewrite(url, key, host=socket.gethostname(), pid=_dead_pid(), pid_start=None)
    outs = api.recover_logdir(url)
    assert [(o.op_id, o.action, o.code) for o in outs] == \
        [(marked[0], Recovery.COMPLETED, Finding.PURGE_FINISHED)], [vars(o) for o in outs]
    assert _journal(s3_bucket) is None and not _copies(s3_bucket, marked[0])
    assert api.status(url)["unfinished_operations"] == []
    assert api.recover_logdir(url) == []


def test_a_journal_whose_purge_marked_nothing_goes_and_nothing_else_changes(s3_bucket, tmp_path):
    """Planted or killed before its intent: it names operations none of which its manifest says
    purged, and entries that are no operation of this vault; the start removes the journal, says
    nothing, and every copy stays (each operation still restores)."""
    url = _reduced(s3_bucket, tmp_path)
    ops = _reduces(url)
    faults.arm("purge.intent", "raise")
    with pytest.raises(faults.InjectedFault):
        api.purge(url, yes=True)
    faults.disarm_all()
    key = _journal(s3_bucket)
    marked = [op for op, m in _reduces(url).items() if m["backup_purged"]]
    # the marked operation named under another run, the other as it is, and two that are none
    entries = [{"run": "b" if ops[op]["run"] == "a" else "a", "op": op, "files": []} for op in marked]
    entries += [{"run": m["run"], "op": op, "files": []} for op, m in ops.items() if op not in marked]
    entries += [{"run": "a", "op": "../../x", "files": []}, {"run": "a", "op": "20990101T000000-abcdef", "files": []}]
    _rewrite(url, key, **{PURGING: entries}, host=socket.gethostname(), pid=_dead_pid(), pid_start=None)
    state = {k: v for k, v in s3_bucket.hashes("logs").items() if k != key}
    assert api.recover_logdir(url) == []
    assert s3_bucket.hashes("logs") == state  # the journal gone, nothing else touched
    outs = api.restore(url)
    assert sorted((o.run, o.status) for o in outs) == sorted((ops[op]["run"], "restored") for op in ops
                                                              if op not in marked), [o.to_dict() for o in outs]


def test_originals_lost_is_the_sum_of_the_rows_as_they_stand():
    rep = PurgeReport(dry_run=True, ops=[{"op_id": "x", "bytes": 1, "originals": 2}], freed_bytes=1)
    rep.ops.append({"op_id": "y", "bytes": 1, "originals": 3})
    assert rep.originals_lost == 5 and rep.to_dict()["originals_lost"] == 5


def _unreadable_before_the_purge_journal(doc: dict) -> bool:
    """``journal_object.journal_unreadable`` as every release before the purge journal has it
    (dc346ea and earlier): a journal naming no ``run`` nor ``runs`` is damaged, never acted on;
    one that does is replayed as the reduce, restore or retirement it names."""
    return bool(doc.get("corrupt")) or not ("run" in doc or "runs" in doc) or \
        ("runs" in doc and not isinstance(doc["runs"], list))


def test_an_earlier_release_never_acts_on_a_purge_journal(s3_bucket, tmp_path):
    """Review R5 F1: the journal named its operations under ``runs``, where an earlier release
    (a shard worker or a tab not yet upgraded, on the same bucket) reads the runs of a reduce
    journal: its start rolled each named operation back as a reduce stopped at ``planned``,
    deleting the manifests of every one, unmarked ones included (their copies then named by
    nothing), and a live purge's too (a purge holds no run lock). Now they are under
    ``PURGING`` alone, which an earlier release's rule calls damaged and leaves; this release
    reads them and finishes the purge."""
    url = _reduced(s3_bucket, tmp_path)
    faults.arm("purge.intent", "raise")
    with pytest.raises(faults.InjectedFault):
        api.purge(url, yes=True)
    faults.disarm_all()
    key = _journal(s3_bucket)
    st = open_engine(url, None).state
    doc, _ = st.read(f"{st.logdir.root}/{key}")
    assert _unreadable_before_the_purge_journal(doc), doc
    assert not journal_unreadable(doc) and len(doc[PURGING]) == len(RUNS), doc
