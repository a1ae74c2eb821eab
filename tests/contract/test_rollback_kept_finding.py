"""Issue #26: a bucket rollback that keeps a backup because its key no longer holds the original
its journal recorded says it as a coded finding, ``{code: original_not_in_place, path}``, on the
outcome (``RunOutcome.findings`` of a reduction's own rollback, ``RecoveryOutcome.findings`` of a
recovery's), not in words only: a program reading ``--json`` tells which key without parsing the
reason (and B3's release of a rolled-back run's blobs leaves an outcome with findings alone)."""
import pytest

from contract_stores import buckets, logdir_on  # noqa: F401 - fixtures
from test_objstore import DROP_PROFILES, _write_rewrite_logdir, demo_logdir  # noqa: F401
from test_rollback_keeps_backup_of_astray_original import RUN, _journals
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Outcome, Recovery
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")

NEW = b"new bytes written by the trainer"


def _user(st) -> dict:
    return {e.key: st.read_all(e.key) for e in st.list("") if not e.key.startswith(".tb-footprint")}


def test_a_rewrites_own_rollback_notes_the_kept_key(buckets, tmp_path, logdir_on):  # noqa: F811
    url = logdir_on("s3", _write_rewrite_logdir(tmp_path / "src"))
    planned = api.plan(url, "archive", quiet_period=0, runs=[RUN])
    [rp] = [rp for rp in planned.runs if rp.run == RUN]
    victim = next(a.path for a in rp.actions if a.kind == "rewrite")
    st = open_store(url)
    hit = []

    def rewrite():  # the trainer rewrites a planned file after its backup
        if not hit:
            hit.append(1)
            st.put(victim, NEW)

    faults.arm("reduce.verify", rewrite)
    try:
        rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0, runs=[RUN])
    finally:
        faults.disarm_all()
    [o] = [o for o in rep.outcomes if o.run == RUN]
    assert o.status == Outcome.ROLLED_BACK, o.to_dict()
    assert {"code": Finding.ORIGINAL_NOT_IN_PLACE, "path": victim} in o.findings, o.findings
    assert o.to_dict()["findings"] == o.findings  # what --json says


def test_a_batchs_own_rollback_notes_the_kept_key(buckets, demo_logdir):  # noqa: F811
    bucket = buckets("s3")
    url = bucket.upload(demo_logdir, "logs")
    planned = api.plan(url, DROP_PROFILES, quiet_period=0)
    victim_run = next(rp for rp in planned.runs if not rp.skipped)
    victim = next(a.path for a in victim_run.actions if a.kind == "delete")
    hit = []

    def rewrite():  # the trainer rewrites a planned file after its backup
        if not hit:
            hit.append(1)
            bucket.fs.pipe_file(bucket.key("logs/" + victim), NEW)

    faults.arm("reduce.verify", rewrite)
    try:
        rep = api.reduce_logdir(url, policy=DROP_PROFILES, dry_run=False, quiet_period=0, runs=[victim_run.run])
    finally:
        faults.disarm_all()
    o = next(o for o in rep.outcomes if o.run == victim_run.run)
    assert o.status == Outcome.ROLLED_BACK, o.to_dict()
    assert {"code": Finding.ORIGINAL_NOT_IN_PLACE, "path": victim} in o.findings, o.findings


@pytest.mark.parametrize("store", ["s3", "az"])
def test_a_recovery_keeping_a_backup_notes_the_kept_key(store, tmp_path, logdir_on):  # noqa: F811
    url = logdir_on(store, _write_rewrite_logdir(tmp_path / "src"))
    st = open_store(url)
    before = _user(st)
    stale = {}

    def capture():  # the journal as its owner left it before its commit step
        [key] = _journals(st)
        stale[key] = st.read_all(key)

    faults.arm("reduce.backup", capture)
    rep = api.reduce_logdir(url, policy="archive", dry_run=False, runs=[RUN], quiet_period=0)
    faults.disarm_all()
    [o] = [o for o in rep.outcomes if o.run == RUN]
    assert o.status == Outcome.VERIFIED and stale
    reduced = _user(st)
    changed = {k for k in before if reduced.get(k) != before[k]}
    [(key, doc)] = stale.items()
    st.put(key, doc)  # a journal older than the run: its originals not in place
    [r] = [r for r in api.recover_logdir(url) if r.op_id == o.op_id]
    assert (r.action, r.code) == (Recovery.BACKUPS_KEPT, Finding.ORIGINAL_NOT_IN_PLACE), vars(r)
    assert r.findings and {f["code"] for f in r.findings} == {Finding.ORIGINAL_NOT_IN_PLACE}, r.findings
    assert sorted(f["path"] for f in r.findings) == sorted(k["path"] for k in r.kept), (r.findings, r.kept)
    assert {f["path"] for f in r.findings} <= changed, (r.findings, changed)
