"""Honest disk numbers, the same everywhere (issue #27 item 4).

A user runs this tool because the disk is full. With the hard-link vault the backups are hard
links on the same disk, so a reduce frees nothing until ``purge``: the reduce's report, the dry
run, ``status``, the history and the CLI say so — "disk in use" (logdir + vault, hard links
counted once, as ``du`` counts it, checked against the real ``du``), "freed now" (~0 here) and
"freed after purge" (~ the removed bytes). With ``--backup-dir`` on another filesystem (a real
tmpfs) the logdir's disk gains the removed bytes at once.
"""
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import copy_real
from helpers_cli import run_cli as cli
from tb_footprint_plugin import api
from tb_footprint_plugin.engine.usage import disk_usage

OLD = time.time() - 3600


def du(*paths) -> int:
    """``du`` over every path in one invocation: each inode counted once, as the user sees it."""
    out = subprocess.run(["du", "-sc", "--block-size=1", *map(str, paths)], capture_output=True, text=True,
                         check=True).stdout
    return int(out.strip().splitlines()[-1].split()[0])


def close(a: int, b: int, rel: float = 0.01) -> bool:
    return abs(a - b) <= rel * max(a, b)


def two_runs(root: Path) -> Path:
    """A logdir of two aged runs whose profiles the archive policy removes."""
    src = copy_real("tf/keras_profiled", root / "src")
    logdir = root / "logdir"
    for run in ("a", "b"):
        shutil.copytree(src / "train", logdir / run, copy_function=shutil.copy2)
        with open(next((logdir / run).rglob("*.xplane.pb")), "ab") as f:
            f.write(f"{run}'s own bytes".encode())  # distinct backups (the vault is content-addressed)
    for p in [logdir, *logdir.rglob("*")]:
        os.utime(p, (OLD, OLD), follow_symlinks=False)
    shutil.rmtree(src)
    return logdir


@pytest.fixture
def other_fs(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(mnt)], capture_output=True,
                       text=True)
    assert p.returncode == 0, f"cannot mount a tmpfs (tests run as root): {p.stderr}"
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_hardlink_vault_frees_nothing_now_and_agrees_with_du(tmp_path):
    """The hard-link vault (``vault_format="hardlink"``; the compressed default is
    tests/test_vault_compressed.py's)."""
    logdir = two_runs(tmp_path)
    du_before = du(logdir)
    dry = api.reduce_logdir(str(logdir), policy="archive", dry_run=True, vault_format="hardlink")
    assert dry.freed_now_bytes == 0 and dry.freed_on_disk_after_purge_bytes == dry.removable_bytes > 0
    assert any("freed now: ~0 B" in n and "after `tb-footprint purge`" in n for n in dry.plan.notes), dry.plan.notes

    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",),
                            vault_format="hardlink")
    assert rep.ok and all(o.status == "verified" for o in rep.outcomes), [o.to_dict() for o in rep.outcomes]
    removed = rep.removed_from_logdir_bytes
    assert removed > 0.5 * du_before  # the profiles are most of the logdir
    # the vault is inside the logdir: du of the logdir is logdir + vault, hard links once
    assert close(rep.disk_in_use_after_bytes, du(logdir)), (rep.disk_in_use_after_bytes, du(logdir))
    assert close(rep.disk_in_use_before_bytes, du_before), (rep.disk_in_use_before_bytes, du_before)
    # hard-linked backups: nothing freed, though the logdir "lost" most of its bytes; the disk even
    # grew by the vault's records (manifests, logs, folders: a few blocks each)
    assert -1024 * 1024 <= rep.freed_now_bytes <= 0.01 * removed, (rep.freed_now_bytes, removed)
    assert rep.freed_now_bytes == rep.disk_in_use_before_bytes - rep.disk_in_use_after_bytes
    assert close(rep.freed_on_disk_after_purge_bytes, removed, 0.05), (rep.freed_on_disk_after_purge_bytes, removed)
    d = rep.to_dict()
    for k in ("disk_in_use_before_bytes", "disk_in_use_after_bytes", "freed_now_bytes",
              "freed_on_disk_after_purge_bytes"):
        assert isinstance(d[k], int), k

    st = api.status(str(logdir))
    assert close(st["disk_in_use_bytes"], du(logdir)), (st["disk_in_use_bytes"], du(logdir))
    assert st["freed_after_purge_bytes"] == rep.freed_on_disk_after_purge_bytes

    entries = [e for e in api.history(str(logdir)) if e.get("kind") == "reduce"]
    assert len(entries) == 2
    assert all(e["freed_now_bytes"] <= 0.01 * e["removed_from_logdir_bytes"] for e in entries), entries
    assert sum(e["freed_after_purge_bytes"] for e in entries) == rep.freed_on_disk_after_purge_bytes

    # after the purge the numbers turn: the disk is freed, nothing more is to come
    pr = api.purge(str(logdir), yes=True)
    assert pr.freed_bytes > 0
    st = api.status(str(logdir))
    assert st["freed_after_purge_bytes"] == 0
    assert close(st["disk_in_use_bytes"], du(logdir))
    # the blobs went (a few blocks of records came: the purge is logged)
    assert st["disk_in_use_bytes"] <= rep.disk_in_use_after_bytes - 0.7 * removed
    entries = [e for e in api.history(str(logdir)) if e.get("kind") == "reduce"]
    assert all(e["freed_after_purge_bytes"] == 0 and e["freed_now_bytes"] == e["removed_from_logdir_bytes"]
               for e in entries), entries


