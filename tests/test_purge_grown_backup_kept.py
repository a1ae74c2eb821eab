"""A purge keeps a backup longer than recorded whose bytes no longer start with the recorded ones
as ``backup_damaged``, never as late writes to salvage: the grown check is
``placement.starts_with``, the one prefix rule (r19 report C2, D7: ``purge._prefix_matches`` was
a copy of it). A guard: it holds before and after. (A backup grown by late writes alone is
salvaged by the start the purge makes first, so the purge's ``late_writes_pending`` branch is
not reached from here.)"""
from __future__ import annotations

import os

import pytest

from test_late_records import PY, append_by_path, image_run
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Outcome

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _reduced(tmp_path):
    logdir = tmp_path / "logdir"
    path = image_run(logdir / "run")
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY,
                            vault_format="hardlink")
    assert rep.ok and rep.outcomes[0].status == Outcome.VERIFIED, [o.to_dict() for o in rep.outcomes]
    (m,) = [m for m in api.operations(str(logdir)) if m.get("kind") == "reduce"]
    (f,) = [f for f in m["files"] if f["path"] == f"run/{path.name}"]
    return logdir, m, os.path.join(m["vault"], f["blob"])


def test_a_purge_keeps_a_longer_backup_not_starting_with_its_bytes_as_damaged(tmp_path):
    logdir, m, blob = _reduced(tmp_path)
    with open(blob, "r+b") as f:  # a byte of the recorded part changed, then records appended
        f.seek(3)
        b = f.read(1)
        f.seek(3)
        f.write(bytes([b[0] ^ 0xFF]))
    append_by_path(blob, 2000)
    size = os.path.getsize(blob)
    rep = api.purge(str(logdir), yes=True)
    kept = {k["op_id"]: k for k in rep.to_dict()["kept"]}
    assert kept[m["op_id"]]["code"] == Finding.BACKUP_DAMAGED, rep.to_dict()
    assert os.path.getsize(blob) == size  # kept whole
