"""The operation log's per-operation lookups in a batch read what was appended since, not the
writing process's whole open segment (issue #28 item 1: the cost of a run must not grow with the
runs already done in its batch).

A batch appends every run's records to one plain segment; each run's transaction then reads its
own manifest back a few times (``Vault.read_manifest``, ``has_manifest``, ``segment_state`` before
each change). ``oplog.Index`` keeps where each record is and, on each lookup, reads only the bytes
appended since its last look: what one run makes the log read is its own lines, however long the
segment has grown. The bytes are counted where the log opens its files.
"""
import hashlib
import os

import pytest

from tb_footprint_plugin.engine import oplog
from tb_footprint_plugin.engine.vault import Vault


class Counted:
    """A file object whose reads are added to ``box[0]``."""

    def __init__(self, f, box):
        self._f, self._box = f, box

    def read(self, *a):
        b = self._f.read(*a)
        self._box[0] += len(b)
        return b

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._f.__exit__(*exc)


def a_manifest(i: int) -> dict:
    run = f"exp{i // 100:02d}/run{i:05d}"
    return {"op_id": f"20260101T000000-{i:06x}", "kind": "reduce", "run": run, "logdir": "/x/logs",
            "policy": "archive", "outcome": "started", "started_at": float(i),
            "files": [{"path": f"{run}/f{k}", "sha256": hashlib.sha256(f"{i}/{k}".encode()).hexdigest(),
                       "size": 1234, "mode": 0o644, "mtime_ns": 10**18 + i} for k in range(3)],
            "plan": {"fidelity": ["scalars: all kept"] * 4, "actions": [{"kind": "rewrite", "path": run}] * 6},
            # the bulk a rewrite's verification carries (its series): ~10 KB a line
            "verification": {"ok": True, "series": [[s, s / 7] for s in range(400)]}}


@pytest.fixture()
def counted(monkeypatch):
    box = [0]
    real = oplog.open_regular
    monkeypatch.setattr(oplog, "open_regular", lambda *a, **k: Counted(real(*a, **k), box))
    return box


def one_run(vault: Vault, i: int) -> None:
    """What a run's transaction asks of the log: its manifest written, read back, looked up,
    changed, read again."""
    m = a_manifest(i)
    vault.write_manifest(m)
    for _ in range(3):
        vault.read_manifest(m["op_id"])
    for _ in range(4):
        assert vault.has_manifest(m["op_id"])
    vault.write_manifest(dict(m, outcome="verified", finished_at=float(i) + 1))
    assert vault.read_manifest(m["op_id"])["outcome"] == "verified"


def test_a_runs_lookups_read_the_same_bytes_first_and_last_in_a_batch(tmp_path, counted):
    vault = Vault(str(tmp_path / "vault"))
    vault.ensure()
    per_run = []
    for i in range(300):
        before = counted[0]
        one_run(vault, i)
        per_run.append(counted[0] - before)
    (seg,) = [n for n in os.listdir(oplog.segments_dir(vault.root)) if n.endswith(".jsonl")]
    size = os.path.getsize(os.path.join(oplog.segments_dir(vault.root), seg))
    first, last = sum(per_run[10:30]) / 20, sum(per_run[-20:]) / 20
    # its own lines, appended (~2 x 2 copies) and read back a few times: a run's own bytes,
    # not the segment's (by the last run, 300 runs' lines)
    assert last <= first * 1.05 + 512, (first, last)
    assert last < size / 20, (last, size)
    oplog.seal(vault.root)
