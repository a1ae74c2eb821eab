"""One crash matrix over every store: the same failpoints, the same settling, the same assertions.

store (a POSIX folder, moto's S3, the GCS emulator, Azurite) x verb (reduce, restore, purge,
retire, unretire) x every declared failpoint of ``engine/faults.py`` that the store's engine hits
for that verb (on moto, the GCS emulator and Azurite, which pass the same bucket engine's steps,
each step and kind runs on one of the three: ``SAMPLED``). At the step, in-process, a failure is injected (``raise``: every store rolls it back
itself; a purge past its intent leaves it for the next start) and, as a second case, a crash
(``crash``: nothing after the instant runs, nothing rolled back, on every store, issue #26); for a
few steps per store a CLI process is SIGKILLed there instead. Then the next start (``recover``) settles it and, for every
store alike: the user's files are exactly as they were before the operation or exactly as the
clean operation leaves them (never a mix, nothing else in the logdir), nothing is left unfinished,
nothing is lost (a restore gives back every original byte for byte). A purge starts from a reduced
run and a retired one (``RETIRED``), so it frees a reduction's backups and a retired run's only
copy together; on a disk the retired run's purge is a transaction of its own, after the
reductions', and ``test_failure_in_a_disks_retired_purge_is_settled`` fails it there.

``test_every_declared_step_is_reached`` runs each (store, verb) once with every declared step
armed to record itself: a step the table declares and the engine no longer hits fails here, so
the table cannot rot; the clean run's result is what the cases compare with.
"""
import itertools
import os
import shutil
import signal
import subprocess
import sys
import uuid
from contract_stores import buckets  # noqa: F401 - the bucket fixture
from pathlib import Path

import pytest

from conftest import REPO, tree_hashes
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.blobstore import BlobStore
from tb_footprint_plugin.storage.store_posix import PosixStore

#: ``s3blobs``: an S3 logdir whose backups go to a local vault of blobs (``--backup-dir <folder>``)
STORES = ("posix", "s3", "gs", "az", "s3blobs")
ENGINE = {"posix": faults.LOCAL, "s3": faults.BUCKET, "gs": faults.BUCKET, "az": faults.BUCKET,
          "s3blobs": faults.BUCKET}
#: the steps a store takes besides its engine's
EXTRA = {"s3blobs": faults.BLOBS}


def steps_of(store, verb):
    """The declared steps ``verb`` passes on ``store``."""
    return faults.steps(verb, ENGINE[store]) + (faults.steps(verb, EXTRA[store]) if store in EXTRA else [])

VERBS = ("reduce", "restore", "purge", "retire", "unretire")
STATE = ".tb-footprint"
RUN = "exp"
#: the run a purge's setup retires (its only copy then in the vault): the purge frees a reduction's
#: backups and a retired run together
RETIRED = "base"
DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}
#: a real SIGKILL of the CLI: right before the commit record (put back) and inside the destructive
#: step (finished) on the disk; one of the two on each object store (a CLI start costs 5-8 s there)
KILLED = [("posix", "reduce.verify"), ("posix", "reduce.mid_swap"), ("s3", "reduce.mid_swap"),
          ("gs", "reduce.verify"), ("az", "reduce.mid_swap"), ("s3blobs", "reduce.blobs_added"),
          ("s3blobs", "reduce.mid_swap")]

