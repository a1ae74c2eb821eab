"""A run's backups, their pins and its journal records are made durable together, before the swap.

Each file a reduce backed up cost three fsyncs: its journal record, the blob's shard folder after
the link, and the pin's folder. For a profile-heavy run (a hundred small files dropped) that was
most of its reduce (~0.7 s of a run's ~1 s on this machine's ext4). Nothing before the swap
destroys anything, so the transaction now appends every backup record and fsyncs the journal once
before the first blob is linked (a power cut never leaves a blob no record names, review R10 F1),
then syncs each folder its backups and pins went into once (``Vault.sync_pinned``) before the swap
record. These tests watch every fsync of a real reduce:
- nothing in place is replaced or removed before every blob's folder, the pins' folder and the
  journal (with every backup record) were fsynced after their last change;
- the fsyncs of a run of 60 dropped files no longer grow three a file;
- a blob another transaction linked and has not synced yet is synced by this one too.
"""
from __future__ import annotations

import json
import os

from test_batch_compaction import DROP
from test_small_packs import small_runs, tree
from tb_footprint_plugin import api
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage import throttle

FILES = 60


def _watch(monkeypatch):
    """Every fsync (its path) and every replace/unlink in the logdir, in order."""
    events: list = []
    real_fsync, real_unlink, real_replace = os.fsync, throttle.unlink, throttle.replace

    def fsync(fd):
        real_fsync(fd)
        try:
            events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        except OSError:
            pass

    def unlink(p, *a, **kw):
        events.append(("unlink", os.path.abspath(p)))
        return real_unlink(p, *a, **kw)

    def replace(src, dst, *a, **kw):
        events.append(("replace", os.path.abspath(dst)))
        return real_replace(src, dst, *a, **kw)

    real_link = throttle.link

    def link(src, dst, *a, **kw):
        events.append(("link", os.path.abspath(dst)))
        return real_link(src, dst, *a, **kw)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(throttle, "unlink", unlink)
    monkeypatch.setattr(throttle, "replace", replace)
    monkeypatch.setattr(throttle, "link", link)
    return events


def _journal_types(path: str) -> list:
    with open(path) as f:
        return [json.loads(line)["type"] for line in f if line.endswith("\n")]


def test_nothing_in_place_goes_before_the_backups_pins_and_records_are_durable(tmp_path, monkeypatch):
    logdir = small_runs(tmp_path / "logs", runs=1, files=FILES)
    before = tree(logdir)
    # the journal's records on disk at each of its fsyncs, read at the fsync
    journal_at_sync: list = []
    events = _watch(monkeypatch)
    real_fsync = os.fsync

    linked_after_records: list = []  # at the first link: every backup record in the journal's last fsync

    def fsync(fd):
        real_fsync(fd)
        path = events[-1][1] if events and events[-1][0] == "fsync" else ""
        if path.endswith(".jsonl") and os.sep + "journal" + os.sep in path and os.path.isfile(path):
            journal_at_sync.append(_journal_types(path))
            if not any(kind == "link" for kind, _ in events) and journal_at_sync[-1].count("backup") == FILES:
                linked_after_records.append(True)

    monkeypatch.setattr(os, "fsync", fsync)
    rep = api.reduce_logdir(str(logdir), policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",),
                            vault_format="hardlink")
    (o,) = rep.outcomes
    assert o.status == "verified", o.to_dict()
    vault = Context(str(logdir)).vault
    (m,) = vault.manifests()
    folders = {os.path.dirname(vault.blob_path(f["sha256"])) for f in m["files"]}
    logdir_s = str(logdir)
    first_gone = next(i for i, (kind, p) in enumerate(events)
                      if kind in ("unlink", "replace") and p.startswith(logdir_s + os.sep)
                      and os.sep + ".tb-footprint" + os.sep not in p)
    synced_before = {p for kind, p in events[:first_gone] if kind == "fsync"}
    assert folders <= synced_before, sorted(folders - synced_before)[:5]
    pins = os.path.join(vault.tmp, m["op_id"], "pins")
    assert pins in synced_before
    # the folders a store may have made are named durably in theirs (review R10 F4)
    assert {vault.blobs, os.path.dirname(pins), vault.tmp} <= synced_before
    # the journal's last fsync before the swap holds every backup record and the swap record
    assert journal_at_sync and journal_at_sync[-1].count("backup") == FILES
    # and an fsync of it held every backup record before the first blob was linked into the vault
    first_link = next(i for i, (kind, p) in enumerate(events) if kind == "link")
    journal_syncs_before_link = [p for kind, p in events[:first_link] if kind == "fsync" and p.endswith(".jsonl")]
    assert journal_syncs_before_link and linked_after_records, (journal_syncs_before_link, linked_after_records)
    assert api.restore(str(logdir)) and tree(logdir) == before


def test_a_run_of_many_dropped_files_pays_no_fsyncs_a_file(tmp_path, monkeypatch):
    logdir = small_runs(tmp_path / "logs", runs=1, files=FILES)
    events = _watch(monkeypatch)
    rep = api.reduce_logdir(str(logdir), policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",),
                            vault_format="hardlink")
    assert [o.status for o in rep.outcomes] == ["verified"]
    syncs = [p for kind, p in events if kind == "fsync"]
    journal = [p for p in syncs if p.endswith(".jsonl") and os.sep + "journal" + os.sep in p]
    # the last backup record's, the swap record's, and one for each of the 3 emptied folders' rmdir
    # record (the begin record is fsynced under its temporary name); was one for each of the 60
    # backup records
    assert len(journal) <= 5, journal
    # the rest: each shard folder once (at most 256) and a fixed few, not three a file (was ~190)
    vault = Context(str(logdir)).vault
    shards = {os.path.dirname(vault.blob_path(f["sha256"])) for m in vault.manifests() for f in m["files"]}
    assert len(syncs) <= len(shards) + 30, (len(syncs), len(shards))


def test_a_blob_another_transaction_linked_unsynced_is_synced_by_this_one_too(tmp_path, monkeypatch):
    vault = Vault(str(tmp_path / "vault"))
    vault.ensure()
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(b"same bytes" * 100)
    b.write_bytes(b"same bytes" * 100)
    from tb_footprint_plugin.storage.files import sha256_file
    sha = sha256_file(str(a))
    first, second = "20261203T000000-aaaaaa", "20261203T000001-bbbbbb"
    synced: list = []
    real_fsync = os.fsync

    def fsync(fd):
        real_fsync(fd)
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))

    monkeypatch.setattr(os, "fsync", fsync)
    vault.store(str(a), sha, pin=first, sync=False)
    vault.store(str(b), sha, pin=second, sync=False)  # the blob is there: no link of its own,
    # but not adopted as the first one's link of its live file either: a copy of its own (review R11 F1)
    assert os.stat(vault.blob_path(sha)).st_ino != os.stat(a).st_ino
    # the blob's folder and its own pins' folder, and the folders above them (blobs/, tmp/<op>, tmp/)
    assert vault.sync_pinned(second) == 5
    assert os.path.dirname(vault.blob_path(sha)) in synced
    assert os.path.join(vault.tmp, second, "pins") in synced
    vault.unpin(first)
    assert vault.sync_pinned(first) == 0  # unpinned: nothing of it left to sync

