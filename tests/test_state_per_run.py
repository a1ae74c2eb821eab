"""What a reduced run leaves in the vault beyond its backups (issue 28 item 2: <= 2 KB a run), as
a user's ``du`` counts it — allocated blocks, so every small file costs a whole block.

Before, each operation had a manifest file (``ops/<op>.json``) and a log file
(``oplog/<op>.jsonl``) of its own: two 4 KiB blocks a run. Now the operation log's segments are
the only record of the manifests, one per process, compressed at the batch's end; what a run
adds is a few lines there, in the history and in the ledger.
"""
import os

from tb_footprint_plugin import api
from tb_footprint_plugin.engine import oplog
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.paths import state_dir

from helpers_runs import aged_small_runs

#: each run's scalar tags (the runs are aged past the quiet period)
TAGS = ("loss", "accuracy")
#: the issue's target, per reduced run, beyond its backups
CEILING = 2048


def state_on_disk(logdir: str):
    """(allocated bytes, files) of the state folder beyond its backups and the scan cache, each
    file and folder counted as ``du`` does."""
    sdir = state_dir(logdir)
    total, files = os.lstat(sdir).st_blocks * 512, 0
    for dirpath, dirs, names in os.walk(sdir):
        rel = os.path.relpath(dirpath, sdir)
        if rel.split(os.sep)[0] == "blobs" or rel.split(os.sep)[:2] == ["packs", "data"]:
            continue  # backups: blob files, and the packs small ones are kept in (their index is state)
        for d in dirs:
            if not (rel == "." and d == "blobs") and not (rel == "packs" and d == "data"):
                total += os.lstat(os.path.join(dirpath, d)).st_blocks * 512
        for name in names:
            if rel == "." and name.startswith("scan-cache"):
                continue
            st = os.lstat(os.path.join(dirpath, name))
            total += st.st_blocks * 512
            files += st.st_blocks > 0
    return total, files


def test_a_reduced_run_adds_at_most_2kb_of_state_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    logdir = aged_small_runs(tmp_path / "logdir", 24, tags=TAGS)
    rep = api.reduce_logdir(logdir, policy="archive", dry_run=False, ledger="default")
    assert [o.status for o in rep.outcomes] == ["verified"] * 24
    first, files_first = state_on_disk(logdir)

    aged_small_runs(tmp_path / "logdir", 48, first=24, tags=TAGS)  # a second batch of 48 more runs
    rep = api.reduce_logdir(logdir, policy="archive", dry_run=False, ledger="default")
    assert sum(o.status == "verified" for o in rep.outcomes) == 48, [o.to_dict() for o in rep.outcomes]
    second, files_second = state_on_disk(logdir)

    per_run = (second - first) / 48
    assert per_run <= CEILING, (first, second, per_run)
    # no file of its own per operation: the second batch added a few files, not 48 or 96
    assert files_second - files_first <= 4, (files_first, files_second)
    assert not os.listdir(os.path.join(state_dir(logdir), "ops"))
    # every manifest reads back from the sealed log, whole
    ms = Vault(state_dir(logdir)).manifests()
    assert len(ms) == 72 and all(m["outcome"] == "verified" and m["files"] for m in ms)
    segs = os.listdir(oplog.segments_dir(state_dir(logdir)))
    assert segs and all(n.endswith(oplog.SEALED_SUFFIX) for n in segs), segs