CASES = [(s, v, step) for s in STORES for v in VERBS for step in steps_of(s, v)]
HOWS = ("failure", "crash")
#: The three object stores take each failpoint of the bucket engine in turn (CI time: 132 cases on
#: moto, the GCS emulator and Azurite were ~220 s of the suite's worker time, 50 now). Why a
#: sample loses no check: the failpoints s3, gs and az pass are the bucket engine's own
#: (engine/bucket_*.py), the same steps in the same order over the same ``BucketState`` calls on
#: each; what differs between them is the storage layer under those calls (conditional writes,
#: listings, server-side copies, deletes), and every store still runs every verb and both kinds of
#: failure here (``sampled``: with three steps or more a verb's step j, kind k runs on store
#: (j + k) mod 3 — each (step, kind) on one store, each store every verb and kind; with fewer steps
#: each store runs each kind at one step and every (step, kind) runs somewhere), every verb clean
#: (``test_every_declared_step_is_reached``, all stores), a real SIGKILL (``KILLED``), and the
#: storage verbs themselves in contract/test_store.py and test_blobstore.py.
#: ``test_the_bucket_sample_covers_every_store_verb_and_kind`` checks the rule holds. The disk
#: (its own engine) and ``s3blobs`` (the bucket engine beside a vault of blobs) run every case.
SAMPLED = ("s3", "gs", "az")


def sampled(store, verb, step, how) -> bool:
    """Whether the matrix runs (store, verb, step, how): always but on ``SAMPLED`` (see there)."""
    if store not in SAMPLED:
        return True
    steps = steps_of(store, verb)
    i, j, k = SAMPLED.index(store), steps.index(step), HOWS.index(how)
    if len(steps) >= len(SAMPLED):
        return (j + i + k) % len(SAMPLED) == 0
    return j == (i + k) % len(steps)


MATRIX = [(s, v, step, how) for s, v, step in CASES for how in HOWS if sampled(s, v, step, how)]


def _write_template(root: Path) -> Path:
    """``exp``: an event file archive rewrites (600 histogram steps, scalars, text, hparams) and a
    profile session of two files in its own folder; ``base``: scalars only (never touched)."""
    run = root / RUN
    with synth.EventWriter(str(run)) as w:
        w.hparams({"lr": 0.1}, ["acc"])
        for s in range(600):
            w.histogram("weights", s, [(i, i + 1, (i * s) % 5) for i in range(8)])
            if s % 50 == 0:
                w.scalar("acc", s, s / 600)
                w.text("notes", s, f"step {s}")
    session = run / "plugins" / "profile" / "2026_01_01_00_00_00"
    session.mkdir(parents=True)
    (session / "host.xplane.pb").write_bytes(os.urandom(3000))
    (session / "host.trace.json.gz").write_bytes(os.urandom(2000))
    with synth.EventWriter(str(root / "base")) as w:
        for s in range(5):
            w.scalar("loss", s, 1.0 / (s + 1))
    old = 1_700_000_000
    for d, dirs, files in os.walk(root):
        for n in files + dirs:
            os.utime(os.path.join(d, n), (old, old))
    return root


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return _write_template(tmp_path_factory.mktemp("matrix") / "logs")




@pytest.fixture(autouse=True)
def _disarm():
    yield
    faults.disarm_all()


_n = itertools.count()


class Place:
    """One fresh copy of the template logdir on one store, and how to read it back."""

    def __init__(self, store, template, tmp_path, buckets, cross_fs):
        self.store = store
        self.backup = None
        if store == "posix":
            dest = tmp_path / f"logs{next(_n)}"
            shutil.copytree(template, dest)
            self.url = str(dest)
            if cross_fs:  # the vault on another filesystem: the retire copies, checks, then unlinks
                vault = Path("/dev/shm") / f"tbfp-matrix-{uuid.uuid4().hex[:8]}"
                vault.mkdir()
                assert os.stat(vault).st_dev != os.stat(dest).st_dev
                self.backup = str(vault)
        else:
            self.bucket = buckets("s3" if store == "s3blobs" else store)
            self.prefix = f"c{next(_n)}-{uuid.uuid4().hex[:6]}"
            self.url = self.bucket.upload(template, self.prefix)
            if store == "s3blobs":
                self.backup = str(tmp_path / f"vault{next(_n)}")

    def user(self) -> dict:
        """rel path -> sha256 of every file of the logdir but the tool's own state."""
        if self.store == "posix":
            every = {k: v for k, v in tree_hashes(Path(self.url)).items() if v != "dir"}
        else:
            every = self.bucket.hashes(self.prefix, skip=(STATE,))
        return {k: v for k, v in every.items() if not k.startswith(STATE)}

    def close(self):
        if self.backup:
            shutil.rmtree(self.backup, ignore_errors=True)


