"""A bucket rollback that keeps a backup (its key no longer holds the original its journal
recorded) says so beforehand, and leaves it named (review R8 F3; W2's notes, r26).

1. ``status`` (``bucket_recover.reduce_will``) forecast "rolled back; run left as it was" for a
   journal older than its run, and ``recover`` then answered ``backups_kept``: now ``status`` looks
   as the rollback looks (``bucket_steps.rollback_keeps``) and says ``backups_kept`` in recover's
   words.
2. A reduction's own rollback (a trainer rewrote a planned file during the reduction) kept that
   file's backup but deleted the manifest: nothing named the copy, no status row, no restore, and
   purge never freed it. Now the manifest is kept with every backup of the run, as a recovery keeps
   it, the outcome's reason names the key, and the operation is in ``operations`` (what status,
   restore and purge read), so ``purge`` frees it."""
import pytest

from contract_stores import buckets, logdir_on  # noqa: F401 - fixtures
from test_objstore import DROP_PROFILES, _write_rewrite_logdir, demo_logdir  # noqa: F401
from test_rollback_keeps_backup_of_astray_original import RUN, _journals
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Finding, Outcome, Recovery
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.remote import RemoteFS
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")


@pytest.mark.parametrize("store", ["s3", "az"])
def test_status_forecasts_backups_kept_in_recovers_words(store, tmp_path, logdir_on):  # noqa: F811
    url = logdir_on(store, _write_rewrite_logdir(tmp_path / "src"))
    st = open_store(url)
    stale = {}

    def capture():  # the journal as its owner left it before its commit step
        [key] = _journals(st)
        stale[key] = st.read_all(key)

    faults.arm("reduce.backup", capture)
    rep = api.reduce_logdir(url, policy="archive", dry_run=False, runs=[RUN], quiet_period=0)
    faults.disarm_all()
    [o] = [o for o in rep.outcomes if o.run == RUN]
    assert o.status == Outcome.VERIFIED and stale
    [(key, doc)] = stale.items()
    st.put(key, doc)  # a journal older than the run
    [row] = [r for r in api.unfinished(url)["unfinished_operations"] if r["op_id"] == o.op_id]
    will = row["recover_will"]
    assert (will["action"], will.get("code")) == (Recovery.BACKUPS_KEPT, Finding.ORIGINAL_NOT_IN_PLACE), will
    [r] = [r for r in api.recover_logdir(url) if r.op_id == o.op_id]
    assert (r.action, r.code, r.detail) == (will["action"], will["code"], will["detail"])


def test_a_reductions_own_rollback_keeps_its_kept_backup_named(buckets, demo_logdir):  # noqa: F811
    bucket = buckets("s3")
    url = bucket.upload(demo_logdir, "logs")
    planned = api.plan(url, DROP_PROFILES, quiet_period=0)
    victim_run = next(rp for rp in planned.runs if not rp.skipped)
    victim = next(a.path for a in victim_run.actions if a.kind == "delete")
    hit = []

    def rewrite():  # the trainer rewrites a planned file after its backup
        if not hit:
            hit.append(1)
            bucket.fs.pipe_file(bucket.key("logs/" + victim), b"new bytes written by the trainer")

    faults.arm("reduce.verify", rewrite)
    try:
        rep = api.reduce_logdir(url, policy=DROP_PROFILES, dry_run=False, quiet_period=0, runs=[victim_run.run])
    finally:
        faults.disarm_all()
    o = next(o for o in rep.outcomes if o.run == victim_run.run)
    assert o.status == Outcome.ROLLED_BACK and o.code == Failure.CHANGED_SINCE_BACKUP, o.to_dict()
    assert victim in o.reason and "backups are kept" in o.reason, o.reason
    left = [k for k in RemoteFS(url).list_tree() if f"/{o.op_id}/" in k]
    assert any(k.endswith(victim) for k in left), left
    [m] = [m for m in api.operations(url) if m["op_id"] == o.op_id]  # named, as what happened (R8 F6)
    assert (m["outcome"], m["bytes_after"]) == ("rolled_back", m["bytes_before"]), m
    api.purge(url, yes=True)  # the vault holds the original's only copy: kept, as a restore's not_restored
    assert [k for k in RemoteFS(url).list_tree() if f"/{o.op_id}/" in k] == left


def test_a_rewrites_own_rollback_keeps_its_kept_backup_named(buckets, tmp_path, logdir_on):  # noqa: F811
    """The same on a run whose event file is rewritten (``bucket_rewrite``, one run, its own
    transaction): a file the trainer rewrote during the reduction keeps its backup and the manifest."""
    url = logdir_on("s3", _write_rewrite_logdir(tmp_path / "src"))
    planned = api.plan(url, "archive", quiet_period=0, runs=[RUN])
    [rp] = [rp for rp in planned.runs if rp.run == RUN]
    victim = next(a.path for a in rp.actions if a.kind == "rewrite")  # the event file, rewritten in place
    st = open_store(url)
    hit = []

    def rewrite():
        if not hit:
            hit.append(1)
            st.put(victim, b"new bytes written by the trainer")

    faults.arm("reduce.verify", rewrite)
    try:
        rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0, runs=[RUN])
    finally:
        faults.disarm_all()
    [o] = [o for o in rep.outcomes if o.run == RUN]
    assert o.status == Outcome.ROLLED_BACK, o.to_dict()
    assert victim in o.reason and "backups are kept" in o.reason, o.reason
    assert st.read_all(victim) == b"new bytes written by the trainer"
    assert o.op_id in [m["op_id"] for m in api.operations(url)]
