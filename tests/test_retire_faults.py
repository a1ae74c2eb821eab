"""Fault injection at every step of a retirement and of its restore.

After an exception, a full disk, or a SIGKILL at that instant followed by recovery, the run is
either back in the logdir byte for byte or retired (gone from the logdir, whole in the vault and
restorable byte for byte). Never a mix, never a lost byte — on one filesystem (renames) and
across two (copies, checked, then deletes).
"""
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import REPO, copy_real, user_files
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.retire import RETIRE_STEPS, UNRETIRE_STEPS
from tb_footprint_plugin.storage.paths import state_dir

from helpers_cli import cli_env
from test_late_records import PATH_WRITER, append_by_path

#: past the manifest: a crash there ends retired (recovery finds the manifest written)
RETIRED_ON_CRASH = {"retire.manifest"}
#: steps that only exist when the vault is on another filesystem
CROSS_ONLY = {"retire.mid_delete"}

_KILL_SCRIPT = """
import sys
from tb_footprint_plugin import api
rule = api.retire_rule(runs=["train"], include_nested=True)
backup = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else None
if sys.argv[3] == "retire":
    api.retire(sys.argv[1], rule, dry_run=False, backup_dir=backup)
else:
    api.restore(sys.argv[1], run="train", backup_dir=backup)
"""


pytestmark = pytest.mark.usefixtures("disarm_faults")


#: (vault placement, step): the delete phase exists only across filesystems
RETIRE_CASES = [(m, s) for m in ("same_fs", "cross_fs") for s in RETIRE_STEPS if not (m == "same_fs" and s in CROSS_ONLY)]


@pytest.fixture
def setup(request, tmp_path):
    mode = request.param
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    vault = None
    if mode == "cross_fs":
        vault = Path("/dev/shm") / f"tbfp-faults-{uuid.uuid4().hex[:8]}"
        vault.mkdir()
        assert os.stat(vault).st_dev != os.stat(logdir).st_dev
    yield mode, logdir, (str(vault) if vault else None)
    if vault:
        shutil.rmtree(vault, ignore_errors=True)


def _settled(logdir: Path, before: dict, retired: bool, backup):
    now = user_files(logdir)
    outside = {k: v for k, v in before.items() if not k.startswith("train")}
    if retired:
        assert now == outside
        [r] = api.retired(str(logdir), backup_dir=backup)
        assert r["run"] == "train"
    else:
        assert now == before
        assert api.retired(str(logdir), backup_dir=backup) == []
    assert not [n for n in now if ".footprint-" in n], "temp files left in the logdir"
    journal = Path(state_dir(str(logdir))) / "journal"
    assert not (journal.is_dir() and os.listdir(journal)), "an operation was left unsettled"
    # whatever the outcome, a full retire + restore cycle works from here, byte for byte
    if not retired:
        assert api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, backup_dir=backup).ok
    outs = api.restore(str(logdir), run="train", backup_dir=backup)
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert user_files(logdir) == before
    vault = Path(backup) if backup else Path(state_dir(str(logdir)))
    assert not os.listdir(vault / "retired"), "retired files left behind after the restore"


@pytest.mark.parametrize("kind", ["raise", "enospc"])
@pytest.mark.parametrize("setup,step", RETIRE_CASES, indirect=["setup"])
def test_in_process_failure_puts_the_run_back(setup, step, kind):
    mode, logdir, backup = setup
    before = user_files(logdir)
    hits = []
    faults.arm(step, lambda: (hits.append(step), faults.arm(step, kind), faults.hit(step)))
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, backup_dir=backup)
    assert hits == [step]
    faults.disarm_all()
    [o] = rep.outcomes
    # before the verified manifest every failure puts the run back; once it is written the run is
    # retired, as a crash there leaves it: never rolled back past its record (review R11 F2)
    if step in RETIRED_ON_CRASH:
        assert o.status == "verified", o.to_dict()
    else:
        assert o.status == "rolled_back", o.to_dict()
    _settled(logdir, before, retired=step in RETIRED_ON_CRASH, backup=backup)