@pytest.fixture
def place_of(template, tmp_path, buckets):
    made = []

    def make(store, verb):
        p = Place(store, template, tmp_path, buckets, cross_fs=verb in ("retire", "unretire"))
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


# --- the verbs, each after its setup --------------------------------------------------------
def _reduce(p, policy):
    return api.reduce_logdir(p.url, backup_dir=p.backup, policy=policy, dry_run=False, quiet_period=0,
                             verify_backends=("python",))


def setup(p, verb):
    """Bring the logdir to where ``verb`` starts; returns that state (the user's files)."""
    if verb in ("restore", "purge"):
        rep = _reduce(p, DROP)
        assert [o.status for o in rep.outcomes if o.run == RUN] == ["verified"], rep.to_dict()
        if verb == "purge":
            _retire(p, RETIRED)  # every store retires: a disk's retired runs are purged by their own transaction
    elif verb == "unretire":
        _retire(p)
    return p.user()


def _retire(p, run=RUN):
    rep = api.retire(p.url, api.retire_rule(runs=[run]), dry_run=False, quiet_period=0, backup_dir=p.backup)
    assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()


def act(p, verb):
    """The operation under test (its outcome is not asserted here: the settled state is)."""
    if verb == "reduce":
        _reduce(p, "archive")
    elif verb == "restore":
        api.restore(p.url, backup_dir=p.backup)
    elif verb == "purge":
        api.purge(p.url, yes=True, backup_dir=p.backup)
    elif verb == "retire":
        api.retire(p.url, api.retire_rule(runs=[RUN]), dry_run=False, quiet_period=0, backup_dir=p.backup)
    else:
        api.restore(p.url, run=RUN, backup_dir=p.backup)


CLI = {"reduce": ["reduce", "{url}", "--policy", "archive", "--quiet-period", "0", "--verify", "python", "--yes"]}


# --- the clean runs: every declared step reached, and what each verb leaves -------------------
_clean = {}


def clean_run(store, verb, place_of):
    """Run ``verb`` without a failure on ``store`` (once per module): the steps it reached, the
    original files, the files it started from and those it left."""
    if (store, verb) not in _clean:
        p = place_of(store, verb)
        original = p.user()
        start = setup(p, verb)
        reached = []
        for step in faults.steps(verb):
            faults.arm(step, lambda step=step: reached.append(step))
        act(p, verb)
        faults.disarm_all()
        _clean[(store, verb)] = (sorted(set(reached)), original, start, p.user())
        _clean_vault[(store, verb)] = vault_state(p)
    return _clean[(store, verb)]


#: what the vault keeps of each retirement once the clean run ended (``vault_state``)
_clean_vault = {}


def copies_left(p, op_id):
    """The copies of retirement ``op_id``'s files still in the vault: a disk's ``retired/<op>``
    files, a bucket's ``blobs/<op>/files/<n>`` objects, every blob of a vault of blobs (the
    matrix adds no other there)."""
    if p.store == "posix":
        roots = [r for r in (p.backup, os.path.join(p.url, STATE)) if r]
        return sorted(os.path.join(d, n) for r in roots for d, _dirs, files in os.walk(r) for n in files
                      if f"{os.sep}retired{os.sep}{op_id}{os.sep}" in os.path.join(d, n))
    if p.store == "s3blobs":
        return sorted(r.sha for r in BlobStore(PosixStore(p.backup)).refs()) if os.path.isdir(p.backup) else []
    return sorted(k for k in p.bucket.hashes(p.prefix) if k.startswith(f"{STATE}/blobs/{op_id}/"))


