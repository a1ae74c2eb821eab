"""Safety findings of the engine/storage review, each pinned by a test that failed before its fix.

1. A hard link to a live journal (a user's ``cp -al`` / rsnapshot run over the logdir) no longer
   moves it aside mid-operation; a journal is never started again half way; recovery never
   deletes a journal that holds records but no begin record.
3. Temporary files the engine makes inside run folders are never opened through a planted symlink.
6. A restore refuses a run a live process still writes to.
7. A rollback never deletes a blob it kept in the vault for displaced content.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, copy_real, user_files
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.paths import state_dir
from test_late_records import append_by_path, image_run


pytestmark = pytest.mark.usefixtures("disarm_faults")


def _journals(logdir: Path):
    d = Path(state_dir(str(logdir))) / "journal"
    return sorted(d.iterdir()) if d.is_dir() else []


# ---------------------------------------------------------------------------------------------
# 1. hard links to live journals
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("step", ["reduce.backup", "reduce.stage", "reduce.verify"])
def test_a_hard_linked_journal_mid_reduce_is_kept_whole(tmp_path, step):
    """A backup tool hard-links the whole logdir (state folder included) while a reduce is between
    its backup and commit records: the reduce goes on writing the same journal (nothing set aside,
    no second journal), commits with a manifest, and a restore gives every byte back."""
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    before = user_files(logdir)
    snap = tmp_path / "snapshot"
    linked = []

    def cp_al():
        (j,) = _journals(logdir)
        snap.mkdir(exist_ok=True)
        os.link(j, snap / j.name)  # what `cp -al logdir snapshot` does to each file
        linked.append(j)

    faults.arm(step, cp_al)
    rep = api.reduce_logdir(str(logdir), policy="keep-latest", dry_run=False, verify_backends=("python",))
    (o,) = rep.outcomes
    assert linked, f"failpoint {step} was never reached"
    assert o.status == "verified", o.to_dict()
    state = Path(state_dir(str(logdir)))
    assert not [p for p in state.rglob("*") if ".refused-" in p.name], "a state file was set aside"
    assert _journals(logdir) == []
    # the snapshot's link holds the whole journal, begin record first, up to the commit
    recs = [json.loads(line) for line in (snap / linked[0].name).read_text().splitlines()]
    assert recs[0]["type"] == "begin" and recs[-1]["type"] == "commit"
    m = api.operation(str(logdir), o.op_id)
    assert m["outcome"] == "verified"
    assert api.recover_logdir(str(logdir)) == []
    back = api.restore(str(logdir), op=o.op_id)
    assert [b.status for b in back] == ["restored"], [b.to_dict() for b in back]
    assert user_files(logdir) == before


def test_a_hard_linked_journal_then_a_failure_rolls_back_cleanly(tmp_path):
    """Hard-linked between backup and stage, then a step fails: the rollback reads the whole
    journal (its begin record included) and puts every byte back."""
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    before = user_files(logdir)

    def cp_al():
        (j,) = _journals(logdir)
        os.link(j, tmp_path / "linked.jsonl")

    faults.arm("reduce.backup", cp_al)
    faults.arm("reduce.verify", "raise")
    rep = api.reduce_logdir(str(logdir), policy="keep-latest", dry_run=False, verify_backends=("python",))
    (o,) = rep.outcomes
    assert o.status == "rolled_back", o.to_dict()
    assert user_files(logdir) == before
    assert api.operation(str(logdir), o.op_id)["outcome"] == "rolled_back"
    assert _journals(logdir) == []


_KILL_SCRIPT = """
import sys
from tb_footprint_plugin import api
api.reduce_logdir(sys.argv[1], policy="keep-latest", dry_run=False, verify_backends=("python",))
"""


def test_killed_with_a_hard_linked_journal_recovery_settles_it(tmp_path):
    """SIGKILL between backup and stage; the journal is then hard-linked by a backup tool; the
    next start's recovery rolls the run back byte for byte and the next reduce works."""
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    before = user_files(logdir)
    env = dict(os.environ, TB_FOOTPRINT_FAILPOINTS="reduce.stage=kill",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _KILL_SCRIPT, str(logdir)], env=env, timeout=300)
    assert p.returncode == -9
    (j,) = _journals(logdir)
    os.link(j, tmp_path / "linked.jsonl")
    rec = api.recover_logdir(str(logdir))
    assert [r.action for r in rec] == ["rolled_back"], rec
    assert user_files(logdir) == before and _journals(logdir) == []
    rep = api.reduce_logdir(str(logdir), policy="keep-latest", dry_run=False, verify_backends=("python",))
    assert rep.ok, [o.to_dict() for o in rep.outcomes]


