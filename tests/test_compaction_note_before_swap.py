"""Review R8 F2: a compressing reduce notes its compaction before its swap, so a kill anywhere from
the swap on leaves the next start a note to finish, never plain backups for good.

The note used to be written after the commit (by the lone run's compaction, or by the batch's
``submit``): a kill between the swap and that note left the run reduced and its backups hard links
with no note, freed only by a purge (that is, never freed while the user keeps the backups, which
is the default). Now the transaction writes it, naming this process, before its swap record:
- a kill after the swap record (recovery rolls the swap forward), after the swap, or after the
  commit: the next start compacts the run's backups, and a restore gives back every byte;
- a run rolled back in its process drops the note;
- a start drops a note whose operation rolled back (its manifest says so), and keeps one with no
  manifest (another logdir's transaction under way, sharing the vault).
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO
from test_batch_compaction import DROP, backups, small_runs
from test_small_packs import tree
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine import compactor as cm
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.context import Context, new_op_id

pytestmark = pytest.mark.usefixtures("disarm_faults")

_REDUCE = """
import json, sys
from tb_footprint_plugin import api
api.reduce_logdir(sys.argv[1], policy=json.loads(sys.argv[2]), dry_run=False, quiet_period=0,
                  verify_backends=("python",))
print("NOT KILLED")
"""


def _killed_reduce(logdir, step: str) -> None:
    env = dict(os.environ, TB_FOOTPRINT_FAILPOINTS=f"{step}=kill",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _REDUCE, str(logdir), json.dumps(DROP)], env=env, timeout=300,
                       capture_output=True, text=True)
    assert p.returncode == -9, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])


@pytest.mark.parametrize("runs", [1, 3], ids=["a lone run", "a batch"])
@pytest.mark.parametrize("step", ["reduce.swap_record", "reduce.swap", "reduce.commit"])
def test_a_kill_from_the_swap_on_leaves_the_backups_to_the_next_starts_compaction(tmp_path, step, runs):
    logdir = small_runs(tmp_path / "logs", runs=runs)
    before = tree(logdir)
    _killed_reduce(logdir, step)
    vault = Context(str(logdir)).vault
    assert vault.pending_compactions(), "the kill left no compaction note"
    api.recover_logdir(str(logdir))
    (m,) = [m for m in vault.manifests() if m.get("kind") == "reduce"]  # the killed run: reduced and verified
    assert m["outcome"] == Outcome.VERIFIED
    shas = backups(vault)
    assert shas and {vault.blob_form(s) for s in shas} == {"packed"}, {s[:8]: vault.blob_form(s) for s in shas}
    assert vault.pending_compactions() == {}
    outs = api.restore(str(logdir))
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    assert tree(logdir) == before


def test_a_run_rolled_back_in_its_process_drops_its_note(tmp_path):
    logdir = small_runs(tmp_path / "logs", runs=1)
    before = tree(logdir)
    faults.arm("reduce.swap", "raise")
    rep = api.reduce_logdir(str(logdir), policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.ROLLED_BACK]
    assert Context(str(logdir)).vault.pending_compactions() == {}
    assert tree(logdir) == before


def test_a_start_drops_the_note_of_a_rolled_back_operation_and_keeps_one_without_a_manifest(tmp_path):
    """A kill between the note and the swap record leaves a note whose operation recovery rolls
    back (its manifest says ``rolled_back``): the start drops it, compacts nothing for it and
    reports nothing. A note with no manifest may be a transaction under way of another logdir
    sharing the vault (its journal is not in this logdir's state): it stays (review R10 F3)."""
    logdir = small_runs(tmp_path / "logs", runs=1)
    faults.arm("reduce.swap", "raise")
    rep = api.reduce_logdir(str(logdir), policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",))
    faults.disarm_all()
    (o,) = rep.outcomes
    assert o.status == Outcome.ROLLED_BACK
    ctx = Context(str(logdir))
    assert ctx.vault.read_manifest(o.op_id)["outcome"] == Outcome.ROLLED_BACK
    gone = {"host": cm.this_process()["host"], "pid": 2 ** 22 + 7, "pid_start": 1}  # no such process
    ctx.vault.note_compaction(o.op_id, ["ab" * 32], waits_for=gone)  # as a kill before the swap left it
    elsewhere = new_op_id()
    ctx.vault.note_compaction(elsewhere, ["cd" * 32], waits_for=gone)
    outs = api.recover_logdir(str(logdir))
    assert [x for x in outs if x.op_id == o.op_id] == [], outs  # nothing compacted or said for it
    left = set(ctx.vault.pending_compactions())
    assert o.op_id not in left and elsewhere in left
