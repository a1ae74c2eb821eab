"""A bucket reduce honours every option a disk reduce does (issue #26, item 2: "one rule, every
store"): a per-run ``timeout``, progress steps with the ledger's ``verifying`` mark, ``jobs``, a
custom ``--ledger`` path, ``vault_format``, and ``finished_at`` as the commit record's time. On the
object-store servers of ``tests/objstore_servers.py``; each test fails on the code before.
"""
import time

import pytest

from test_bucket_state_schema import DROP_PROFILES, STATE, _keys, _logdir
from test_objstore import _write_rewrite_logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine import faults

pytestmark = pytest.mark.usefixtures("disarm_faults")

_n = iter(range(10_000))


@pytest.fixture(scope="module")
def rewrite_logdir(tmp_path_factory):
    """``torch/resnet``: two PyTorch traces the lossless policy gzips (a rewrite transaction);
    ``exp/hist``: an event file the archive policy rewrites."""
    return _write_rewrite_logdir(tmp_path_factory.mktemp("options") / "logs")


@pytest.fixture(scope="module")
def torch_runs(tmp_path_factory):
    """Three runs of PyTorch traces the lossless policy gzips: three rewrite transactions."""
    import shutil

    root = _write_rewrite_logdir(tmp_path_factory.mktemp("jobs") / "logs")
    shutil.rmtree(root / "exp")
    for i in (2, 3):
        shutil.copytree(root / "torch" / "resnet", root / "torch" / f"resnet{i}")
    return root


def _data(bucket, prefix) -> dict:
    """rel key -> sha256 of the logdir's objects, our state left out."""
    return {k: v for k, v in bucket.hashes(prefix).items() if not k.startswith(STATE + "/")}


def _nothing_left(url) -> None:
    """No journal, lock, backup, temporary key or manifest of ours left behind."""
    for folder in ("journal", "locks", "manifests", "tmp"):
        assert _keys(url, f"{STATE}/{folder}/") == [], folder
    assert api.operations(url) == []


# -- 1. timeout -----------------------------------------------------------------------------------
def test_a_rewrite_transaction_past_its_timeout_is_rolled_back_and_said_so(s3_bucket, rewrite_logdir):
    prefix = f"t{next(_n)}"
    url = s3_bucket.upload(rewrite_logdir, prefix)
    before = _data(s3_bucket, prefix)
    faults.arm("reduce.backup", lambda: time.sleep(1.0))  # its backups take longer than its timeout
    (o,) = api.reduce_logdir(url, policy="lossless", dry_run=False, quiet_period=0, runs=["torch/resnet"],
                             verify_backends=("python",), timeout=0.5).outcomes
    # before: the timeout was ignored and the run reduced
    assert (o.status, o.code) == (Outcome.ROLLED_BACK, Failure.ERROR), (o.status, o.reason)
    assert "timed out before the commit point" in o.reason  # as a disk says it
    assert _data(s3_bucket, prefix) == before
    _nothing_left(url)


def test_a_drop_batch_past_its_timeout_rolls_back_every_run_and_leaves_nothing(bucket, tmp_path):
    url, pol = _logdir(bucket, tmp_path, n=3)
    before = _data(bucket, "logs")
    faults.arm("reduce.backup", lambda: time.sleep(1.0))  # the batch's backups made, past the timeout
    rep = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0, timeout=0.5, ledger="default")
    assert [(o.status, o.code) for o in rep.outcomes] == [(Outcome.ROLLED_BACK, Failure.ERROR)] * 3, \
        [(o.status, o.reason) for o in rep.outcomes]
    assert all("timed out before the commit point" in o.reason for o in rep.outcomes)
    assert _data(bucket, "logs") == before
    _nothing_left(url)
    assert api.status(url)["batch"]["counts"] == {"failed": 3}
    # within its timeout the same batch reduces
    faults.disarm_all()
    rep = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0, timeout=600)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED] * 3


# -- 2. progress steps and the ledger's verifying mark ---------------------------------------------
def _marks(monkeypatch) -> list:
    """(run, state) of every ledger mark the reduce writes."""
    from tb_footprint_plugin.engine.bucket_ledger import BucketLedger

    seen, real = [], BucketLedger.mark

    def mark(self, run, state, **kw):
        seen.append((run, state))
        return real(self, run, state, **kw)

    monkeypatch.setattr(BucketLedger, "mark", mark)
    return seen


