""""This path holds exactly these bytes" is one rule in the engine: ``putback.holds_original``
through the logdir's store (``Context.store``: no symlink below the logdir followed, not one on
the way either). ``salvage.finish_salvage`` and ``verification.changed_files`` asked
``files.matches``, which opens by path and refuses a link only as the last name: a folder on the
way swapped for a link was read through. So a killed salvage's recovery unlinked, through such a
link, a file outside the logdir that held the staged bytes (invariant 4), and a reduce's check
that a run's event files are unchanged took a file outside the logdir for the run's. Both fail on
the tree before; the plain case (the salvage file in the run, removed) is a guard."""
import hashlib
import os

import pytest

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine.context import Context, TransactionError
from tb_footprint_plugin.engine.salvage import finish_salvage
from tb_footprint_plugin.engine.verification import changed_files

BYTES = b"records a killed salvage staged" * 40
NAME = "events.out.tfevents.1.host.salvaged-001"


def _salvage_records(ctx: Context, final: str) -> list:
    sha = hashlib.sha256(BYTES).hexdigest()
    begin = {"type": "begin", "kind": "salvage", "op_id": "20261205T000000-abcdef", "run": "run",
             "logdir": ctx.logdir, "vault": ctx.vault.root, "path": "run/events.out.tfevents.1.host",
             "old_sha256": "a" * 64, "new_sha256": "b" * 64, "tmp": None, "final": final}
    return [begin, {"type": "staged", "tmp": None, "final": final, "sha256": sha, "size": len(BYTES)}]


def test_a_salvage_file_in_the_run_holding_the_staged_bytes_goes(tmp_path):
    logdir = tmp_path / "logs"
    (logdir / "run").mkdir(parents=True)
    (logdir / "run" / NAME).write_bytes(BYTES)
    ctx = Context(str(logdir))
    finish_salvage(ctx, _salvage_records(ctx, f"run/{NAME}"))
    assert not (logdir / "run" / NAME).exists()


def test_a_killed_salvage_never_removes_a_file_through_a_linked_folder(tmp_path):
    logdir, outside = tmp_path / "logs", tmp_path / "elsewhere"
    (logdir / "run").mkdir(parents=True)
    outside.mkdir()
    (outside / NAME).write_bytes(BYTES)  # someone's file, outside the logdir, with the same bytes
    os.symlink(outside, logdir / "run" / "sub")  # a folder on the way is now a link out
    ctx = Context(str(logdir))
    # refused where the walk meets the link (coded, the journal kept for a later start: 6f9a830)
    with pytest.raises(TransactionError) as e:
        finish_salvage(ctx, _salvage_records(ctx, f"run/sub/{NAME}"))
    assert e.value.code == StoreError.SYMLINK, e.value
    assert (outside / NAME).read_bytes() == BYTES


def test_an_event_file_read_through_a_linked_folder_is_no_unchanged_one(tmp_path):
    logdir, outside = tmp_path / "logs", tmp_path / "elsewhere"
    (logdir / "run" / "sub").mkdir(parents=True)
    (logdir / "run" / "sub" / "events.out.tfevents.1.host").write_bytes(BYTES)
    rec = {"path": "run/sub/events.out.tfevents.1.host", "sha256": hashlib.sha256(BYTES).hexdigest(),
           "size": len(BYTES)}
    ctx = Context(str(logdir))
    assert changed_files(ctx, [rec]) == []
    os.rename(logdir / "run" / "sub", outside)  # the same bytes, now outside the logdir
    os.symlink(outside, logdir / "run" / "sub")
    assert changed_files(Context(str(logdir)), [rec]) == [rec["path"]]
