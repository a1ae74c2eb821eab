"""Damaged state files (issue #25 items 4, 5 and 7): every state file is untrusted input.

Non-UTF-8 bytes or garbage JSON in any state file (an oplog line, a manifest, a journal,
identity.json, vaults.json, history.jsonl, a lease, the scan cache, the ledger) never stop
``status``, ``recover``, ``verify``, ``history`` or ``restore --all``: the damaged file is named
(path, and line for a line-based file) with a code, and every intact backup is still listed and
restored byte for byte. A damaged identity.json hides no backup. A full disk (a real tmpfs)
names the file being written and the bytes it needed, and the run is rolled back.

Every verb runs the real ``tb-footprint`` entry point in a subprocess.
"""
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import copy_real, user_files
from helpers_cli import run_cli as cli
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import faults, oplog
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.paths import state_dir

OLD = time.time() - 3600


def two_runs(root: Path) -> Path:
    """A logdir with two runs, ``a`` and ``b``, of different bytes (each has a profile the
    archive policy removes), aged so neither is active."""
    src = copy_real("tf/keras_profiled", root / "src")
    logdir = root / "logdir"
    for run in ("a", "b"):
        shutil.copytree(src / "train", logdir / run, copy_function=shutil.copy2)
    xplane = next((logdir / "b").rglob("*.xplane.pb"))
    with open(xplane, "ab") as f:
        f.write(b"b's own bytes")
    for p in [logdir, *logdir.rglob("*")]:
        os.utime(p, (OLD, OLD), follow_symlinks=False)
    shutil.rmtree(src)
    return logdir


@pytest.fixture
def reduced(tmp_path):
    """(logdir, the user files before the reduction, {run: op_id}) after two verified reductions."""
    logdir = two_runs(tmp_path)
    before = user_files(logdir)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    assert rep.ok and len(rep.outcomes) == 2, [o.to_dict() for o in rep.outcomes]
    assert all(o.status == "verified" for o in rep.outcomes)
    assert user_files(logdir) != before
    return logdir, before, {o.run: o.op_id for o in rep.outcomes}


def state(logdir: Path) -> Path:
    return Path(state_dir(str(logdir)))


# --- the damage, one kind of state file each: (path damaged, line for a line-based file) -----
def unseal(logdir):
    """The batch's sealed pieces of the operation log as plain segments (same lines), so a test
    can damage a line's bytes."""
    from tb_footprint_plugin.storage import zst

    for p in sorted(Path(oplog.segments_dir(str(state(logdir)))).glob("*" + oplog.SEALED_SUFFIX)):
        with zst.open_decompressed(open(p, "rb")) as f:
            text = f.read()
        p.with_name(p.name.split(".")[0] + "-unsealed.jsonl").write_bytes(text)
        p.unlink()
        (Path(oplog.twins_dir(str(state(logdir)))) / p.name).unlink()  # its second copy too


def segment_of(logdir, op_id):
    """(the operation log's segment holding ``op_id``'s manifest, the 0-based index of its first line)."""
    unseal(logdir)
    for p in sorted(Path(oplog.segments_dir(str(state(logdir)))).glob("*.jsonl")):
        for n, line in enumerate(p.read_bytes().splitlines()):
            if line.startswith(b'{"op":"%s"' % op_id.encode()) and b'"type":"manifest"' in line:
                return p, n
    raise AssertionError(f"no segment holds {op_id}")


def damage_oplog_line(logdir, ops):
    p, _n = segment_of(logdir, ops["a"])
    n = len(p.read_bytes().splitlines())
    with open(p, "ab") as f:
        f.write(b'\xff\xfe{"type": "manifest", \x80 garbage\n')
    return p, n + 1


def damage_manifest(logdir, ops):
    """The manifest's record (its first copy: each state is written twice in a row) overwritten."""
    p, n = segment_of(logdir, ops["a"])
    lines = p.read_bytes().splitlines(keepends=True)
    lines[n] = b'{"op_id": "\xff\xfe' + b"\x00garbage" * 10 + b"\n"
    p.write_bytes(b"".join(lines))
    return p, n + 1