def _steps(calls, run) -> list:
    out = []
    for r, step, _frac in calls:
        if r == run and (not out or out[-1] != step):
            out.append(step)
    return out


def test_a_drop_batch_reports_the_disks_steps_and_marks_each_run_verifying(s3_bucket, tmp_path, monkeypatch):
    url, pol = _logdir(s3_bucket, tmp_path, n=2)
    marks = _marks(monkeypatch)
    calls = []
    rep = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0, ledger="default",
                            progress=lambda run, step, frac: calls.append((run, step, frac)))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED] * 2
    for o in rep.outcomes:
        # before: start and done only
        assert _steps(calls, o.run) == ["start", "backup", "verify", "done"], calls
        assert [s for r, s in marks if r == o.run] == ["reducing", "verifying", "done"], marks
    fracs = [f for _r, _s, f in calls]
    assert all(0.0 <= f <= 1.0 for f in fracs)


def test_a_rewrite_transaction_reports_the_disks_steps_and_marks_its_run_verifying(
        s3_bucket, rewrite_logdir, monkeypatch):
    url = s3_bucket.upload(rewrite_logdir, f"t{next(_n)}")
    marks = _marks(monkeypatch)
    calls = []
    (o,) = api.reduce_logdir(url, policy="lossless", dry_run=False, quiet_period=0, runs=["torch/resnet"],
                             verify_backends=("python",), ledger="default",
                             progress=lambda run, step, frac: calls.append((run, step, frac))).outcomes
    assert o.status == Outcome.VERIFIED, o.reason
    assert _steps(calls, o.run) == ["start", "backup", "stage", "verify", "done"], calls
    assert [f for _r, _s, f in calls] == sorted(f for _r, _s, f in calls)  # never backwards
    assert [s for r, s in marks if r == o.run] == ["reducing", "verifying", "done"], marks


# -- 5. finished_at is the commit record's time ----------------------------------------------------
def test_each_run_of_a_batch_is_finished_at_its_commit_record_not_its_own_backups(s3_bucket, tmp_path, monkeypatch):
    import json

    from tb_footprint_plugin.engine.bucket_state import BucketJournal

    url, pol = _logdir(s3_bucket, tmp_path, n=3)
    commits = []
    real = BucketJournal.step

    def step(self, name, **kw):
        real(self, name, **kw)
        if name == "swapping":  # the commit record as the store holds it
            s3_bucket.fs.invalidate_cache()
            doc = json.loads(s3_bucket.fs.cat_file(self.path))
            commits.append([t for s, t in doc["steps"] if s == "swapping"][0])

    monkeypatch.setattr(BucketJournal, "step", step)
    faults.arm("reduce.backup_copy", lambda: time.sleep(0.2))  # each run's backups take time
    rep = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED] * 3
    (commit,) = commits  # one batch, one commit record
    finished = {m["run"]: m["finished_at"] for m in api.operations(url)}
    # before: each run dated when its own backups were made, the first ones long before the commit
    assert set(finished.values()) == {commit}, (finished, commit)
    hist = [h for h in api.history(url) if h["kind"] == "reduce"]
    assert len(hist) == 3 and {h["time"] for h in hist} == {commit}, hist


