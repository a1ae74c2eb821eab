"""A single-run reduce's fixed work outside the verification (issue #28 item 3).

* The journal of a run whose event file is rewritten is fsynced once per record a step waits on
  (the last of the backup and stage records, then swap; the blobs and pins synced once before the
  swap): the ``staged`` record is made durable by the swap record's fsync, which comes before
  anything in place is replaced, so the swap still finds every record it needs on disk; the
  ``stage`` record rides on the backup records' fsync, which comes before the temp is written.
"""
from __future__ import annotations

import os
import time

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage import throttle

OLD = time.time() - 3 * 86400


def _rewritten_run(root: str) -> str:
    """A run whose histograms archive thins: its event file is rewritten."""
    run = os.path.join(root, "run")
    with synth.EventWriter(run, timestamp=1_700_000_000) as w:
        for step in range(400):
            w.scalar("loss", step, 1.0 / (step + 1))
            w.histogram("layer/weights", step, [(i - 5.0, i - 4.0, float((i + step) % 7)) for i in range(10)])
    for d, _dirs, files in os.walk(root):
        for f in files:
            os.utime(os.path.join(d, f), (OLD, OLD))
    return run


def _types(path: str) -> list:
    import json

    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["type"] for line in f if line.endswith("\n")]


def test_the_staged_record_is_made_durable_by_the_swap_records_fsync(tmp_path, monkeypatch):
    logdir = tmp_path / "logs"
    _rewritten_run(str(logdir))
    journal_syncs: list = []  # the journal's records on disk at each fsync of it
    real_fsync = os.fsync

    def fsync(fd):
        real_fsync(fd)
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return
        if os.sep + "journal" + os.sep in path and path.endswith(".jsonl") and os.path.isfile(path):
            journal_syncs.append(_types(path))

    durable_at_swap: list = []
    real_replace, real_exchange = throttle.replace, throttle.exchange

    def at_swap(src):
        if ".footprint-" in os.path.basename(src) and not durable_at_swap:
            durable_at_swap.append(journal_syncs[-1] if journal_syncs else [])

    def replace(src, dst, *a, **kw):
        at_swap(src)
        return real_replace(src, dst, *a, **kw)

    def exchange(a, b, *args, **kw):  # an in-place rewrite takes its original's place by an exchange (R28 F3)
        at_swap(a)
        return real_exchange(a, b, *args, **kw)

    durable_at_stage: list = []  # the journal's last fsync when the temp is about to be written

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(throttle, "replace", replace)
    monkeypatch.setattr(throttle, "exchange", exchange)
    faults.arm("reduce.stage_record", lambda: durable_at_stage.append(journal_syncs[-1] if journal_syncs else []))
    try:
        rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    finally:
        faults.disarm_all()
    (o,) = rep.outcomes
    assert o.status == "verified", o.to_dict()
    assert any("tfevents" in f for f in o.created_files)
    # appends fsynced: the last of the backup and stage records (every record before its blob and
    # its temp; the blobs' and the pins' folders synced by ``sync_pinned`` before the swap record),
    # swap (before the swap); backed_up, staged, verified, swapped and commit ride on the next one
    assert [s[-1] for s in journal_syncs] == ["stage", "swap"], journal_syncs
    assert journal_syncs[0] == ["begin", "backup", "stage"], journal_syncs
    # the temp was written only once its stage record was durable
    assert durable_at_stage and "stage" in durable_at_stage[0], durable_at_stage
    # the staged file replaced the original only once its staged record was durable
    assert durable_at_swap and {"stage", "staged", "swap"} <= set(durable_at_swap[0]), durable_at_swap
