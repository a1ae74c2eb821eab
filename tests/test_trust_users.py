"""The vault and every state folder are used only when they are ours (issue #25, items 1 and 2).

Two real Unix users are created here (``useradd``; the suite runs as root in CI). Each one's
commands run in a subprocess with that user's uid and gid (``setpriv``), with only the
capability to *read and search* any folder (``CAP_DAC_READ_SEARCH``, ambient): so the test's
interpreter and the repository are reachable wherever CI put them, while every write, unlink
and rename is checked against that user's own permissions — what these tests are about.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import pathlib
import pwd
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OLD = 1_600_000_000  # far older than any quiet period

PRELUDE = r'''
import json, math, os, sys
from tb_footprint_plugin import api, synth

def write_run(run_dir, seed):
    with synth.EventWriter(run_dir) as w:
        for s in range(60):
            w.scalar("loss", s, math.exp(-s / 15.0) + 0.01 * seed)
    synth.write_profile_session(run_dir, synth.session_name_for(synth.DEFAULT_TIMESTAMP), n_events=1500,
                                with_caches=True, seed=seed)
    for dirpath, dirnames, filenames in os.walk(run_dir):
        for n in filenames + dirnames:
            os.utime(os.path.join(dirpath, n), (1_600_000_000, 1_600_000_000))

def main(cmd, logdir, run=None, backup_dir=None):
    if cmd == "make":
        write_run(os.path.join(logdir, run), seed=len(run))
        return {}
    if cmd in ("reduce", "reduce-others"):  # reduce-others: --include-others-runs (review R10 F8)
        rep = api.reduce_logdir(logdir, backup_dir, policy="archive", dry_run=False, runs=[run], quiet_period=0,
                                verify_backends=("python",), include_others_runs=cmd == "reduce-others")
        return {"outcomes": [o.to_dict() for o in rep.outcomes]}
    if cmd == "restore":
        return {"outcomes": [o.to_dict() for o in api.restore(logdir, run=run, backup_dir=backup_dir)]}
    if cmd == "scan":
        return {"runs": sorted(r.name for r in api.scan(logdir).runs)}
    if cmd == "operations":
        return {"ops": [(o.get("op_id"), o.get("run"), o.get("vault")) for o in api.operations(logdir, backup_dir=backup_dir)],
                "unfinished": api.unfinished(logdir, backup_dir)["unfinished_operations"]}
    if cmd == "status":
        st = api.status(logdir, backup_dir)
        return {"state_dir": st["state_dir"], "problems": st["problems"], "operations": st["operations"]}
    if cmd == "recover":
        return {"recovered": [(r.action, r.detail) for r in api.recover_logdir(logdir, backup_dir)]}
    raise SystemExit(f"unknown command {cmd}")

try:
    out = main(*json.loads(sys.argv[1]))
except Exception as e:
    out = {"error": str(e), "type": type(e).__name__, "code": str(getattr(e, "code", "") or "")}
print("\n" + json.dumps(out, default=str))
'''


class User:
    """A throw-away Unix user whose commands run as that user."""

    def __init__(self, tmp_path):
        assert os.geteuid() == 0, "these tests create Unix users: run them as root (CI does)"
        self.name = "fptu" + secrets.token_hex(4)
        subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", self.name],
                       check=True, capture_output=True)
        pw = pwd.getpwnam(self.name)
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        self.home = tmp_path / f"home-{self.name}"
        self.home.mkdir()
        os.chown(self.home, self.uid, self.gid)
        os.chmod(self.home, 0o711)  # the other user may look for things here, never write

    def _as(self, argv, **kw):
        cmd = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups",
               "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"] + argv
        env = {"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin", "HOME": str(self.home),
               "PYTHONPATH": REPO, "XDG_CACHE_HOME": str(self.home / ".cache")}
        return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(self.home), timeout=600, **kw)

    def sh(self, script: str) -> subprocess.CompletedProcess:
        """A shell script as this user (its failures are the point: not checked)."""
        return self._as(["sh", "-c", script])

    def tool(self, *args) -> dict:
        r = self._as([sys.executable, "-c", PRELUDE, json.dumps([str(a) if a is not None else None for a in args])])
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    def remove(self):
        subprocess.run(["userdel", self.name], capture_output=True)


def _traversable_base() -> str:
    """A temp folder every user can reach (pytest's own is 0700 root's; ``access()``, which the
    tool uses, ignores the capability these users run with), 0711."""
    for cand in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"):
        parts = os.path.abspath(cand).split(os.sep)
        ancestors = [os.sep + os.path.join(*parts[1:i]) if i > 1 else os.sep for i in range(1, len(parts) + 1)]
        if os.path.isdir(cand) and all(os.stat(a).st_mode & stat.S_IXOTH for a in ancestors):
            base = tempfile.mkdtemp(prefix="fp-trust-users-", dir=cand)
            os.chmod(base, 0o711)
            return base
    raise AssertionError("no temp folder that other users can traverse")


@pytest.fixture(scope="module")
def world():
    base = _traversable_base()
    yield pathlib.Path(base)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def users(world):
    alice, bob = User(world), User(world)
    yield alice, bob
    alice.remove()
    bob.remove()


@pytest.fixture
def tmp_path(world, request):
    """This test's own folder in ``world`` (reachable by both users)."""
    d = world / f"t{secrets.token_hex(4)}"
    d.mkdir()
    os.chmod(d, 0o711)
    return d