def test_a_journal_replaced_mid_operation_is_never_started_again(tmp_path):
    """The journal's file replaced by another one (same name, other inode) mid-operation: no
    record goes into the new file; the reduce stops and rolls back; nothing is lost."""
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    before = user_files(logdir)
    kept = tmp_path / "kept.jsonl"

    def replace():
        (j,) = _journals(logdir)
        os.rename(j, kept)
        shutil.copy2(kept, j)  # same bytes, another file

    faults.arm("reduce.backup", replace)
    rep = api.reduce_logdir(str(logdir), policy="keep-latest", dry_run=False, verify_backends=("python",))
    (o,) = rep.outcomes
    assert o.status != "verified", o.to_dict()
    # the replacement got no record of this operation beyond what was copied into it
    assert user_files(logdir) == before


def test_recovery_keeps_a_journal_without_begin_record(tmp_path):
    """A journal holding records but no begin record (an older version split one in two) is
    refused and named, never deleted: something happened and nothing says which run."""
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    rep = api.reduce_logdir(str(logdir), policy="keep-latest", dry_run=False, verify_backends=("python",))
    assert rep.ok
    jdir = Path(state_dir(str(logdir))) / "journal"
    jdir.mkdir(exist_ok=True)
    j = jdir / "20260101T000000-abcdef.jsonl"
    j.write_text(json.dumps({"type": "staged", "tmp": "x", "final": "y", "t": 1.0}) + "\n")
    rec = api.recover_logdir(str(logdir))
    assert [(r.action, r.code) for r in rec] == [("refused", "damaged_state_file")], rec
    assert "no begin record" in rec[0].detail and str(j) in rec[0].detail
    assert j.is_file()
    empty = jdir / "20260101T000001-abcdef.jsonl"
    empty.write_text("")  # an older version crashed before its first record: nothing happened
    api.recover_logdir(str(logdir))
    assert not empty.exists() and j.is_file()


def test_state_files_of_ours_with_several_links_are_used_not_set_aside(tmp_path):
    """history.jsonl and a run lock hard-linked by a backup tool: the next reduce uses them as
    they are (no ``.refused-`` entries, nothing reported as untrusted)."""
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    rep = api.reduce_logdir(str(logdir), policy="lossless", dry_run=False, verify_backends=("python",))
    assert rep.ok
    state = Path(state_dir(str(logdir)))
    snap = tmp_path / "snap"
    shutil.copytree(state, snap, copy_function=os.link)  # cp -al
    api.restore(str(logdir), op=rep.outcomes[0].op_id)
    rep2 = api.reduce_logdir(str(logdir), policy="lossless", dry_run=False, verify_backends=("python",))
    assert rep2.ok, [o.to_dict() for o in rep2.outcomes]
    assert not [p for p in state.rglob("*") if ".refused-" in p.name]
    hist = [json.loads(x) for x in (state / "history.jsonl").read_text().splitlines()]
    assert len(hist) >= 2


# ---------------------------------------------------------------------------------------------
# 3. temp files inside run folders are never opened through a planted symlink
# ---------------------------------------------------------------------------------------------
def test_planted_symlinks_at_restore_temp_names_are_never_followed(tmp_path):
    """A stranger who can write into the run folder plants symlinks at the (guessable) temp
    names a restore uses — the late-records file and the restored copy — pointing at a file
    outside the logdir. The restore completes, the link targets are untouched, the links are
    set aside (kept, never followed)."""
    import hashlib

    logdir = tmp_path / "logdir"
    run = logdir / "run"
    path = image_run(run)
    original = path.read_bytes()
    sha12 = hashlib.sha256(original).hexdigest()[:12]
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    append_by_path(path, 1000, 3)
    victims = []
    for name in (f".footprint-restore-late-{os.getpid()}-{sha12}", f".footprint-restore-{os.getpid()}-{sha12}"):
        v = tmp_path / f"victim-{len(victims)}"
        v.write_bytes(b"must survive")
        os.symlink(v, run / name)
        victims.append(v)
    (o,) = api.restore(str(logdir))
    assert o.status == "restored", o.to_dict()
    assert path.read_bytes() == original
    for v in victims:
        assert v.read_bytes() == b"must survive"
    assert (run / (path.name + ".salvaged-001")).is_file()
    # a restore's temp names carry its journaled random token now (review J7 S3): a link at the
    # old guessable names is not ours, is never followed, and stays where it is
    assert not [p for p in run.iterdir() if ".refused-" in p.name]
    assert (run / f".footprint-restore-{os.getpid()}-{sha12}").is_symlink()
    assert (run / f".footprint-restore-late-{os.getpid()}-{sha12}").is_symlink()