def vault_state(p):
    """Each retirement as the vault keeps it: whether its manifest says its backup is gone (purged,
    or released by its restore), the bytes its row counts as kept, and whether copies are left."""
    rows = api.summarize_operations(api.operations(p.url, backup_dir=p.backup))
    return sorted((bool(o["backup_purged"]), o["kept_bytes"], bool(copies_left(p, o["op_id"])))
                  for o in rows if o["kind"] == "retire")


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("store", STORES)
def test_every_declared_step_is_reached(store, verb, place_of):
    """The table says which engine hits which step: a clean run on the store hits exactly those."""
    reached, original, start, done = clean_run(store, verb, place_of)
    assert reached == sorted(steps_of(store, verb)), (store, verb)
    # the verb did something (a purge frees the vault and never touches the logdir)
    assert (done == start) if verb == "purge" else (done != start)


# --- the matrix ------------------------------------------------------------------------------
def _unfinished(p):
    return api.status(p.url, backup_dir=p.backup)["unfinished_operations"]


def settled(p, verb, original, start, done):
    """The logdir is exactly as the operation found it or exactly as the clean operation leaves
    it, nothing is unfinished, and from there every original comes back byte for byte."""
    now = p.user()
    ops = api.operations(p.url, backup_dir=p.backup)
    assert not _unfinished(p)
    if verb == "purge":
        # the logdir is never touched; an operation whose purge was not finished (the reduction,
        # the retired run) still restores, its run byte for byte
        assert now == start
        back = set()
        for m in ops:
            if not m.get("backup_purged") and not m.get("restored_by"):
                outs = api.restore(p.url, op=m["op_id"], backup_dir=p.backup)
                assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
                back.add(m["run"])
        expect = {k: v for k, v in start.items() if k.split("/")[0] not in back}
        expect.update({k: v for k, v in original.items() if k.split("/")[0] in back})
        assert p.user() == expect
        assert not _unfinished(p)
        return
    if verb in ("reduce", "retire") and now == done:
        # reduced (or retired) and verified: its manifest says so, and a restore gives it all back
        assert [m["outcome"] for m in ops if m.get("run") == RUN and not m.get("restored_by")] == ["verified"]
    # nothing lost, whatever the state: a restore from here gives back every original
    if p.user() != original:
        outs = api.restore(p.url, run=RUN if verb in ("retire", "unretire") else None, backup_dir=p.backup)
        assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert p.user() == original
    assert not _unfinished(p)
    if verb == "unretire":
        # the vault keeps what the clean restore left (every store releases the copies of what
        # went back, #26): a release stopped half-way is finished by the next start
        assert vault_state(p) == _clean_vault[(p.store, verb)], p.store
    # never a mix: checked last, so a mix is reported after the round trip above passed
    assert now in (start, done), sorted(set(now.items()) ^ set(start.items()))[:6]


def test_the_bucket_sample_covers_every_store_verb_and_kind():
    """``SAMPLED``'s rule: every object store runs every verb with both kinds of failure, and every
    (verb, step, kind) of the bucket engine runs on at least one of them."""
    for v in VERBS:
        for how in HOWS:
            for s in SAMPLED:
                assert any(c[:2] == (s, v) and c[3] == how for c in MATRIX), (s, v, how)
            for step in steps_of("s3", v):
                assert any(c[0] in SAMPLED and c[1:] == (v, step, how) for c in MATRIX), (v, step, how)
    assert all(len([c for c in MATRIX if c[0] == s]) == 2 * len(CASES_OF[s]) for s in STORES if s not in SAMPLED)


CASES_OF = {s: [c for c in CASES if c[0] == s] for s in STORES}