@pytest.mark.parametrize("setup,step", RETIRE_CASES, indirect=["setup"])
def test_sigkill_then_recovery(setup, step):
    mode, logdir, backup = setup
    before = user_files(logdir)
    env = dict(os.environ, TB_FOOTPRINT_FAILPOINTS=f"{step}=kill",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _KILL_SCRIPT, str(logdir), backup or "", "retire"], env=env,
                       timeout=300)
    assert p.returncode == -9, "the failpoint should have killed the process"
    recovered = api.recover_logdir(str(logdir), backup)
    assert [r.action for r in recovered] == (["completed"] if step in RETIRED_ON_CRASH else ["rolled_back"]), recovered
    _settled(logdir, before, retired=step in RETIRED_ON_CRASH, backup=backup)


@pytest.mark.parametrize("setup", ["same_fs", "cross_fs"], indirect=True)
@pytest.mark.parametrize("step", UNRETIRE_STEPS)
def test_restore_killed_is_finished_on_recovery(setup, step):
    mode, logdir, backup = setup
    before = user_files(logdir)
    assert api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, backup_dir=backup).ok
    env = dict(os.environ, TB_FOOTPRINT_FAILPOINTS=f"{step}=kill",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _KILL_SCRIPT, str(logdir), backup or "", "restore"], env=env,
                       timeout=300)
    assert p.returncode == -9
    recovered = api.recover_logdir(str(logdir), backup)
    assert [r.action for r in recovered] == ["completed"], recovered
    assert user_files(logdir) == before
    assert api.retired(str(logdir), backup_dir=backup) == []
    journal = Path(state_dir(str(logdir))) / "journal"
    assert not os.listdir(journal)


def test_planted_journal_cannot_lead_recovery_out_of_the_logdir(tmp_path):
    """A journal is untrusted input: one naming paths outside the logdir, a foreign vault or a
    malformed op id is refused by recovery, which touches nothing."""
    import json

    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    before = user_files(logdir)
    journal = Path(state_dir(str(logdir))) / "journal"
    journal.mkdir(parents=True)
    cases = {
        "20260101T000000-aaaaaa": {"vault": state_dir(str(logdir)),
                                   "files": [{"path": str(outside / "precious"), "size": 7, "mode": 0o644,
                                              "mtime_ns": 0, "ino": 0, "sha256": "0" * 64}],
                                   "dirs": [{"path": "../outside/new", "mode": 0o755}]},
        "20260101T000000-bbbbbb": {"vault": str(outside), "files": [], "dirs": []},
        "../../outside": {"vault": state_dir(str(logdir)), "files": [], "dirs": []},
    }
    for i, (op, extra) in enumerate(cases.items()):
        rec = {"type": "begin", "kind": "retire", "op_id": op, "run": "train", "takes_along": [],
               "logdir": str(logdir), "same_fs": True, "bytes": 7, "t": 0, **extra}
        (journal / f"20260101T00000{i}-cccccc.jsonl").write_text(json.dumps(rec) + "\n")
    outs = api.recover_logdir(str(logdir))
    # each planted journal is refused by the trust checks and reported, never acted on
    assert len(outs) == 3 and all(o.action == "refused" and o.code for o in outs), outs
    assert (outside / "precious").read_text() == "keep me" and sorted(os.listdir(outside)) == ["precious"]
    assert user_files(logdir) == before


# ---------------------------------------------------------------------------------------
# issue 25.6: a writer appending by path while the run is being retired
# ---------------------------------------------------------------------------------------
# the writer racing the retire is test_late_records' PATH_WRITER (append_by_path): a training job's
# writer that opens its event file by path, appends records and closes it, as a resumed job does
def _two_file_run(logdir):
    """Run 'train' with two event files (retired in name order) and scalars in each."""
    from tb_footprint_plugin.synth import EventWriter

    paths = []
    for index in (0, 1):
        with EventWriter(str(logdir / "train"), index=index) as w:
            for s in range(20):
                w.scalar(f"loss{index}", s, 1.0 / (s + 1))
            paths.append(Path(w.path))
    old = 1_600_000_000
    for p in paths:
        os.utime(p, (old, old))
    return paths


def _steps(run_dir, tag):
    from tensorboard.backend.event_processing import plugin_event_multiplexer as pem

    mux = pem.EventMultiplexer()
    mux.AddRun(str(run_dir), "r")
    mux.Reload()
    acc = mux.GetAccumulator("r")
    tags = acc.Tags()
    if tag in tags.get("scalars", []):
        return [e.step for e in acc.Scalars(tag)]
    return [e.step for e in acc.Tensors(tag)] if tag in tags.get("tensors", []) else []