def test_vault_on_another_filesystem_frees_the_logdir_disk_now(tmp_path, other_fs):
    logdir = two_runs(tmp_path)
    vault = other_fs / "vault"
    dry = api.reduce_logdir(str(logdir), policy="archive", dry_run=True, backup_dir=str(vault))
    assert dry.freed_now_bytes == dry.removable_bytes > 0
    assert any("on another disk" in n for n in dry.plan.notes), dry.plan.notes

    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, backup_dir=str(vault),
                            verify_backends=("python",), vault_format="hardlink")
    assert rep.ok and all(o.status == "verified" for o in rep.outcomes), [o.to_dict() for o in rep.outcomes]
    removed = rep.removed_from_logdir_bytes
    assert close(rep.freed_now_bytes, removed, 0.05), (rep.freed_now_bytes, removed)
    assert rep.freed_on_disk_after_purge_bytes > 0.9 * removed
    both = du(logdir, vault)
    assert close(rep.disk_in_use_after_bytes, both), (rep.disk_in_use_after_bytes, both)
    st = api.status(str(logdir), backup_dir=str(vault))
    assert close(st["disk_in_use_bytes"], both), (st["disk_in_use_bytes"], both)
    assert st["freed_after_purge_bytes"] == rep.freed_on_disk_after_purge_bytes
    entries = [e for e in api.history(str(logdir), backup_dir=str(vault)) if e.get("kind") == "reduce"]
    assert all(close(e["freed_now_bytes"], e["removed_from_logdir_bytes"], 0.05) for e in entries), entries


def test_cli_prints_disk_in_use_freed_now_and_after_purge(tmp_path):
    logdir = two_runs(tmp_path)
    p = cli("reduce", logdir, "--yes", "--verify", "python", "--vault-format", "hardlink")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "freed now nothing on disk (logdir + vault" in p.stdout, p.stdout
    assert "more after `tb-footprint purge`" in p.stdout, p.stdout
    assert "disk in use now (logdir + vault):" in p.stdout, p.stdout
    p = cli("reduce", logdir, "--yes", "--verify", "python", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    s = cli("status", logdir)
    assert "disk in use now (logdir + vault):" in s.stdout and "more freed after `tb-footprint purge`" in s.stdout, \
        s.stdout
    js = json.loads(cli("status", logdir, "--json").stdout)
    assert close(js["disk_in_use_bytes"], du(logdir))


def test_other_users_state_folders_and_symlinks_are_not_counted(tmp_path):
    logdir = tmp_path / "logdir"
    (logdir / "run").mkdir(parents=True)
    (logdir / "run" / "f").write_bytes(os.urandom(200_000))
    theirs = logdir / ".tb-footprint-u4242"
    theirs.mkdir()
    (theirs / "blob").write_bytes(os.urandom(500_000))
    os.chown(theirs, 4242, 4242)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big").write_bytes(os.urandom(800_000))
    (logdir / "run" / "link").symlink_to(outside)
    u = disk_usage(str(logdir), [])
    assert close(u.total_bytes, du(logdir) - du(theirs)), (u.total_bytes, du(logdir), du(theirs))
    assert u.total_bytes < 400_000
    assert any(s["path"] == str(theirs) for s in u.skipped)
    # a vault that is a symlink is neither followed nor counted
    (tmp_path / "vault-link").symlink_to(outside)
    assert disk_usage(str(logdir), [str(tmp_path / "vault-link")]).total_bytes == u.total_bytes
    # hard links across logdir and an outside vault count once
    vault = tmp_path / "vault"
    vault.mkdir(mode=0o700)
    os.link(logdir / "run" / "f", vault / "f")
    assert close(disk_usage(str(logdir), [str(vault)]).total_bytes, du(logdir, vault) - du(theirs))