@pytest.fixture
def shared(tmp_path):
    """A world-writable, sticky logdir like ``/scratch/team/runs``."""
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o1777)
    return d


def snapshot(root) -> dict:
    """Every file under ``root``: sha256, mode and mtime (what a restore must give back)."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for n in files:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = (hashlib.sha256(f.read()).hexdigest(), stat.S_IMODE(st.st_mode),
                                                 st.st_mtime_ns)
    return out


def files_under(root) -> list:
    return sorted(os.path.join(d, n) for d, _dirs, files in os.walk(root) for n in files)


def blobs_of(vault) -> list:
    """The backups a vault holds: blob files, and the packs small ones go into (issue #27 item 2)."""
    return [p for p in files_under(os.path.join(vault, "blobs"))] + \
        [p for p in files_under(os.path.join(vault, "packs", "data"))]


def plant_vault(user: User, where: str) -> None:
    """``where`` made by ``user`` as a real folder with every blob shard pre-made, all 0777."""
    user.sh(f"mkdir -p '{where}/blobs' '{where}/ops' '{where}/tmp' && cd '{where}/blobs' && "
            "for a in 0 1 2 3 4 5 6 7 8 9 a b c d e f; do for b in 0 1 2 3 4 5 6 7 8 9 a b c d e f; do "
            "mkdir -p $a$b; done; done && chmod -R 0777 '" + where + "'")
    assert os.stat(where).st_uid == user.uid and os.path.isdir(os.path.join(where, "blobs", "ff"))


def reduced(result: dict) -> dict:
    assert "outcomes" in result, result
    (o,) = result["outcomes"]
    return o


# ---------------------------------------------------------------------------------------------
# (a) another user plants .tb-footprint in a shared logdir
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("plant", ["symlink", "directory"])
def test_a_planted_vault_never_gets_a_backup_and_restore_survives_its_planter(users, shared, tmp_path, plant):
    alice, bob = users
    alice.tool("make", shared, "alice-run")
    original = snapshot(shared / "alice-run")
    bob_space = tmp_path / "bob-space"
    bob_space.mkdir()
    os.chown(bob_space, bob.uid, bob.gid)
    if plant == "symlink":
        plant_vault(bob, f"{bob_space}/vault")
        assert bob.sh(f"ln -s '{bob_space}/vault' '{shared}/.tb-footprint'").returncode == 0
        planted = bob_space / "vault"
    else:
        plant_vault(bob, f"{shared}/.tb-footprint")
        planted = shared / ".tb-footprint"

    o = reduced(alice.tool("reduce", shared, "alice-run"))
    assert o["status"] == "verified", o
    assert files_under(planted) == [], "a backup was put where the other user can unlink it"
    mine = shared / f".tb-footprint-u{alice.uid}"
    st = os.lstat(mine)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == alice.uid and stat.S_IMODE(st.st_mode) == 0o700
    for sub in ("blobs", "ops", "journal", "locks"):
        sst = os.lstat(mine / sub)
        assert sst.st_uid == alice.uid and not sst.st_mode & 0o077, sub
    blobs = blobs_of(mine)
    assert blobs and all(os.lstat(os.path.dirname(b)).st_mode & 0o077 == 0 for b in blobs)
    assert snapshot(shared / "alice-run") != original  # reduced

    # the other user deletes everything they can, the per-user vault included
    bob.sh(f"rm -rf '{mine}' '{mine}/blobs' '{shared}/alice-run'; "
           f"find '{shared}' -mindepth 1 -depth -exec rm -rf {{}} + ; true")
    assert blobs_of(mine) == blobs

    back = alice.tool("restore", shared, "alice-run")
    assert [x["status"] for x in back["outcomes"]] == ["restored"], back
    assert snapshot(shared / "alice-run") == original
    # the scan shows no state folder as a run, nor the planted one
    assert alice.tool("scan", shared)["runs"] == ["alice-run"]


def test_both_names_planted_refuses_with_the_folder_its_owner_and_mode(users, shared):
    alice, bob = users
    alice.tool("make", shared, "alice-run")
    original = snapshot(shared / "alice-run")
    plant_vault(bob, f"{shared}/.tb-footprint")
    plant_vault(bob, f"{shared}/.tb-footprint-u{alice.uid}")

    r = alice.tool("reduce", shared, "alice-run")
    assert r.get("code") == "state_not_ours", r
    msg = r["error"]
    assert f".tb-footprint-u{alice.uid}" in msg and bob.name in msg and "mode 0777" in msg, msg
    assert "--backup-dir" in msg, msg
    assert snapshot(shared / "alice-run") == original
    assert files_under(shared / ".tb-footprint") == [] and files_under(shared / f".tb-footprint-u{alice.uid}") == []

    # a --backup-dir of hers does not help: journal and locks still need a state folder of hers
    vault = alice.home / "vault"
    r = alice.tool("reduce", shared, "alice-run", vault)
    assert r.get("code") == "state_not_ours", r
    assert files_under(shared / f".tb-footprint-u{alice.uid}") == []

    # what bob plants there is never taken for hers: not listed, not rebuilt, not restored from
    op = "20260101T000000-abcdef"
    manifest = {"op_id": op, "kind": "reduce", "run": "alice-run", "logdir": str(shared), "outcome": "verified",
                "files": []}
    mine = shared / f".tb-footprint-u{alice.uid}"
    bob.sh(f"mkdir -p '{mine}/oplog' && echo '{json.dumps({'type': 'manifest', 'manifest': manifest, 't': 1})}' "
           f"> '{mine}/oplog/{op}.jsonl' && chmod -R 0777 '{mine}'")
    planted = snapshot(mine)
    rec = alice.tool("recover", shared)
    assert all(action != "rebuilt" for action, _ in rec["recovered"]), rec
    st = alice.tool("status", shared)
    assert st["operations"] == [] and st["state_dir"] == str(mine), st
    (refusal,) = [p for p in st["problems"] if p["code"] == "state_not_ours"]
    assert refusal["file"] == str(mine) and bob.name in refusal["detail"], st
    assert "error" in alice.tool("restore", shared, "alice-run")
    assert snapshot(mine) == planted and snapshot(shared / "alice-run") == original


# ---------------------------------------------------------------------------------------------
# (b) two users, one sticky shared logdir, each with a private vault
# ---------------------------------------------------------------------------------------------
def test_two_users_reduce_and_restore_their_own_runs_each_in_a_private_vault(users, shared):
    alice, bob = users
    alice.tool("make", shared, "alice-run")
    bob.tool("make", shared, "bob-run")
    originals = {"alice-run": snapshot(shared / "alice-run"), "bob-run": snapshot(shared / "bob-run")}

    assert reduced(alice.tool("reduce", shared, "alice-run"))["status"] == "verified"
    assert reduced(bob.tool("reduce", shared, "bob-run"))["status"] == "verified"
    vaults = {alice: shared / ".tb-footprint", bob: shared / f".tb-footprint-u{bob.uid}"}
    kept = {}
    for user, vault in vaults.items():
        st = os.lstat(vault)
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == user.uid and stat.S_IMODE(st.st_mode) == 0o700
        kept[user] = blobs_of(vault)
        assert kept[user], vault
    assert not set(kept[alice]) & set(kept[bob])
    # both scans see the two runs and no state folder
    assert alice.tool("scan", shared)["runs"] == bob.tool("scan", shared)["runs"] == ["alice-run", "bob-run"]

    # neither can unlink the other's backups
    alice.sh(f"rm -rf '{vaults[bob]}' {' '.join(repr(str(p)) for p in kept[bob])}; true")
    bob.sh(f"rm -rf '{vaults[alice]}' {' '.join(repr(str(p)) for p in kept[alice])}; true")
    assert blobs_of(vaults[alice]) == kept[alice] and blobs_of(vaults[bob]) == kept[bob]

    for user, run in ((alice, "alice-run"), (bob, "bob-run")):
        back = user.tool("restore", shared, run)
        assert [x["status"] for x in back["outcomes"]] == ["restored"], back
        assert snapshot(shared / run) == originals[run]


# ---------------------------------------------------------------------------------------------
# (c) --backup-dir that is not a private folder of ours
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["other_writable", "group_writable", "symlink", "another_users"])
def test_a_backup_dir_not_private_is_refused_naming_path_owner_and_mode(users, shared, tmp_path, kind):
    alice, bob = users
    alice.tool("make", shared, "alice-run")
    original = snapshot(shared / "alice-run")
    target = tmp_path / f"vault-{kind}"
    if kind in ("other_writable", "group_writable"):
        target.mkdir()
        os.chown(target, alice.uid, alice.gid)
        os.chmod(target, 0o777 if kind == "other_writable" else 0o770)
        expect = [alice.name, "mode 0777" if kind == "other_writable" else "mode 0770", "writable by group or others"]
        given = target
    elif kind == "symlink":
        real = alice.home / "real-vault"
        alice.sh(f"mkdir -m 700 '{real}'")
        given = alice.home / "vault-link"
        assert alice.sh(f"ln -s '{real}' '{given}'").returncode == 0
        expect = ["symbolic link", str(real), alice.name, "mode 0700"]
    else:
        target.mkdir()
        os.chown(target, bob.uid, bob.gid)
        os.chmod(target, 0o755)
        expect = [bob.name, "mode 0755", "another user"]
        given = target
    r = alice.tool("reduce", shared, "alice-run", given)
    assert r.get("code") == "state_not_ours", r
    assert str(given) in r["error"] and all(e in r["error"] for e in expect), (r["error"], expect)
    assert "--backup-dir" in r["error"]
    assert snapshot(shared / "alice-run") == original
    assert files_under(os.path.realpath(given)) == []