@pytest.mark.parametrize("store,verb,step,how", MATRIX)
def test_failure_at_each_step_is_settled(store, verb, step, how, place_of):
    """An injected failure (rolled back in-process, a purge's finished by the next start) or an
    injected crash (the process stopped there: nothing rolled back) at ``step``, then the next
    start: settled the same way on every store."""
    _reached, original, start, done = clean_run(store, verb, place_of)
    p = place_of(store, verb)
    assert setup(p, verb) == start
    fired = []
    injected = faults.InjectedFault if how == "failure" else faults.InjectedCrash

    def fail():
        faults.disarm_all()  # once: recovery below passes the same step again
        fired.append(step)
        raise injected(f"injected {how} at {step}")

    faults.arm(step, fail)
    try:
        act(p, verb)
    except injected:
        pass  # a crash stops the process there on every store (a failure: a purge's past its intent)
    assert fired == [step]
    api.recover_logdir(p.url, p.backup)
    settled(p, verb, original, start, done)


#: a disk purges its retired runs in a transaction of their own, after the reductions': these
#: failpoints fail at their last hit there, inside the retired run's purge
RETIRED_PURGE_STEPS = ("purge.intent", "purge.blob")


@pytest.mark.parametrize("step", RETIRED_PURGE_STEPS)
def test_failure_in_a_disks_retired_purge_is_settled(step, place_of):
    """An injected failure at ``step`` inside the disk's purge of its retired run (the reduction's
    backups purged already), then the next start: the retired run's purge is finished, and
    nothing else of the logdir changed."""
    _reached, original, start, done = clean_run("posix", "purge", place_of)
    p = place_of("posix", "purge")
    assert setup(p, "purge") == start
    fired = []

    def fail():
        if not any(m["kind"] == "reduce" and m.get("backup_purged")
                   for m in api.operations(p.url, backup_dir=p.backup)):
            return  # the reduction's purge: its transaction comes first
        faults.disarm_all()
        fired.append(step)
        raise faults.InjectedFault(f"injected failure at {step} in the retired run's purge")

    faults.arm(step, fail)
    with pytest.raises(faults.InjectedFault):
        act(p, "purge")
    assert fired == [step]
    problems = api.status(p.url, backup_dir=p.backup)["problems"]
    assert [x["run"] for x in problems if x["code"] == "unfinished_operation"] == [RETIRED], problems
    api.recover_logdir(p.url, p.backup)
    ops = api.operations(p.url, backup_dir=p.backup)
    assert sorted((m["kind"], bool(m.get("backup_purged"))) for m in ops) == [("reduce", True), ("retire", True)]
    assert not os.listdir(Path(p.url) / STATE / "retired")  # the retired run's folder is gone
    settled(p, "purge", original, start, done)


