"""The restore of a reduction on a disk as one transaction on the one driver (issue #26 item 2):
``restore.LocalRestore`` run by ``engine.txn.run`` in the order of ``txn.STEPS``, its journal
records and failpoints (``restore.*``) at their historical instants, and a cancel honoured by the
driver up to the first put-back, never after: a run cancelled before it is left exactly as it was
(bytes, mtime, mode), its journal closed, its outcome coded ``interrupted``; a cancel during the
put-back does not stop it; a restore of many runs cancelled stops before the next run."""
import hashlib
import os
import stat
import time
from pathlib import Path

import pytest

from helpers_txn import observe_txn
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Failure, Outcome, Skip
from tb_footprint_plugin.engine import faults, restore, txn
from tb_footprint_plugin.engine.context import CancelToken
from tb_footprint_plugin.engine.vault import RESTORE_TMP_PREFIX
from tb_footprint_plugin.storage.paths import state_dir

pytestmark = pytest.mark.usefixtures("disarm_faults")

OLD = time.time() - 7 * 86400
DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}
PY = ("python",)


def _logdir(root: Path, runs=("exp",)) -> Path:
    """Each run: scalars and a profile session in its own folder (the reduce removes the session:
    the restore makes its folders again and puts its files back); one file with an odd mode."""
    for name in runs:
        with synth.EventWriter(str(root / name)) as w:
            for s in range(5):
                w.scalar("loss", s, 1.0 / (s + 1))
        session = root / name / "plugins" / "profile" / "2026_01_01_00_00_00"
        session.mkdir(parents=True)
        (session / "host.xplane.pb").write_bytes(os.urandom(3000))
        (session / "host.trace.json.gz").write_bytes(os.urandom(2000))
        os.chmod(session / "host.xplane.pb", 0o640)
    for d, dirs, files in os.walk(root):
        for n in files + dirs:
            os.utime(os.path.join(d, n), (OLD, OLD))
    return root


