"""Review R13 F4, F5 and F6 (compaction's worker, notes and recovery line).

- F4: the compaction worker whose parent is gone (a killed batch: nobody reads its replies) goes
  on with the rounds it was given and ends 0, instead of dying with ``BrokenPipeError`` at its
  next reply.
- F5: a compaction note that names nothing (no regular file, no JSON, no list of blobs) is named by
  `status` as `damaged_state_file`.
- F6: the recovery line of a finished compaction counts packed backups with the compressed ones.
"""
from __future__ import annotations

import json
import os
import subprocess

from tb_footprint_plugin.storage.spawn import python_child
from tb_footprint_plugin.engine.context import Context


def test_the_worker_goes_on_with_its_rounds_after_its_parent_is_gone(tmp_path):
    logdir = tmp_path / "logs"
    logdir.mkdir()
    ctx = Context(str(logdir))
    # started as the compaction worker is (``CompactWorker``)
    p = subprocess.Popen(python_child("tb_footprint_plugin.engine.compact_worker", "main"), cwd="/",
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = {"logdir": ctx.logdir, "backup_dir": None, "vault": ctx.vault.root, "pack_below": 262144,
            "pack_batch": 256}
    p.stdin.write(json.dumps(head).encode() + b"\n")
    p.stdin.flush()
    assert json.loads(p.stdout.readline()) == {"ready": True}
    p.stdout.close()  # the parent is gone: nobody reads the replies any more
    for n in range(3):
        p.stdin.write(json.dumps({"n": n, "round": [[f"20260101T00000{n}-abcdef", f"run{n}", []]]}).encode() + b"\n")
    p.stdin.close()
    assert p.wait(60) == 0
    assert p.stderr.read() == b""


# --- F5: a compaction note that names nothing is named by status ---------------------------------
def test_unreadable_compaction_notes_are_named_by_status(tmp_path):
    from tb_footprint_plugin import api, synth
    from tb_footprint_plugin.codes import Finding

    logdir = tmp_path / "logs"
    with synth.EventWriter(str(logdir / "run"), timestamp=1_700_000_000) as w:
        w.scalar("loss", 0, 1.0)
    ctx = Context(str(logdir))
    ctx.vault.ensure()
    folder = os.path.join(ctx.vault.root, "compact")
    os.makedirs(folder, exist_ok=True)
    planted = {
        "20260101T000001-aaaaaa": "garbage",
        "20260101T000002-bbbbbb": "fifo",
        "20260101T000003-cccccc": "symlink",
        "20260101T000004-dddddd": "list",
    }
    outside = tmp_path / "outside.json"
    outside.write_text('{"blobs": []}')
    for op, kind in planted.items():
        p = os.path.join(folder, f"{op}.json")
        if kind == "garbage":
            with open(p, "wb") as f:
                f.write(b"\x00not json")
        elif kind == "fifo":
            os.mkfifo(p)
        elif kind == "symlink":
            os.symlink(outside, p)
        else:
            with open(p, "w") as f:
                f.write("[1, 2]")
    good = os.path.join(folder, "20260101T000005-eeeeee.json")
    with open(good, "w") as f:
        f.write('{"op_id": "20260101T000005-eeeeee", "blobs": []}')
    named = {p.get("path") for p in api.status(str(logdir))["problems"] if p["code"] == Finding.DAMAGED_FILE}
    assert {os.path.join(folder, f"{op}.json") for op in planted} <= named
    assert good not in named


# --- F6: the recovery line counts packed backups -------------------------------------------------
def test_a_finished_compaction_counts_its_packed_backups(tmp_path):
    from tb_footprint_plugin import api, synth
    from tb_footprint_plugin.codes import Finding

    logdir = tmp_path / "logs"
    run = logdir / "run"
    with synth.EventWriter(str(run), timestamp=1_700_000_000) as w:
        for s in range(20):
            w.scalar("loss", s, 1.0 / (s + 1))
    synth.write_profile_session(str(run), synth.session_name_for(1_700_000_600), "host", n_events=200, seed=1)
    for p in list(logdir.rglob("*")) + [logdir]:
        os.utime(p, (1_600_000_000, 1_600_000_000))
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0,
                            verify_backends=("python",), vault_format="hardlink")
    (out,) = rep.outcomes
    vault = Context(str(logdir)).vault
    shas = [f["sha256"] for f in vault.read_manifest(out.op_id)["files"]]
    assert shas and all(vault.blob_form(s) == "plain" for s in shas)
    vault.note_compaction(out.op_id, shas)  # what a kill before the compaction leaves
    done = [o for o in api.recover_logdir(str(logdir)) if o.code == Finding.COMPACTION_FINISHED]
    assert all(vault.blob_form(s) == "packed" for s in shas)
    assert len(done) == 1 and f"({len(shas)} of {len(shas)} compressed or packed)" in done[0].detail