@pytest.mark.parametrize("setup", ["same_fs", "cross_fs"], indirect=True)
@pytest.mark.parametrize("target", ["not_yet_moved", "already_moved"])
def test_retire_racing_a_writer_by_path_settles_and_keeps_every_record(setup, target, tmp_path):
    """The writer appends by path while the retirement moves files: to a file still in place
    (it grows: the retire sees the change and rolls back) or to one already in the vault (the
    writer makes a new file at its path). The rollback finds the run intact and settles: no
    'rollback incomplete', no journal left, every record in the run, a later retire allowed.
    The outcome is a skip (``active``), as a writer found after the journal is on every store and
    in a reduce (one rule: ``retire_run.Retire.failed``); it said ``rolled_back`` / ``error`` on a
    disk while a bucket said ``skipped`` / ``active``."""
    mode, _, backup = setup
    logdir = tmp_path / "race"
    first, second = _two_file_run(logdir)
    originals = {p: p.read_bytes() for p in (first, second)}
    victim = second if target == "not_yet_moved" else first
    fired = []
    faults.arm("retire.mid_move", lambda: (fired.append(1), append_by_path(victim, 1000)))
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, backup_dir=backup,
                     quiet_period=0)
    faults.disarm_all()
    assert fired
    [o] = rep.outcomes
    assert (o.status, o.code) == ("skipped", "active"), o.to_dict()
    journal = Path(state_dir(str(logdir))) / "journal"
    assert not os.listdir(journal), "the rollback left its journal: it never settles"
    assert api.recover_logdir(str(logdir), backup) == []
    # every original byte back, and the late records in the run, where TensorBoard reads them
    for p, data in originals.items():
        assert p.read_bytes()[:len(data)] == data
    if target == "not_yet_moved" or mode == "cross_fs":  # a copy's original never left: it grew
        assert victim.read_bytes() != originals[victim] and "kept in it" in o.reason
    else:  # renamed into the vault: the writer made a new file at the path
        aside = first.parent / (first.name + ".salvaged-001")
        assert first.read_bytes() == originals[first] and aside.exists() and aside.name in o.reason
    assert _steps(logdir / "train", "late") == [1000, 1001, 1002]
    assert _steps(logdir / "train", "loss0") == list(range(20))
    assert api.retired(str(logdir), backup_dir=backup) == []
    # the run is no longer blocked: it retires and comes back
    before = user_files(logdir)
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, backup_dir=backup, quiet_period=0)
    assert [x.status for x in rep.outcomes] == ["verified"], [x.to_dict() for x in rep.outcomes]
    assert [x.status for x in api.restore(str(logdir), run="train", backup_dir=backup)] == ["restored"]
    assert user_files(logdir) == before


_KILLED_RACE = r"""
import subprocess, sys, os
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import faults
logdir, victim, writer = sys.argv[1], sys.argv[2], sys.argv[3]
def race():
    subprocess.run([sys.executable, "-c", writer, victim, "1000", "3"], check=True)
    os.kill(os.getpid(), 9)
# the writer appends, the retirement goes on, sees it and dies in its rollback's place: a crash
faults.arm("retire.mid_move", race)
api.retire(logdir, api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0)
"""


def test_recover_settles_a_retire_killed_while_a_writer_appended(tmp_path):
    logdir = tmp_path / "race"
    first, second = _two_file_run(logdir)
    originals = {p: p.read_bytes() for p in (first, second)}
    p = subprocess.run([sys.executable, "-c", _KILLED_RACE, str(logdir), str(second), PATH_WRITER], env=cli_env(),
                       timeout=300)
    assert p.returncode == -9
    journal = Path(state_dir(str(logdir))) / "journal"
    assert os.listdir(journal)
    rec = api.recover_logdir(str(logdir))
    assert [r.action for r in rec] == ["rolled_back"], [vars(r) for r in rec]
    assert "kept in it" in rec[0].detail
    assert not os.listdir(journal)
    assert api.recover_logdir(str(logdir)) == []
    assert second.read_bytes().startswith(originals[second]) and first.read_bytes() == originals[first]
    assert _steps(logdir / "train", "late") == [1000, 1001, 1002]
    rep = api.retire(str(logdir), api.retire_rule(runs=["train"]), dry_run=False, quiet_period=0)
    assert [x.status for x in rep.outcomes] == ["verified"], [x.to_dict() for x in rep.outcomes]