@pytest.mark.parametrize("store,step", KILLED)
def test_sigkill_of_the_cli_is_settled(store, step, place_of):
    """A real SIGKILL of ``tb-footprint reduce`` at the step, then ``recover`` in another process."""
    _reached, original, start, done = clean_run(store, "reduce", place_of)
    p = place_of(store, "reduce")
    env = dict(os.environ, TB_FOOTPRINT_FAILPOINTS=f"{step}=kill",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [a.format(url=p.url) for a in CLI["reduce"]] + (["--backup-dir", p.backup] if p.backup else [])
    r = subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli"] + cmd, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == -signal.SIGKILL, r.stdout[-2000:] + r.stderr[-2000:]
    assert _unfinished(p)
    api.recover_logdir(p.url, p.backup)
    # before the commit record the run is put back; inside the swap the next start finishes it
    assert p.user() == (done if step == "reduce.mid_swap" else start)
    settled(p, "reduce", original, start, done)


#: a real SIGKILL of ``tb-footprint restore`` after its first put-back: the lock of a dead process
#: and the journal stay, and the next start (another process) finishes it — a retired run's on a
#: disk too (#26: its recovery is the one ``Unretire`` sequence, as a bucket's); and a bucket's
#: right after the retirement is marked restored, its copies' release begun (its purge journal
#: written) and none deleted: the next start finishes the release
KILLED_RESTORES = [("s3", "restore", "restore.file"), ("gs", "unretire", "unretire.mid_move"),
                   ("posix", "unretire", "unretire.mid_move"), ("az", "unretire", "unretire.manifest")]
CLI_RESTORE = {"restore": ["restore", "{url}", "--all", "--yes"], "unretire": ["restore", "{url}", RUN, "--yes"]}


@pytest.mark.parametrize("store,verb,step", KILLED_RESTORES)
def test_sigkill_of_a_restore_is_finished_at_the_next_start(store, verb, step, place_of):
    _reached, original, start, done = clean_run(store, verb, place_of)
    p = place_of(store, verb)
    assert setup(p, verb) == start
    env = dict(os.environ, TB_FOOTPRINT_FAILPOINTS=f"{step}=kill",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [a.format(url=p.url) for a in CLI_RESTORE[verb]]
    r = subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli"] + cmd, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == -signal.SIGKILL, r.stdout[-2000:] + r.stderr[-2000:]
    assert _unfinished(p)
    marked = step == "unretire.manifest"
    assert (p.user() == done) if marked else (p.user() not in (start, done))  # every file back, or half
    outs = api.recover_logdir(p.url, p.backup)
    # marked: the restore's journal closed and the release's purge finished
    assert [o.action for o in outs] == ["completed"] * (2 if marked else 1), [(o.action, o.detail) for o in outs]
    assert p.user() == done
    settled(p, verb, original, start, done)


def test_vocabulary_refuses_undeclared_names(monkeypatch):
    """A misspelt failpoint fails at once: in ``hit``, in ``arm`` and in the environment."""
    with pytest.raises(faults.UnknownFailpoint, match="reduce.swapp"):
        faults.hit("reduce.swapp")
    with pytest.raises(faults.UnknownFailpoint, match="after_backup"):
        faults.arm("after_backup")
    monkeypatch.setenv("TB_FOOTPRINT_FAILPOINTS", "reduce.swap=kill,retire.mid_copy=raise")
    with pytest.raises(faults.UnknownFailpoint, match="TB_FOOTPRINT_FAILPOINTS.*retire.mid_copy"):
        faults.hit("reduce.swap")
    monkeypatch.setenv("TB_FOOTPRINT_FAILPOINTS", "reduce.swap=kil")
    with pytest.raises(faults.UnknownFailpoint, match="unknown action 'kil'"):
        faults.check_env()
    monkeypatch.setenv("TB_FOOTPRINT_FAILPOINTS", "reduce.swap=raise")
    faults.hit("reduce.journal")  # declared, not armed: nothing
    with pytest.raises(faults.InjectedFault, match="reduce.swap"):
        faults.hit("reduce.swap")


def test_vocabulary_is_one_table():
    """Every name is ``<verb>.<step>`` (or a declared vault.py name), and the table lists the
    bucket engine and the local engine under the same names where they take the same step."""
    legacy = {"restore_copied", "compact_written", "compact_verified", "compact_renamed", "compact_before_unlink"}
    for s in faults.STEPS:
        assert s.name in legacy or s.name.count(".") == 1, s.name
        assert s.engines and set(s.engines) <= {faults.LOCAL, faults.BUCKET, faults.BLOBS}
    both = {s.name for s in faults.STEPS if set(s.engines) == {faults.LOCAL, faults.BUCKET}}
    assert {"reduce.journal", "reduce.backup", "reduce.stage", "reduce.verify", "reduce.swap_record",
            "reduce.mid_swap", "reduce.swap", "restore.file", "purge.intent", "purge.blob", "retire.journal",
            "retire.mid_move", "retire.move", "retire.delete", "retire.manifest"} <= both
    assert {"offload.note", "offload.uploaded", "offload.recorded", "offload.unlinked"} <= set(faults.DECLARED)