def test_a_missing_backup_dir_is_made_private(users, shared):
    alice, _ = users
    alice.tool("make", shared, "alice-run")
    vault = alice.home / "new" / "vault"
    assert reduced(alice.tool("reduce", shared, "alice-run", vault))["status"] == "verified"
    for d in (alice.home / "new", vault, vault / "blobs", vault / "ops"):
        st = os.lstat(d)
        assert st.st_uid == alice.uid and stat.S_IMODE(st.st_mode) == 0o700, d
    assert blobs_of(vault)


# ---------------------------------------------------------------------------------------------
# (d) what the TensorBoard plugin calls follows the same rule
# ---------------------------------------------------------------------------------------------
def test_the_plugin_verbs_use_the_users_own_state_never_a_planted_one(users, shared):
    """The tab reduces with ``api.reduce_logdir``, lists with ``api.operations`` and
    ``api.unfinished``, and restores with ``api.restore``: a planted ``.tb-footprint`` with a
    journal and a manifest of bob's is neither replayed, nor listed, nor written into."""
    alice, bob = users
    alice.tool("make", shared, "alice-run")
    original = snapshot(shared / "alice-run")
    plant_vault(bob, f"{shared}/.tb-footprint")
    bob.sh(f"mkdir -p '{shared}/.tb-footprint/journal' && "
           f"echo '{{\"type\": \"begin\", \"op_id\": \"20260101T000000-bbbbbb\", \"run\": \"alice-run\"}}' "
           f"> '{shared}/.tb-footprint/journal/20260101T000000-bbbbbb.jsonl' && "
           f"echo '{{\"op_id\": \"20260101T000000-bbbbbb\", \"run\": \"alice-run\", \"files\": []}}' "
           f"> '{shared}/.tb-footprint/ops/20260101T000000-bbbbbb.json'; chmod -R 0777 '{shared}/.tb-footprint'")
    planted = snapshot(shared / ".tb-footprint")

    before = alice.tool("operations", shared)
    assert before == {"ops": [], "unfinished": []}, before
    assert reduced(alice.tool("reduce", shared, "alice-run"))["status"] == "verified"
    after = alice.tool("operations", shared)
    assert [(op, run) for op, run, _ in after["ops"]] == [(after["ops"][0][0], "alice-run")], after
    assert after["ops"][0][2] == str(shared / f".tb-footprint-u{alice.uid}")
    assert snapshot(shared / ".tb-footprint") == planted
    back = alice.tool("restore", shared, "alice-run")
    assert [x["status"] for x in back["outcomes"]] == ["restored"], back
    assert snapshot(shared / "alice-run") == original