def damage_journal(logdir, ops):
    """An unfinished operation's journal (on a third run) whose second line is not UTF-8."""
    begin = api.operation(str(logdir), ops["a"])
    op = "20200101T000000-abcdef"
    rec = {"type": "begin", "kind": "reduce", "op_id": op, "run": "c", "logdir": begin["logdir"],
           "logdir_id": begin["logdir_id"], "vault": begin["vault"], "plan": {"run": "c", "actions": []}}
    p = state(logdir) / "journal" / f"{op}.jsonl"
    p.write_bytes(json.dumps(rec).encode() + b"\n\xff\xfe\xfd not a record\n")
    return p, 2


def damage_identity(logdir, ops):
    p = state(logdir) / "identity.json"
    p.write_bytes(b"\xff\xfe garbage {")
    return p, None


def damage_vaults_json(logdir, ops):
    p = state(logdir) / "vaults.json"
    p.write_bytes(b'["/nowhere", \xff\xfe')
    return p, None


def damage_history_line(logdir, ops):
    p = state(logdir) / "history.jsonl"
    n = len(p.read_bytes().splitlines())
    with open(p, "ab") as f:
        f.write(b"\xc3\x28 not json\n")
    return p, n + 1


def damage_lease(logdir, ops):
    p = state(logdir) / "locks" / "run-0000000000000000.lease"
    p.write_bytes(b"\xff{\"host\": ")
    return p, None


def damage_scan_cache(logdir, ops):
    api.scan(str(logdir))
    p = state(logdir) / "scan-cache.json"
    assert p.exists()
    p.write_bytes(b'{"version": \xff\xfe')
    return p, None


def damage_ledger(logdir, ops):
    p = state(logdir) / "ledger.json"
    p.write_bytes(b'{"version": \xff\xfe')
    return p, None


DAMAGE = {f.__name__[len("damage_"):]: f for f in (damage_oplog_line, damage_manifest, damage_journal,
                                                   damage_identity, damage_vaults_json, damage_history_line,
                                                   damage_lease, damage_scan_cache, damage_ledger)}
#: what status calls each damage
CODES = {"oplog_line": "damaged_line", "manifest": "damaged_line", "journal": "damaged_state_file",
         "identity": "identity_damaged", "vaults_json": "damaged_state_file", "history_line": "damaged_line",
         "lease": "damaged_state_file", "scan_cache": "damaged_state_file", "ledger": "bad_ledger"}


def _names(out: str, path: Path, line) -> bool:
    return str(path) in out and (line is None or f"line {line}" in out)


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_damaged_state_file_is_named_and_every_backup_stays_restorable(reduced, kind):
    logdir, before, ops = reduced
    path, line = DAMAGE[kind](logdir, ops)

    st = cli("status", logdir)
    assert st.returncode == 0, st.stderr
    assert _no_bare_decode_error(st.stdout + st.stderr, path)
    assert f"[{CODES[kind]}]" in st.stdout and _names(st.stdout, path, line), st.stdout
    # both kept backups are listed (a damaged manifest is rebuilt only by recover)
    listed = {o["op_id"] for o in api.status(str(logdir))["operations"]}
    assert listed >= ({ops["b"]} if kind == "manifest" else set(ops.values()))

    hist = cli("history", logdir)
    assert hist.returncode == 0, hist.stderr
    assert ops["a"] in hist.stdout and ops["b"] in hist.stdout
    if kind == "history_line":
        assert _names(hist.stderr, path, line), hist.stderr

    rec = cli("recover", logdir)
    # a damaged journal is refused and left as it is for the user: not settled, so exit 1
    assert rec.returncode == (1 if kind == "journal" else 0), rec.stdout + rec.stderr
    assert _no_bare_decode_error(rec.stdout + rec.stderr, path)
    # a manifest and identity.json are mended by recover (tests below); a batch's ledger is the
    # batch's: status names it, recover leaves it to the next run of the batch
    if kind not in ("manifest", "identity", "ledger"):
        assert _names(rec.stdout, path, line), rec.stdout

    ver = cli("verify", logdir, "--verify", "python")
    assert _no_bare_decode_error(ver.stdout + ver.stderr, path)
    assert ver.returncode == 0, ver.stdout + ver.stderr
    assert f"(op {ops['a']})" in ver.stdout and f"(op {ops['b']})" in ver.stdout

    res = cli("restore", logdir, "--all", "--yes")
    if kind == "vaults_json":  # the vaults it listed may hold more: restored what it could, exit 1 naming it
        assert res.returncode == 1 and "[restore_blocked]" in res.stdout and str(path) in res.stdout, res.stdout
    else:
        assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("✓") == 2 and res.stdout.count(": restored") == 2, res.stdout
    assert user_files(logdir) == before  # byte for byte