def test_create_new_sets_aside_a_planted_link_and_replaces_only_our_leftovers(tmp_path):
    from tb_footprint_plugin.storage.files import copy_file

    src = tmp_path / "src"
    src.write_bytes(b"new bytes")
    victim = tmp_path / "victim"
    victim.write_bytes(b"must survive")
    os.symlink(victim, tmp_path / "dst")
    copy_file(str(src), str(tmp_path / "dst"))
    assert victim.read_bytes() == b"must survive"
    assert (tmp_path / "dst").read_bytes() == b"new bytes" and not (tmp_path / "dst").is_symlink()
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("dst.refused-")]
    assert aside.is_symlink()
    copy_file(str(victim), str(tmp_path / "dst"))  # a leftover regular file of ours: replaced
    assert (tmp_path / "dst").read_bytes() == b"must survive"


def test_a_planted_symlink_at_a_stage_name_is_never_written_through(tmp_path):
    """The reduce's stage file (``.footprint-<op>-<n>.tmp``) made through a planted link would
    write a compressed trace wherever it points: created exclusively, a planted link makes the
    reduce roll back and its target stays as it was."""
    from tb_footprint_plugin.transforms.gzip_trace import gzip_file

    src = tmp_path / "t.pt.trace.json"
    src.write_text('{"traceEvents": []}')
    victim = tmp_path / "victim"
    victim.write_bytes(b"must survive")
    os.symlink(victim, tmp_path / ".footprint-x-0.tmp")
    with pytest.raises(FileExistsError):
        gzip_file(str(src), str(tmp_path / ".footprint-x-0.tmp"))
    assert victim.read_bytes() == b"must survive"


# ---------------------------------------------------------------------------------------------
# 7. a rollback never deletes a blob it kept for displaced content
# ---------------------------------------------------------------------------------------------
def test_a_rollback_keeps_the_blob_of_displaced_content_equal_to_another_original(tmp_path):
    """After the swap, a writer puts at one removed file's path the very bytes of another removed
    original; the reduce then fails and rolls back. That content is displaced into the vault as a
    blob with the other original's digest: the rollback's blob release must not delete it (nor may
    a purge later), since the manifest names it as kept."""
    from tb_footprint_plugin.engine.vault import Vault

    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    written = []

    def write_then_fail():
        (j,) = _journals(logdir)
        recs = [json.loads(x) for x in j.read_text().splitlines()]
        finals = {r["final"] for r in recs if r["type"] == "staged"}
        gone = [r for r in recs if r["type"] == "backup" and r["path"] not in finals
                and not (logdir / r["path"]).exists() and (logdir / r["path"]).parent.is_dir()]
        a, b = next((a, b) for a in gone for b in gone if a["sha256"] != b["sha256"])
        begin = recs[0]
        (logdir / a["path"]).write_bytes(Path(Vault(begin["vault"]).blob_path(b["sha256"])).read_bytes())
        written.append((a, b))
        raise RuntimeError("injected after the swap")

    faults.arm("reduce.swap", write_then_fail)
    rep = api.reduce_logdir(str(logdir), policy="keep-latest", dry_run=False, verify_backends=("python",))
    (o,) = rep.outcomes
    assert written, o.to_dict()
    assert o.status == "rolled_back", o.to_dict()
    a, b = written[0]
    m = api.operation(str(logdir), o.op_id)
    (d,) = [d for d in m["displaced"] if d["path"] == a["path"]]
    assert d["sha256"] == b["sha256"]
    vault = Vault(m["vault"])
    assert vault.check_blob(b["sha256"]), "the kept blob of displaced content was deleted"
    assert b["sha256"] in vault.referenced_blobs(exclude_ops=[o.op_id])
    api.purge(str(logdir), yes=True)
    assert vault.check_blob(b["sha256"])


# ---------------------------------------------------------------------------------------------
# 6. a restore refuses a run a live process writes to
# ---------------------------------------------------------------------------------------------
_HOLDING_WRITER = r"""
import sys, time
f = open(sys.argv[1], "ab")
print("open", flush=True)
time.sleep(120)
"""


