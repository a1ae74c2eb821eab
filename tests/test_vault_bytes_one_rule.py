"""What the vault holds reads the same in the tab's overview (the scan's ``vault_bytes``) as in
``status`` (review K2, r25): the scan counted backups and packs but not ``retired/``, so a logdir
whose runs were retired (their bytes in the vault, nowhere else) showed "Backups in the vault: 0 B"
while ``status`` said what the vault holds. One list of a vault's holding folders
(``storage.paths.VAULT_HOLDINGS``) now serves both."""
import os

import pytest

from tb_footprint_plugin import api, synth


def _runs(root, names):
    for name in names:
        with synth.EventWriter(str(root / name)) as w:
            for step in range(40):
                w.scalar("loss", step, 1.0 / (step + 1))


def _retired_bytes(root):
    total = 0
    for d, _dirs, files in os.walk(root / ".tb-footprint" / "retired"):
        total += sum(os.lstat(os.path.join(d, f)).st_size for f in files)
    return total


def test_a_retired_run_counts_in_the_tabs_vault_total_as_in_status(tmp_path):
    _runs(tmp_path, ["a", "b"])
    rep = api.retire(str(tmp_path), api.retire_rule(runs=["a"]), dry_run=False, quiet_period=0)
    assert rep.ok, rep.to_dict()
    held = _retired_bytes(tmp_path)
    assert held > 0  # the run's event file is in the vault now
    status = api.status(str(tmp_path))
    scanned = api.scan(str(tmp_path))
    assert status["vault_bytes"] >= held
    assert scanned.vault_bytes == status["vault_bytes"]


def test_backups_and_retired_runs_add_up_in_both(tmp_path):
    _runs(tmp_path, ["a", "b"])
    synth.write_profile_session(str(tmp_path / "b"), synth.session_name_for(1_700_000_000), "host",
                                n_events=200, seed=3)
    old = 1_600_000_000
    for d, _dirs, files in os.walk(tmp_path):
        for f in files:
            os.utime(os.path.join(d, f), (old, old))
    red = api.reduce_logdir(str(tmp_path), runs=["b"], dry_run=False, verify_backends=("python",))
    assert red.ok, red.to_dict()
    rep = api.retire(str(tmp_path), api.retire_rule(runs=["a"]), dry_run=False, quiet_period=0)
    assert rep.ok, rep.to_dict()
    status = api.status(str(tmp_path))
    assert status["vault_bytes"] > _retired_bytes(tmp_path)  # the reduction's backups as well
    assert api.scan(str(tmp_path)).vault_bytes == status["vault_bytes"]