# -- 3. jobs ---------------------------------------------------------------------------------------
def test_jobs_run_a_buckets_rewrite_transactions_at_once_with_the_same_requests(s3_bucket, torch_runs):
    import threading

    serial_url = s3_bucket.upload(torch_runs, f"t{next(_n)}")
    serial = api.reduce_logdir(serial_url, policy="lossless", dry_run=False, quiet_period=0,
                               verify_backends=("python",), jobs=1, ledger="default")
    assert [o.status for o in serial.outcomes] == [Outcome.VERIFIED] * 3, [o.reason for o in serial.outcomes]

    url = s3_bucket.upload(torch_runs, f"t{next(_n)}")
    before = _data(s3_bucket, url.split("/")[-1])
    met = threading.Barrier(2, timeout=20)
    waited = []

    def two_at_once():  # each transaction's uploads are read back: two of them must be here together
        if not waited:
            waited.append(1)
            met.wait()
        elif len(waited) == 1:
            waited.append(2)
            met.wait()

    faults.arm("reduce.upload", two_at_once)
    rep = api.reduce_logdir(url, policy="lossless", dry_run=False, quiet_period=0, verify_backends=("python",),
                            jobs=3, ledger="default")
    # before: one thread, the first transaction waited alone and was rolled back (a broken barrier)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED] * 3, [o.reason for o in rep.outcomes]
    assert [o.run for o in rep.outcomes] == [rp.run for rp in rep.plan.runs]  # the plan's order
    assert api.status(url)["batch"]["counts"] == {"done": 3}
    assert not _keys(url, f"{STATE}/ledger-inflight/") and not _keys(url, f"{STATE}/journal/")
    # no request more than one thread makes: the same but for the worker's in-flight ledger marker,
    # put and deleted once for runs in flight together instead of once per run, and their marks,
    # written together (a run's verify mark waits once its start is written with another's; the
    # outcomes once none is in flight: at most 2 PUTs fewer a run) (and the bytes up of the ledger
    # entries, which name their times). Each marker put saved is a marker delete saved: how many
    # depends on how the threads overlap (a loaded machine overlaps them more), so it is counted.
    got, one = rep.requests, serial.requests
    assert {k: v for k, v in got.items() if k not in ("put", "delete", "requests", "bytes_up")} == \
        {k: v for k, v in one.items() if k not in ("put", "delete", "requests", "bytes_up")}, (got, one)
    markers_saved = one["delete"] - got["delete"]
    assert 0 <= markers_saved <= 2, (got, one)
    assert one["put"] - markers_saved - 2 * 3 <= got["put"] <= one["put"], (got, one)
    # and restore gives every object back
    assert all(r.status == Outcome.RESTORED for r in api.restore(url))
    assert _data(s3_bucket, url.split("/")[-1]) == before


# -- 4. a custom ledger path and vault_format ------------------------------------------------------
def test_a_ledger_path_elsewhere_is_refused_naming_it_and_the_buckets_own_is_honoured(s3_bucket, tmp_path):
    from tb_footprint_plugin.codes import StoreError
    from tb_footprint_plugin.storage.store import StoreFailure

    url, pol = _logdir(s3_bucket, tmp_path, n=2)
    before = _data(s3_bucket, "logs")
    elsewhere = str(tmp_path / "my-ledger.json")
    with pytest.raises(StoreFailure) as e:  # before: reduced, the path silently ignored
        api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0, ledger=elsewhere)
    assert e.value.code == StoreError.NOT_SUPPORTED and elsewhere in str(e.value)
    assert _data(s3_bucket, "logs") == before and _keys(url, f"{STATE}/ledgers/") == []
    own = f"{url}/{STATE}/ledgers/batch"
    rep = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0, ledger=own + "/")
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED] * 2 and rep.ledger_path == own
    assert api.status(url)["batch"]["counts"] == {"done": 2}


@pytest.mark.parametrize("fmt", ["compressed", "hardlink"])
def test_a_vault_format_the_buckets_vault_cannot_take_is_refused_and_its_own_is_said(s3_bucket, tmp_path, fmt):
    from tb_footprint_plugin.codes import StoreError
    from tb_footprint_plugin.storage.store import StoreFailure

    url, pol = _logdir(s3_bucket, tmp_path, n=1)
    before = _data(s3_bucket, "logs")
    with pytest.raises(StoreFailure) as e:  # before: reduced, the format silently ignored
        api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0, vault_format=fmt)
    assert e.value.code == StoreError.NOT_SUPPORTED and repr(fmt) in str(e.value) and url in str(e.value)
    assert _data(s3_bucket, "logs") == before
    # the store's own form is said in the plan (and so in the report), and taken without a request
    rep = api.reduce_logdir(url, policy=pol, dry_run=False, quiet_period=0)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED]
    assert any(n.startswith("backups: whole server-side copies") for n in rep.plan.notes), rep.plan.notes


def test_a_local_blob_vault_takes_compressed_and_refuses_hardlink(s3_bucket, tmp_path):
    from tb_footprint_plugin.codes import StoreError
    from tb_footprint_plugin.storage.store import StoreFailure

    url, pol = _logdir(s3_bucket, tmp_path, n=2)
    vault = str(tmp_path / "vault")
    with pytest.raises(StoreFailure) as e:
        api.reduce_logdir(url, backup_dir=vault, policy=pol, dry_run=False, quiet_period=0, vault_format="hardlink")
    assert e.value.code == StoreError.NOT_SUPPORTED and vault in str(e.value)
    rep = api.reduce_logdir(url, backup_dir=vault, policy=pol, dry_run=False, quiet_period=0,
                            vault_format="compressed")
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED] * 2
    assert any(n.startswith(f"backups: compressed blobs in {vault}") for n in rep.plan.notes), rep.plan.notes