def _no_bare_decode_error(out: str, path: Path) -> bool:
    """A decoding error may be quoted, but only on a line that names the damaged file."""
    return all(str(path) in line for line in out.splitlines() if "codec can't decode" in line)


def test_oplog_damage_never_hides_a_backup_from_the_api(reduced):
    """What the tab calls: the same api functions, with the damaged line named by file and line."""
    logdir, before, ops = reduced
    path, line = damage_oplog_line(logdir, ops)
    found = api.unfinished(str(logdir))["problems"]
    assert [(p["code"], p["path"], p["line"]) for p in found] == [("damaged_line", str(path), line)]
    assert {o["op_id"] for o in api.restorable(str(logdir))} == set(ops.values())
    assert all(r["ok"] for r in api.verify(str(logdir), verify_backends=("python",)))
    outs = api.restore(str(logdir))
    assert sorted(o.status for o in outs) == ["restored", "restored"]
    assert user_files(logdir) == before


def test_a_damaged_sealed_piece_is_named_and_its_backups_kept(reduced):
    """A batch's sealed piece of the operation log whose bytes are damaged: status names it, what
    decoded before the damage is read, and no blob any of its operations named is purged."""
    logdir, _before, ops = reduced
    blobs = sorted(p for p in (state(logdir) / "blobs").rglob("*") if p.is_file())
    (piece,) = Path(oplog.segments_dir(str(state(logdir)))).glob("*" + oplog.SEALED_SUFFIX)
    for copy in (piece, Path(oplog.twins_dir(str(state(logdir)))) / piece.name):  # both copies
        raw = bytearray(copy.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        copy.write_bytes(bytes(raw))
    st = cli("status", logdir)
    assert st.returncode == 0 and "[damaged_line]" in st.stdout and str(piece) in st.stdout, st.stdout
    api.purge(str(logdir), older_than=0, yes=True)
    assert sorted(p for p in (state(logdir) / "blobs").rglob("*") if p.is_file()) == blobs


def test_a_damaged_purge_record_never_finishes_a_purge(reduced):
    """A purge intent followed by a damaged line: whether it ended is unknown, so the blobs it
    named are kept (never deleted on a guess)."""
    logdir, _before, ops = reduced
    m = api.operation(str(logdir), ops["a"])
    blobs = sorted((state(logdir) / "blobs").rglob("*"))
    sha = m["files"][0]["sha256"]
    oplog.append(str(state(logdir)), ops["a"], {"type": "purge", "blobs": [sha], "run": m["run"]})
    with open(oplog.log_path(str(state(logdir)), ops["a"]), "ab") as f:
        f.write(b"\xff\xfe\n")
    assert not [x for x in api.recover_logdir(str(logdir)) if x.code == "purge_finished"]
    assert sorted((state(logdir) / "blobs").rglob("*")) == blobs


def test_identity_garbage_recover_reports_and_rebuilds_it(reduced):
    logdir, before, ops = reduced
    ident = state(logdir) / "identity.json"
    old_id = json.loads(ident.read_text())["id"]
    damage_identity(logdir, ops)
    rec = cli("recover", logdir)
    assert rec.returncode == 0, rec.stdout + rec.stderr
    assert "[identity_rebuilt]" in rec.stdout and str(ident) in rec.stdout, rec.stdout
    aside = [p for p in state(logdir).iterdir() if p.name.startswith("identity.json.damaged-")]
    assert len(aside) == 1 and aside[0].read_bytes() == b"\xff\xfe garbage {"  # kept, never deleted
    assert json.loads(ident.read_text())["id"] == old_id  # taken back from the own manifests
    assert json.loads(ident.read_text())["ino"] == os.stat(logdir).st_ino
    st = cli("status", logdir)
    assert "identity_damaged" not in st.stdout and "2 with kept backups" in st.stdout, st.stdout
    assert cli("restore", logdir, "--all", "--yes").returncode == 0
    assert user_files(logdir) == before


def test_identity_garbage_restore_all_restores_both(reduced):
    logdir, before, ops = reduced
    damage_identity(logdir, ops)
    assert {o["op_id"] for o in api.status(str(logdir))["operations"]} == set(ops.values())
    res = cli("restore", logdir, "--all", "--yes")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count(": restored") == 2, res.stdout
    assert user_files(logdir) == before


def test_identity_garbage_with_manifests_of_two_ids_restore_all_names_the_damage(reduced):
    """Manifests of this logdir carrying two ids: which one is its own cannot be told, so
    identity.json is not rebuilt and `restore --all` exits non-zero naming the damage."""
    logdir, _before, ops = reduced
    vault = Vault(str(state(logdir)))
    vault.write_manifest(dict(vault.read_manifest(ops["b"]), logdir_id="f" * 32))
    ident = state(logdir) / "identity.json"
    damage_identity(logdir, ops)
    rec = cli("recover", logdir)
    assert rec.returncode == 1 and "[identity_damaged]" in rec.stdout and str(ident) in rec.stdout, rec.stdout
    assert ident.read_bytes() == b"\xff\xfe garbage {"  # left exactly as it is
    res = cli("restore", logdir, "--all", "--yes")
    assert res.returncode == 1, res.stdout + res.stderr
    assert str(ident) in res.stdout + res.stderr


def test_identity_planted_from_another_logdir_is_still_refused(reduced, tmp_path):
    """The manifests bind themselves only to the logdir they name: a whole state folder copied
    from another logdir, its identity.json damaged, still gives none of its backups."""
    logdir, _before, _ops = reduced
    other = tmp_path / "other"
    other.mkdir()
    shutil.copytree(state(logdir), other / ".tb-footprint")
    (other / ".tb-footprint" / "identity.json").write_bytes(b"\xff garbage")
    assert api.status(str(other))["operations"] == []
    assert api.restore(str(other)) == []


# --- a full disk: a real tmpfs, filled to a chosen number of free bytes ------------------------
@pytest.fixture
def small_fs(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], capture_output=True, text=True)
    assert p.returncode == 0, f"cannot mount a tmpfs (tests run as root): {p.stderr}"
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(mnt: Path, leave: int) -> Path:
    """Fill ``mnt`` up, then give back ``leave`` bytes."""
    filler = mnt / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    n = 0
    try:
        for size in (1 << 20, 4096):
            try:
                while True:
                    n += os.write(fd, b"\0" * size)
            except OSError:
                pass
        os.ftruncate(fd, max(0, n - leave))
    finally:
        os.close(fd)
    return filler


