"""``status`` (and ``history``'s header) with the vault on another disk said "freed now N on disk",
where N is measured on the logdir's disk alone (``usage.freed_by_op``: blocks on the logdir's
device); a reduce already said "on the logdir's disk (the vault is on another disk)" (review R17
F14). Now status and the tab's disk numbers say so too (``vault_elsewhere``, docs/json-schema.md)."""
import json
import subprocess

import pytest

from conftest import copy_real
from helpers_cli import run_cli as cli
from tb_footprint_plugin import api

OTHER_DISK = "on the logdir's disk (the vault is on another disk)"


@pytest.fixture
def other_disk(tmp_path):
    """A tmpfs mounted for the test (tests run as root, as CI): a folder on another filesystem."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], capture_output=True, text=True)
    assert p.returncode == 0, f"cannot mount a tmpfs (tests run as root): {p.stderr}"
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_status_says_freed_now_is_the_logdirs_disks_when_the_vault_is_elsewhere(tmp_path, other_disk):
    mnt = other_disk
    logdir = tmp_path / "ld"
    copy_real("tf/keras_profiled/train", logdir / "a")
    out = cli("reduce", logdir, "--backup-dir", mnt / "v", "--quiet-period", "0", "--yes")
    assert out.returncode == 0, out.stdout + out.stderr
    st = cli("status", logdir, "--backup-dir", mnt / "v")
    assert st.returncode == 0, st.stderr
    assert "freed now" in st.stdout and OTHER_DISK in st.stdout, st.stdout
    js = json.loads(cli("status", logdir, "--backup-dir", mnt / "v", "--json").stdout)
    assert js["vault_elsewhere"] is True and js["freed_now_bytes"] > 0, js
    assert api.disk_numbers(str(logdir), str(mnt / "v"))["vault_elsewhere"] is True
    hist = cli("history", logdir)  # the vault remembered by the reduce
    assert OTHER_DISK in hist.stdout, hist.stdout


def test_status_says_on_disk_when_the_vault_is_on_the_logdirs_disk(tmp_path):
    logdir = tmp_path / "ld"
    copy_real("tf/keras_profiled/train", logdir / "a")
    assert api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0).ok
    st = cli("status", logdir)
    assert st.returncode == 0 and "freed now" in st.stdout and OTHER_DISK not in st.stdout, st.stdout
    assert api.status(str(logdir))["vault_elsewhere"] is False


def test_one_rule_tells_a_vault_on_another_disk_for_the_plan_and_status(tmp_path, other_disk):
    """``usage.on_another_disk``: the plan's words (``plan_notes.freed_estimate``) and status's
    ``vault_elsewhere`` asked two rules before (status skipped any URL by ``"://"``, so a ``file://``
    vault on another disk was said to share the logdir's disk). A bucket vault is on no disk."""
    from tb_footprint_plugin.engine import usage

    mnt = other_disk
    logdir = tmp_path / "ld"
    logdir.mkdir()
    assert usage.on_another_disk(str(logdir), str(mnt / "v"))  # not made yet: its parent's disk
    assert usage.on_another_disk(str(logdir), f"file://{mnt}/v")
    assert not usage.on_another_disk(str(logdir), str(tmp_path / "v"))
    assert not usage.on_another_disk(str(logdir), f"file://{tmp_path}/v")
    assert not usage.on_another_disk(str(logdir), "s3://bucket/vault")
