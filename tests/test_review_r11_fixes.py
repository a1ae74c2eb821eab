"""Review R11's findings on restore, purge and retire, each reproduced and fixed (the lead's part;
F3, F5 and F7 are in their own files).

- F1: a backup another transaction under way linked in (a second name of its run's live file,
  pinned by it) is never adopted as it stands by a reduction of the same bytes elsewhere: that
  transaction may never swap, and a write to its file in place would then change the committed
  backup of the other run. It is made a copy of its own first. A transaction's own link (two
  files of its run with the same bytes) is still adopted as it stands.
"""
from __future__ import annotations

import os

from tb_footprint_plugin.engine.context import Context, new_op_id
from tb_footprint_plugin.storage.files import sha256_file


def _twins(tmp_path, runs=("r1", "r2"), name="twin.xplane.pb"):
    logdir = tmp_path / "logs"
    data = os.urandom(5000)
    paths = []
    for run in runs:
        p = logdir / run / "plugins" / "profile" / "s" / name
        p.parent.mkdir(parents=True)
        p.write_bytes(data)
        paths.append(p)
    return logdir, paths, sha256_file(str(paths[0]))


def test_a_link_another_transaction_pinned_is_copied_before_it_is_adopted(tmp_path):
    logdir, (r1, r2), sha = _twins(tmp_path)
    vault = Context(str(logdir)).vault
    vault.ensure()
    a, b = new_op_id(), new_op_id()
    blob = vault.store(str(r2), sha, pin=a, sync=False)  # A links r2's live original in
    assert os.stat(blob).st_ino == os.stat(r2).st_ino
    assert vault.store(str(r1), sha, pin=b) == blob  # B, r1's same bytes: adopts the digest
    assert os.stat(blob).st_ino != os.stat(r2).st_ino  # ... as a copy of its own
    with open(r2, "r+b") as f:  # A never swaps; r2's file is written in place
        f.write(b"\x00" * 64)
    assert vault.check_blob(sha)  # B's backup still holds r1's bytes
    assert sha256_file(blob) == sha


def test_a_transactions_own_link_is_adopted_as_it_stands(tmp_path):
    logdir, (one, two), sha = _twins(tmp_path, runs=("r1/a", "r1/b"))
    vault = Context(str(logdir)).vault
    vault.ensure()
    op = new_op_id()
    blob = vault.store(str(one), sha, pin=op, sync=False)
    assert vault.store(str(two), sha, pin=op, sync=False) == blob
    assert os.stat(blob).st_ino == os.stat(one).st_ino  # no copy: both originals go at its swap
