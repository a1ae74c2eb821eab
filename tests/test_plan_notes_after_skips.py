"""The plan's "freed now" note counts only the runs the reduce will do (review R14 F3).

``LocalEngine.note_plan`` made the vault's note before the open-writer check and the
unfinished-operation skips marked runs skipped: a run a process holds open for writing was in the
note's ~769 KB "freed now" while the JSON said 0 and the text "removable 0 B". Now the notes are
made once every skip is known, and say what the JSON says.
"""
import os
import subprocess
import sys
import time

from conftest import copy_real
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Skip
from tb_footprint_plugin.fmt import human_bytes

OLD = time.time() - 3600


def aged(root):
    for p in [root, *root.rglob("*")]:
        os.utime(p, (OLD, OLD), follow_symlinks=False)


def hold_open(path):
    """A process holding ``path`` open for writing (as a profiler still writing would)."""
    p = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1], 'ab'); "
                          "print('ready', flush=True); time.sleep(60)", str(path)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def vault_note(plan):
    return next(n for n in plan.notes if n.startswith("freed now:"))


def test_a_run_open_for_writing_is_not_in_the_freed_note(tmp_path):
    logdir = tmp_path / "logdir"
    copy_real("jax/profiled", logdir / "held")
    copy_real("tf/keras_profiled", logdir / "other")
    aged(logdir)
    xplane = next((logdir / "held").rglob("*.xplane.pb"))
    writer = hold_open(xplane)
    try:
        dry = api.reduce_logdir(str(logdir), policy="archive", dry_run=True, quiet_period=0)
    finally:
        writer.kill()
        writer.wait()
    held = dry.plan.run("held")
    assert held.code == Skip.OPEN_FOR_WRITING, (held.code, held.skipped)
    assert not dry.plan.run("other/train").skipped
    note = vault_note(dry.plan)
    # the note's figures are the JSON's (before: the held run's ~769 KB was in the note)
    assert note.startswith(f"freed now: ~{human_bytes(dry.freed_now_bytes)} "), (note, dry.freed_now_bytes)
    assert f"~{human_bytes(dry.freed_on_disk_after_purge_bytes)} more" in note, (note, dry.to_dict())


def test_every_run_skipped_says_nothing_freed(tmp_path):
    logdir = tmp_path / "logdir"
    copy_real("jax/profiled", logdir / "held")
    aged(logdir)
    writer = hold_open(next((logdir / "held").rglob("*.xplane.pb")))
    try:
        dry = api.reduce_logdir(str(logdir), policy="archive", dry_run=True, quiet_period=0)
    finally:
        writer.kill()
        writer.wait()
    assert dry.removable_bytes == 0 and dry.freed_now_bytes == 0
    assert vault_note(dry.plan).startswith("freed now: ~0 B "), dry.plan.notes
