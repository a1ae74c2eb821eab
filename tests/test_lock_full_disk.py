"""Review R16 F2, F3: a run lock that cannot be taken because the disk is full is said as such.

Purge on a full disk said every run was "being changed by another process", sized their backups
0 B, ended "purging them could destroy bytes that exist nowhere else" and exited 0; restore said
``lock_error — [Errno 28]`` naming no file. One rule (``engine.run_lock.lock_failure``) now gives
every verb the same coded outcome: ``no_space`` naming the lock's file, the bytes it needs and the
free space; another process's lock stays ``locked``. Nothing is changed either way."""
import errno
import json

from helpers_cli import run_cli as cli
from test_damaged_state import fill, small_fs, state, two_runs  # noqa: F401  (fixture)
from conftest import user_files
from tb_footprint_plugin.codes import Failure, Skip
from tb_footprint_plugin.engine.lease import LockRefused
from tb_footprint_plugin.engine.run_lock import lock_failure


def test_lock_failure_codes_name_the_file():
    code, text = lock_failure(OSError(errno.ENOSPC, "No space left on device", "/l/locks/r.lease"), "r", "/l/locks")
    assert code == Failure.NO_SPACE and "/l/locks/r.lease" in text and "needed" in text, text
    code, text = lock_failure(OSError(errno.EACCES, "Permission denied", "/l/locks/r.lock"), "r", "/l/locks")
    assert code == Failure.LOCK_ERROR and "/l/locks/r.lock" in text and "Permission denied" in text, text
    code, _ = lock_failure(LockRefused("run 'r' is locked by pid 7 on h"), "r", "/l/locks")
    assert code == Skip.LOCKED


def _reduced_then_full(small_fs):
    logdir = two_runs(small_fs)
    p = cli("reduce", logdir, "--verify", "python", "--quiet-period", "0", "--yes")
    assert p.returncode == 0, p.stdout + p.stderr
    before = user_files(logdir)
    fill(small_fs, 0)
    return logdir, before


def test_purge_on_a_full_disk_says_no_space_and_fails(small_fs):
    logdir, before = _reduced_then_full(small_fs)
    p = cli("purge", logdir, "--yes")
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert "[no_space]" in out and str(state(logdir) / "locks") in out, out
    assert "another process" not in out and "exist nowhere else" not in out, out
    assert " 0 B  [no_space]" not in out, out  # the backups' real size, not 0
    p = cli("purge", logdir, "--yes", "--json")
    assert p.returncode == 1
    kept = json.loads(p.stdout)["kept"]
    assert kept and all(k["code"] == "no_space" and k["bytes"] > 0 for k in kept), kept
    assert user_files(logdir) == before


def test_restore_on_a_full_disk_says_no_space_naming_the_lock(small_fs):
    logdir, before = _reduced_then_full(small_fs)
    p = cli("restore", logdir, "--all", "--yes", "--json")
    assert p.returncode == 1, p.stdout + p.stderr
    outs = json.loads(p.stdout)["outcomes"] if p.stdout.strip().startswith("{") else json.loads(p.stdout)
    assert outs and all(o["code"] == "no_space" and str(state(logdir) / "locks") in o["reason"] for o in outs), outs
    assert user_files(logdir) == before