# ---------------------------------------------------------------------------------------------
# item 2: state files and folders through symlinks (as the user running the tool)
# ---------------------------------------------------------------------------------------------
def _write_run(run_dir, seed):
    from tb_footprint_plugin import synth

    with synth.EventWriter(run_dir) as w:
        for s in range(60):
            w.scalar("loss", s, math.exp(-s / 15.0) + 0.01 * seed)
    synth.write_profile_session(run_dir, synth.session_name_for(synth.DEFAULT_TIMESTAMP), n_events=1500,
                                with_caches=True, seed=seed)
    for dirpath, dirnames, filenames in os.walk(run_dir):
        for n in filenames + dirnames:
            os.utime(os.path.join(dirpath, n), (OLD, OLD))


@pytest.fixture
def reduced_once(tmp_path):
    """``logs/`` with one run reduced (so its state folder and vault exist) and one to reduce,
    and ``outside/`` beside it: where planted links point."""
    from tb_footprint_plugin import api

    logs, outside = tmp_path / "logs", tmp_path / "outside"
    _write_run(str(logs / "first"), 1)
    _write_run(str(logs / "second"), 2)
    outside.mkdir()
    (outside / "victim.txt").write_text("must survive")
    (outside / "victimdir").mkdir()
    (outside / "victimdir" / "keep.txt").write_text("must survive too")
    rep = api.reduce_logdir(str(logs), None, policy="archive", dry_run=False, runs=["first"], quiet_period=0,
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
    return logs, outside


def _tree(root) -> dict:
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for n in files + dirs:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns)
    return out