@pytest.mark.parametrize("leave,where", [(0, "locks"), (4096, "journal"), (12288, "tmp")])
def test_full_disk_names_the_file_and_rolls_back(small_fs, leave, where):
    logdir = two_runs(small_fs)
    rep = api.reduce_logdir(str(logdir), policy="archive", runs=["a"], dry_run=False, verify_backends=("python",))
    assert rep.ok
    before = user_files(logdir)
    filler = fill(small_fs, leave)
    rep = api.reduce_logdir(str(logdir), policy="archive", runs=["b"], dry_run=False, verify_backends=("python",))
    o = rep.outcomes[0]
    assert o.status in ("failed", "rolled_back") and o.code == "no_space", o.to_dict()
    assert str(state(logdir) / where) in o.reason and "needed" in o.reason, o.reason
    assert "[Errno 28]" not in o.reason.split(";")[0]
    assert user_files(logdir) == before
    assert not os.listdir(state(logdir) / "journal"), "an operation was left unsettled"
    assert not [n for n in user_files(logdir) if ".footprint-" in n]
    filler.unlink()
    rep = api.reduce_logdir(str(logdir), policy="archive", runs=["b"], dry_run=False, verify_backends=("python",))
    assert rep.ok and rep.outcomes[0].status == "verified"


def test_full_disk_while_staging_names_the_temporary_file(small_fs):
    """A disk that fills while a compressed copy is written (another process took the space
    after the free-space check): the staged file is named, the run rolled back, nothing lost."""
    logdir = copy_real("torch/profiled", small_fs / "logdir")
    before = user_files(logdir)
    fillers = []
    faults.arm("reduce.stage_record", lambda: fillers.append(fill(small_fs, 0)))
    try:
        rep = api.reduce_logdir(str(logdir), policy="lossless", dry_run=False, verify_backends=("python",))
    finally:
        faults.disarm_all()
    o = rep.outcomes[0]
    assert fillers, "the stage was never reached"
    assert o.status == "rolled_back" and o.code == "no_space", o.to_dict()
    assert ".footprint-" in o.reason and ".tmp" in o.reason and "needed" in o.reason, o.reason
    assert user_files(logdir) == before
    assert not os.listdir(state(logdir) / "journal")