def test_restore_refuses_while_a_writer_holds_a_file_of_the_run(tmp_path):
    """A resumed job holds the reduced event file open for append: the restore is skipped with
    ``open_for_writing`` naming the pid and changes nothing; once the writer is gone it restores."""
    logdir = tmp_path / "logdir"
    path = image_run(logdir / "run")
    original = path.read_bytes()
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    reduced = path.read_bytes()
    w = subprocess.Popen([sys.executable, "-c", _HOLDING_WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert w.stdout.readline().strip() == "open"
        (o,) = api.restore(str(logdir))
        assert o.status == "skipped" and o.code == "open_for_writing", o.to_dict()
        assert f"pid {w.pid}" in o.reason and path.name in o.reason
        assert path.read_bytes() == reduced
        assert _journals(logdir) == []
    finally:
        w.kill()
        w.wait()
    (o,) = api.restore(str(logdir))
    assert o.status == "restored", o.to_dict()
    assert path.read_bytes() == original


def test_a_rollback_never_displaces_a_file_a_live_process_writes(tmp_path):
    """After the swap, a process creates a removed file's path again and keeps it open for
    append; the reduce then fails. The rollback does not put the original over that file while
    it is written (its next records would go into an inode only the vault holds): the operation
    stays unfinished, and once the writer is gone recovery rolls back, keeping its bytes."""
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    before = user_files(logdir)
    holders = []

    def write_then_fail():
        (j,) = _journals(logdir)
        recs = [json.loads(x) for x in j.read_text().splitlines()]
        finals = {r["final"] for r in recs if r["type"] == "staged"}
        a = next(r for r in recs if r["type"] == "backup" and r["path"] not in finals
                 and not (logdir / r["path"]).exists() and (logdir / r["path"]).parent.is_dir())
        w = subprocess.Popen([sys.executable, "-c", _HOLDING_WRITER + "\n", str(logdir / a["path"])],
                             stdout=subprocess.PIPE, text=True)
        assert w.stdout.readline().strip() == "open"
        (logdir / a["path"]).write_bytes(b"written after the swap")
        holders.append((w, a))
        raise RuntimeError("injected after the swap")

    faults.arm("reduce.swap", write_then_fail)
    try:
        rep = api.reduce_logdir(str(logdir), policy="keep-latest", dry_run=False, verify_backends=("python",))
        (o,) = rep.outcomes
        w, a = holders[0]
        assert o.status == "failed" and o.code == "rollback_incomplete", o.to_dict()
        assert f"pid {w.pid}" in o.reason
        assert (logdir / a["path"]).read_bytes() == b"written after the swap"
        assert len(_journals(logdir)) == 1
    finally:
        for w, _ in holders:
            w.kill()
            w.wait()
    rec = api.recover_logdir(str(logdir))
    assert [r.action for r in rec] == ["rolled_back"], rec
    assert user_files(logdir) == before
    m = api.operation(str(logdir), o.op_id)
    (d,) = [d for d in m["displaced"] if d["path"] == a["path"]]
    from tb_footprint_plugin.engine.vault import Vault

    assert Path(Vault(m["vault"]).blob_path(d["sha256"])).read_bytes() == b"written after the swap"


def test_copy_new_never_follows_a_planted_link_and_checks_the_hash(tmp_path):
    """``copy_new`` (the restored copy, an unretired file copied across filesystems): a link at
    the temp name is set aside, mode and mtime are set on the copy itself, a wrong hash removes
    the copy."""
    import hashlib

    from tb_footprint_plugin.storage.files import CopyMismatch, copy_new

    src = tmp_path / "src"
    src.write_bytes(b"original bytes")
    sha = hashlib.sha256(b"original bytes").hexdigest()
    victim = tmp_path / "victim"
    victim.write_bytes(b"must survive")
    os.chmod(victim, 0o600)
    os.symlink(victim, tmp_path / "tmp")
    copy_new(str(src), str(tmp_path / "tmp"), sha, 0o640, mtime_ns=1_600_000_000_123_456_789)
    st = os.lstat(tmp_path / "tmp")
    assert (tmp_path / "tmp").read_bytes() == b"original bytes" and oct(st.st_mode & 0o777) == oct(0o640)
    assert st.st_mtime_ns == 1_600_000_000_123_456_789
    assert victim.read_bytes() == b"must survive" and os.stat(victim).st_mode & 0o777 == 0o600
    with pytest.raises(CopyMismatch):
        copy_new(str(src), str(tmp_path / "other"), "0" * 64)
    assert not (tmp_path / "other").exists()