@pytest.mark.parametrize("where", ["ledger.json.lock", "locks", "journal", "oplog", "history.jsonl",
                                   "scan-cache.json", "scan-cache.lock"])
def test_a_symlink_where_state_belongs_is_set_aside_and_reported_never_followed(reduced_once, where):
    from tb_footprint_plugin import api

    logs, outside = reduced_once
    state = logs / ".tb-footprint"
    link = state / where
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    elif link.exists() or link.is_symlink():
        link.unlink()
    # folders point at an existing folder outside; files at a file that must never appear
    target = outside / "victimdir" if where in ("locks", "journal", "oplog") else outside / f"new-{where}"
    os.symlink(str(target), str(link))
    if where.startswith("scan-cache"):
        _write_run(str(logs / "third"), 3)  # new files: this reduce's scan saves its cache
    before = _tree(outside)

    if where.startswith("scan-cache"):
        assert "third" in [r.name for r in api.scan(str(logs)).runs]  # the scan that saves the cache
    rep = api.reduce_logdir(str(logs), None, policy="archive", dry_run=False, runs=["second"], quiet_period=0,
                            verify_backends=("python",), ledger="default")
    assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
    assert _tree(outside) == before, "something was written through the planted link"
    assert not target.exists() or target.is_dir()
    assert (outside / "victimdir" / "keep.txt").read_text() == "must survive too"
    # the link itself was renamed aside (kept, never followed), and a real one of ours made
    (aside,) = [p for p in state.iterdir() if p.name.startswith(where + ".refused-")]
    assert aside.is_symlink() and os.readlink(aside) == str(target)
    if os.path.lexists(link):
        st = os.lstat(link)
        assert not stat.S_ISLNK(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022
    # ... and reported, with its code, by status (what the tab shows too)
    found = [p for p in api.status(str(logs))["problems"] if p["code"] == "untrusted_set_aside"]
    assert [p["file"] for p in found] == [str(aside)], found
    assert str(target) in found[0]["detail"]
    # the reduction it interrupted nothing of: restore still gives the run back
    back = api.restore(str(logs), run="second")
    assert [o.status for o in back] == ["restored"], [o.to_dict() for o in back]


def test_a_symlinked_state_folder_in_a_private_logdir_is_never_written_through(tmp_path):
    """``.tb-footprint`` itself a symlink (to a folder of ours elsewhere): the per-user folder is
    used; nothing lands in the link's target."""
    from tb_footprint_plugin import api

    logs, elsewhere = tmp_path / "logs", tmp_path / "elsewhere"
    _write_run(str(logs / "run"), 3)
    elsewhere.mkdir(mode=0o700)
    os.symlink(str(elsewhere), str(logs / ".tb-footprint"))
    rep = api.reduce_logdir(str(logs), None, policy="archive", dry_run=False, runs=["run"], quiet_period=0,
                            verify_backends=("python",), ledger="default")
    assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
    assert list(elsewhere.iterdir()) == []
    assert (logs / f".tb-footprint-u{os.geteuid()}" / "ledger.json").is_file()
    assert [r.name for r in api.scan(str(logs)).runs] == ["run"]


def test_a_hard_linked_state_file_of_ours_is_appended_to_in_place(reduced_once):
    """``history.jsonl`` with a second hard link (a user's ``cp -al`` / rsnapshot run over the
    logdir): the state folder is ours and closed to others, so nobody else can have made that
    entry; the file is used as it is, never set aside (which split live journals in two)."""
    from tb_footprint_plugin import api

    logs, outside = reduced_once
    hist = logs / ".tb-footprint" / "history.jsonl"
    snap = outside / "history-snapshot.jsonl"
    os.link(hist, snap)
    rep = api.reduce_logdir(str(logs), None, policy="archive", dry_run=False, runs=["second"], quiet_period=0,
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
    assert not [p for p in hist.parent.iterdir() if ".refused-" in p.name]
    assert os.path.samefile(hist, snap) and [e["run"] for e in api.history(str(logs))] == ["first", "second"]


def test_a_hard_link_in_a_folder_others_may_write_is_set_aside(tmp_path):
    """Where the folder is not checked to be ours (``parent=False``), a file with a second link
    may be a stranger's entry for a file elsewhere: set aside, never written."""
    from tb_footprint_plugin.storage.private import open_private

    victim = tmp_path / "victim.txt"
    victim.write_text("must survive")
    os.link(victim, tmp_path / "state.jsonl")
    fd = open_private(str(tmp_path / "state.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, parent=False)
    os.write(fd, b"x")
    os.close(fd)
    assert victim.read_text() == "must survive"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("state.jsonl.refused-")]


def test_an_existing_state_folder_of_ours_made_group_writable_keeps_working(reduced_once):
    """State an older version made under a umask of 002 (folders 0775): still ours, so it is
    tightened and used, never abandoned for a per-user folder; its backups stay restorable."""
    from tb_footprint_plugin import api

    logs, _ = reduced_once
    state = logs / ".tb-footprint"
    for dirpath, dirnames, _files in os.walk(state):
        for d in [dirpath] + [os.path.join(dirpath, n) for n in dirnames]:
            os.chmod(d, 0o775)
    rep = api.reduce_logdir(str(logs), None, policy="archive", dry_run=False, runs=["second"], quiet_period=0,
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
    assert not os.path.lexists(logs / f".tb-footprint-u{os.geteuid()}")
    assert not os.lstat(state).st_mode & 0o022
    assert sorted(o["run"] for o in api.status(str(logs))["operations"]) == ["first", "second"]
    back = api.restore(str(logs), run="first")
    assert [o.status for o in back] == ["restored"], [o.to_dict() for o in back]


def test_root_never_trusts_a_users_state_folder(users, tmp_path):
    """"Ours" is the effective uid, for root too: a ``.tb-footprint`` owned by a user is not
    root's, so root's backups go to ``.tb-footprint-u0`` where that user cannot unlink them."""
    from tb_footprint_plugin import api

    alice, _ = users
    logs = tmp_path / "logs"
    _write_run(str(logs / "run"), 4)
    (logs / ".tb-footprint").mkdir(mode=0o700)
    os.chown(logs / ".tb-footprint", alice.uid, alice.gid)
    rep = api.reduce_logdir(str(logs), None, policy="archive", dry_run=False, runs=["run"], quiet_period=0,
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
    assert list((logs / ".tb-footprint").iterdir()) == []
    assert blobs_of(logs / f".tb-footprint-u{os.geteuid()}")


def test_a_ledger_named_in_a_shared_logdir_is_refused_and_the_logdir_never_moved(tmp_path):
    """``--ledger`` inside a world-writable logdir: its lock could be planted by anyone, so the
    ledger is refused with the folder named — and the logdir itself is never set aside."""
    from tb_footprint_plugin import api
    from tb_footprint_plugin.storage.private import NotPrivate

    logs = tmp_path / "logs"
    _write_run(str(logs / "run"), 5)
    os.chmod(logs, 0o1777)
    with pytest.raises(NotPrivate) as e:
        api.reduce_logdir(str(logs), None, policy="archive", dry_run=False, runs=["run"], quiet_period=0,
                          verify_backends=("python",), ledger=str(logs / "my-ledger.json"))
    assert e.value.code == "state_not_ours" and str(logs) in str(e.value) and "mode 1777" in str(e.value)
    assert sorted(os.listdir(tmp_path)) == ["logs"] and (logs / "run").is_dir()
    assert not os.path.lexists(logs / "my-ledger.json.lock")


# ---------------------------------------------------------------------------------------------
# two users of one logdir, each with a state folder of their own, share the run's lock
# ---------------------------------------------------------------------------------------------
_PAUSED_REDUCE = r'''
import json, os, sys, time
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import faults
logdir, run, home = sys.argv[1:4]

def pause():
    open(os.path.join(home, "paused"), "w").close()
    deadline = time.time() + 300
    while not os.path.exists(os.path.join(home, "go")) and time.time() < deadline:
        time.sleep(0.05)

faults.arm("reduce.backup", pause)
rep = api.reduce_logdir(logdir, None, policy="archive", dry_run=False, runs=[run], quiet_period=0,
                        verify_backends=("python",))
print("\n" + json.dumps({"outcomes": [o.to_dict() for o in rep.outcomes]}, default=str))
'''


def test_another_users_reduce_of_a_run_held_by_one_user_is_skipped_as_locked(users, shared):
    """A team logdir whose runs everyone may write: alice's state folder is ``.tb-footprint``,
    bob's ``.tb-footprint-u<bob>`` (separate lock files). While alice's reduce of a run is paused
    between backup and commit, bob's reduce of that same run, asked to take others' runs too, is
    skipped as ``locked``: the run folder's own lock is shared by both. Alice's reduce then
    completes. Bob's reduce of alice's other run is left alone by default (``others_run``, review
    R10 F8: his vault would hold her originals) and taken when he asks."""
    import time

    alice, bob = users
    alice.tool("make", shared, "team")
    alice.tool("make", shared, "other")
    subprocess.run(["chmod", "-R", "a+rwX", str(shared / "team"), str(shared / "other")], check=True)
    original = snapshot(shared / "team")
    for marker in ("paused", "go"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(alice.home / marker)
    cmd = ["setpriv", f"--reuid={alice.uid}", f"--regid={alice.gid}", "--clear-groups",
           "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search",
           sys.executable, "-c", _PAUSED_REDUCE, str(shared), "team", str(alice.home)]
    env = {"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin", "HOME": str(alice.home),
           "PYTHONPATH": REPO, "XDG_CACHE_HOME": str(alice.home / ".cache")}
    a = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(alice.home))
    try:
        deadline = time.time() + 120
        while not (alice.home / "paused").exists():
            assert a.poll() is None, a.communicate()
            assert time.time() < deadline, "alice's reduce never reached its pause"
            time.sleep(0.05)
        assert os.stat(shared / ".tb-footprint").st_uid == alice.uid
        o = reduced(bob.tool("reduce-others", shared, "team"))
        assert o["status"] == "skipped" and o["code"] == "locked", o
        assert os.path.isdir(shared / f".tb-footprint-u{bob.uid}")
        # another run is not held, but alice's: bob's reduce leaves it alone unless he asks
        o = reduced(bob.tool("reduce", shared, "other"))
        assert o["status"] == "skipped" and o["code"] == "others_run" and alice.name in o["reason"], o
        o = reduced(bob.tool("reduce-others", shared, "other"))
        assert o["status"] == "verified" and f"owned by {alice.name}" in o["reason"], o
        assert "others_run_taken" in [f["code"] for f in o["findings"]], o
        (alice.home / "go").touch()
        out, err = a.communicate(timeout=600)
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    (ao,) = json.loads(out.strip().splitlines()[-1])["outcomes"]
    assert ao["status"] == "verified", (ao, err[-2000:])
    back = alice.tool("restore", shared, "team")
    assert [x["status"] for x in back["outcomes"]] == ["restored"], back
    assert snapshot(shared / "team") == original
    # each one's status names the other's state folder: backups there are not silently invisible
    (b_sees,) = [p for p in bob.tool("status", shared)["problems"] if p["code"] == "other_users_state"]
    assert b_sees["file"] == str(shared / ".tb-footprint") and alice.name in b_sees["detail"], b_sees
    assert "not used by you" in b_sees["detail"]
    (a_sees,) = [p for p in alice.tool("status", shared)["problems"] if p["code"] == "other_users_state"]
    assert a_sees["file"] == str(shared / f".tb-footprint-u{bob.uid}") and bob.name in a_sees["detail"], a_sees