def test_full_disk_cli_reduce_names_the_file(small_fs):
    logdir = two_runs(small_fs)
    assert cli("reduce", logdir, "--run", "a", "--verify", "python", "--yes").returncode == 0
    before = user_files(logdir)
    fill(small_fs, 4096)
    p = cli("reduce", logdir, "--run", "b", "--verify", "python", "--yes")
    assert p.returncode == 1, p.stdout + p.stderr
    out = p.stdout + p.stderr
    assert str(state(logdir) / "journal") in out and "needed" in out, out
    assert user_files(logdir) == before


# --- the tab: its restore job calls the same api over a damaged oplog -------------------------
from test_plugin_routes import app, file_shas, logdir, outside  # noqa: E402,F401  (the tab's fixtures)

def test_tab_restore_job_over_a_damaged_oplog(app, logdir):
    start = file_shas(logdir)
    r = app.post("/reduce", {"runs": ["big", "mid"]})
    assert r.status_code == 202
    job = app.wait_job(r.get_json()["job"]["id"])
    ops = {o["run"]: o["op_id"] for o in job["result"]["outcomes"] if o["status"] == "verified"}
    assert set(ops) == {"big", "mid"}, job
    for run in ("big", "mid"):
        p, _n = segment_of(logdir, ops[run])
        with open(p, "ab") as f:
            f.write(b"\xff\xfe\xfd garbage\n")
    for run in ("big", "mid"):
        r = app.post("/restore", {"run": run})
        assert r.status_code == 202, r.get_data(as_text=True)
        done = app.wait_job(r.get_json()["job"]["id"])
        assert done["result"]["ok"] is True, done
    assert file_shas(logdir) == start


def test_full_disk_never_leaves_a_torn_line_in_a_log(small_fs):
    """A full disk can take part of a line: it is cut back, so the next record starts a line of
    its own instead of being glued to a torn one (and lost as a damaged line)."""
    from tb_footprint_plugin.engine import oplog

    vault = small_fs / "vault"
    op = "20200101T000000-abcdef"
    oplog.append(str(vault), op, {"type": "manifest", "manifest": {"op_id": op}})
    before = Path(oplog.log_path(str(vault), op)).read_bytes()
    filler = fill(small_fs, 4096)
    with pytest.raises(OSError):
        oplog.append(str(vault), op, {"type": "note", "pad": "x" * (256 << 10)})
    assert Path(oplog.log_path(str(vault), op)).read_bytes() == before
    filler.unlink()
    oplog.append(str(vault), op, {"type": "purged", "freed": 0})
    log = oplog.read_log(str(vault), op)
    assert not log.damaged and [r["type"] for r in log.records] == ["manifest", "purged"]