def snapshot(root: Path) -> dict:
    """rel path -> (sha256, mtime_ns, mode) of every file, (mtime_ns, mode) of every folder,
    outside the state folder."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if rel.startswith(".tb-footprint"):
            continue
        st = p.lstat()
        if p.is_file():
            out[rel] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mtime_ns, stat.S_IMODE(st.st_mode))
        else:
            out[rel] = ("dir", st.st_mtime_ns, stat.S_IMODE(st.st_mode))
    return out


def _reduced(tmp_path: Path, runs=("exp",)):
    logdir = _logdir(tmp_path / "logs", runs)
    original = snapshot(logdir)
    rep = api.reduce_logdir(str(logdir), policy=DROP, dry_run=False, quiet_period=0, verify_backends=PY)
    assert [o.status for o in rep.outcomes if o.run in runs] == ["verified"] * len(runs), rep.to_dict()
    reduced = snapshot(logdir)
    assert reduced != original
    return logdir, original, reduced


def _journals(logdir: Path) -> list:
    d = Path(state_dir(str(logdir))) / "journal"
    return sorted(os.listdir(d)) if d.is_dir() else []


def _observe(monkeypatch, failpoints):
    return observe_txn(monkeypatch, failpoints)


def test_a_restore_is_a_LocalRestore_run_by_the_driver_step_by_step(tmp_path, monkeypatch):
    """The driver's steps in order, each of the restore's failpoints at its instant inside them
    (the put-back, ``restore.dirs`` to ``restore.check``, is the swap), and the run back whole."""
    logdir, original, _reduced_ = _reduced(tmp_path)
    seen, log = _observe(monkeypatch, faults.steps("restore", faults.LOCAL))
    (o,) = api.restore(str(logdir))
    assert o.status == Outcome.RESTORED and o.code is None, o.to_dict()
    assert seen == ["LocalRestore"]
    files = log.count("restore.file")
    assert files == 2 and log.count("restore_copied") == 2, log
    put_back = ["restore.dirs"] + ["restore_copied", "restore.file"] * files + ["restore.check"]
    assert log == ["journal", "restore.journal", "backup", "stage", "transform", "verify", "last_look",
                   "record:swap", "swap", *put_back, "commit"], log
    assert snapshot(logdir) == original
    assert _journals(logdir) == []


def test_a_cancel_before_the_put_back_leaves_the_run_as_it_was(tmp_path):
    """Cancelled once the begin record is written (the journal exists): the driver stops before
    the put-back; every file and folder as it was (bytes, mtime, mode), the journal closed,
    the outcome coded ``interrupted``; nothing is left for the next start, and a restore then
    gives every original back."""
    logdir, original, reduced = _reduced(tmp_path)
    token = CancelToken()
    journals_then = []

    def cancel_now():
        journals_then.append(_journals(logdir))
        token.cancel()

    faults.arm("restore.journal", cancel_now)
    (o,) = api.restore(str(logdir), cancel=token)
    assert len(journals_then) == 1 and len(journals_then[0]) == 1, journals_then  # it was written
    assert o.status == Outcome.FAILED and o.code == Failure.INTERRUPTED, o.to_dict()
    assert "nothing was changed" in o.reason and o.op_id
    assert snapshot(logdir) == reduced
    assert _journals(logdir) == []
    assert not api.status(str(logdir))["unfinished_operations"]
    ops = [m for m in api.operations(str(logdir)) if m["kind"] == "reduce"]
    assert [m.get("restored_by") for m in ops] == [None]
    faults.disarm_all()
    (o,) = api.restore(str(logdir))
    assert o.status == Outcome.RESTORED, o.to_dict()
    assert snapshot(logdir) == original


def test_a_cancel_after_the_streamed_check_leaves_no_temporary(tmp_path, monkeypatch):
    """Backups checked after the begin record (streamed into their targets' temporaries, as a big
    remote backup is): a cancel seen after that check, before the put-back, removes every
    temporary and gives their folders their times back; the journal is closed."""
    logdir, _original, reduced = _reduced(tmp_path)
    monkeypatch.setattr(restore, "checked_in_place", lambda vault, f: True)
    token = CancelToken()
    temps = []
    real = restore.prepare_streamed

    def streamed_then_cancel(*a, **k):
        real(*a, **k)
        temps.extend(p for p in logdir.rglob(RESTORE_TMP_PREFIX + "*"))
        token.cancel()

    monkeypatch.setattr(restore, "prepare_streamed", streamed_then_cancel)
    (o,) = api.restore(str(logdir), cancel=token)
    assert temps, "the check streamed its backups into temporaries"
    assert o.status == Outcome.FAILED and o.code == Failure.INTERRUPTED, o.to_dict()
    assert not list(logdir.rglob(RESTORE_TMP_PREFIX + "*"))
    assert snapshot(logdir) == reduced
    assert _journals(logdir) == []


def test_a_cancel_during_the_streamed_check_stops_before_the_next_download(tmp_path, monkeypatch):
    """A cancel set while the first of two backups is streamed in: the second is not downloaded;
    the temporary made goes, the run stays as it was, the journal is closed."""
    from tb_footprint_plugin.engine import restore_staged

    logdir, _original, reduced = _reduced(tmp_path)
    monkeypatch.setattr(restore, "checked_in_place", lambda vault, f: True)
    token = CancelToken()
    downloads = []
    real = restore_staged.hash_and_count

    def download_then_cancel(src, sink):
        downloads.append(1)
        token.cancel()
        return real(src, sink)

    monkeypatch.setattr(restore_staged, "hash_and_count", download_then_cancel)
    (o,) = api.restore(str(logdir), cancel=token)
    assert downloads == [1]
    assert o.status == Outcome.FAILED and o.code == Failure.INTERRUPTED, o.to_dict()
    assert not list(logdir.rglob(RESTORE_TMP_PREFIX + "*"))
    assert snapshot(logdir) == reduced
    assert _journals(logdir) == []


def test_a_cancel_during_the_put_back_does_not_stop_it(tmp_path):
    """Past the first put-back a restore is finished, never undone: a cancel set after the first
    original went back (``restore.file``) is not honoured; the run comes back whole."""
    logdir, original, _reduced_ = _reduced(tmp_path)
    token = CancelToken()
    faults.arm("restore.file", token.cancel)
    (o,) = api.restore(str(logdir), cancel=token)
    assert token.cancelled
    assert o.status == Outcome.RESTORED and o.code is None, o.to_dict()
    assert snapshot(logdir) == original
    assert _journals(logdir) == []


def test_a_cancelled_restore_of_many_runs_stops_before_the_next_run(tmp_path):
    """Cancelled while the first run is put back: that run is restored whole, the next is not
    started (``cancelled``) and stays as it was; every outcome lands."""
    logdir, original, reduced = _reduced(tmp_path, runs=("a", "b"))
    token = CancelToken()
    faults.arm("restore.check", token.cancel)
    landed = []
    outs = api.restore(str(logdir), on_outcome=landed.append, cancel=token)
    assert [o.status for o in outs] == [Outcome.RESTORED, Outcome.SKIPPED], [o.to_dict() for o in outs]
    assert outs[1].code == Skip.CANCELLED and landed == outs
    first, second = outs[0].run, outs[1].run
    now = snapshot(logdir)
    assert {k: v for k, v in now.items() if k.startswith(first + "/")} == \
        {k: v for k, v in original.items() if k.startswith(first + "/")}
    assert {k: v for k, v in now.items() if k.startswith(second + "/")} == \
        {k: v for k, v in reduced.items() if k.startswith(second + "/")}
    assert _journals(logdir) == []


def test_a_cancel_given_before_the_restore_starts_none(tmp_path):
    """A token already cancelled: no run is started, nothing changes."""
    logdir, _original, reduced = _reduced(tmp_path, runs=("a", "b"))
    token = CancelToken()
    token.cancel()
    outs = api.restore(str(logdir), cancel=token)
    assert [(o.status, o.code) for o in outs] == [(Outcome.SKIPPED, Skip.CANCELLED)] * 2
    ops = {m["run"]: m["op_id"] for m in api.operations(str(logdir)) if m["kind"] == "reduce"}
    assert {o.run: o.op_id for o in outs} == ops  # which reduction was not restored
    assert snapshot(logdir) == reduced


def test_a_cancel_given_before_the_restore_starts_no_retired_run_either(tmp_path):
    """A retired run (which comes back first) is not started either once cancelled."""
    logdir, _original, reduced = _reduced(tmp_path, runs=("a", "b"))
    rep = api.retire(str(logdir), api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], rep.to_dict()
    retired = snapshot(logdir)
    token = CancelToken()
    token.cancel()
    outs = api.restore(str(logdir), cancel=token)
    assert {(o.status, o.code) for o in outs} == {(Outcome.SKIPPED, Skip.CANCELLED)}, [o.to_dict() for o in outs]
    (retirement,) = api.retired(str(logdir))
    assert (outs[0].run, outs[0].op_id) == ("b", retirement["op_id"])  # the retired run first
    assert sorted(o.run for o in outs[1:]) == ["a", "b"]  # then every reduction
    assert snapshot(logdir) == retired
    assert [r["run"] for r in api.retired(str(logdir))] == ["b"]  # still retired
