"""A restored operation's released copies are known as released (review R11 F3), and a purge
counts as lost only the originals whose blobs went (R11 F7).

F3 (a): two runs hold a file of the same bytes (a profile or config file copied from run to run:
one blob for both). Restoring one run let go of its own blobs and kept the shared one, which the
other run's reduction still needs; the restored operation was marked released only with no blob
left, so ``status`` called each released file ``backup_damaged`` (missing), the purge preview
listed it as kept and ``purge`` refused it, as long as the other run's backup lived.

F3 (b): a run reduced twice (the second reduce backs up the first one's reduced event file,
small: packed in a compressed vault) and restored in one command. The deferred release of that
packed backup came after the older restore had put the original over its path, so "the file in
place must still be these bytes" claimed it for good: a permanent pack and a permanent
``backup_damaged``.

The fix: a release records the digests it lets go in the manifest (``released``) before the
first delete; health and purge read an absent one of them as released, not missing; a file the
restore of an older reduction of the run removed as its own output (its ``created``) is no claim.
"""
import hashlib
import os
from typing import Optional

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin import synth as sp
from tb_footprint_plugin.codes import Finding, Outcome
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.paths import state_dir

DROP_PROFILES = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}
ARCHIVE = {"name": "archive-hist", "base": "archive"}
SHARED = hashlib.sha256(b"shared").digest() * 100  # the same bytes in every run


def _tree(root: str, run: str) -> dict:
    out = {}
    for dp, _dirs, files in os.walk(os.path.join(root, run)):
        for n in files:
            p = os.path.join(dp, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = (hashlib.sha256(f.read()).hexdigest(), os.lstat(p).st_mode)
    return out


def _shared_runs(tmp_path, monkeypatch, fmt: str, runs=("r0", "r1")) -> str:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = str(tmp_path / "logdir")
    for i, run in enumerate(runs):
        with sp.EventWriter(os.path.join(root, run)) as w:
            for step in range(5):
                w.scalar("loss", step, 1.0 / (step + 1))
        session = os.path.join(root, run, "plugins", "profile", "2026_01_01_00_00_00")
        os.makedirs(session)
        with open(os.path.join(session, "host.xplane.pb"), "wb") as f:
            f.write(SHARED)
        sp.write_xplane(os.path.join(session, f"own{i}.xplane.pb"), 30, seed=i)
    sp.age(root)
    rep = api.reduce_logdir(root, policy=DROP_PROFILES, dry_run=False, vault_format=fmt)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED] * len(runs)
    return root


def _damaged(root: str) -> list:
    return [p for p in api.status(root).get("problems") or []
            if p["code"] in (Finding.BACKUP_DAMAGED, Finding.DAMAGED_FILE)]


@pytest.mark.parametrize("fmt", ["compressed", "hardlink"])
def test_a_run_restored_beside_a_shared_blob_is_released_not_damaged(tmp_path, monkeypatch, fmt):
    root = _shared_runs(tmp_path, monkeypatch, fmt)
    vault = Vault(state_dir(root))
    before_r0 = {m["op_id"]: m for m in vault.manifests() if m["run"] == "r0"}
    outs = api.restore(root, run="r1")
    assert [o.status for o in outs] == [Outcome.RESTORED]
    m1 = next(m for m in vault.manifests() if m["run"] == "r1" and m["kind"] == "reduce")
    shared = hashlib.sha256(SHARED).hexdigest()
    assert vault.has_blob(shared)  # r0's reduction still needs it
    own = {f["sha256"] for f in m1["files"]} - {shared}
    assert own and not any(vault.has_blob(s) for s in own)
    assert _damaged(root) == []  # was: backup_damaged, "backup of r1/... is missing", per released file
    assert own <= set(m1.get("released") or [])  # recorded as let go, not lost
    preview = api.purge(root, yes=False)
    assert [k for k in preview.kept if k["run"] == "r1"] == []  # was: kept, backup_damaged
    assert "r1" in [o["run"] for o in preview.ops]
    done = api.purge(root, yes=True, runs=["r1"])
    assert [k for k in done.kept if k["run"] == "r1"] == [] and [o["run"] for o in done.ops] == ["r1"]
    assert done.originals_lost == 0
    assert vault.has_blob(shared)  # r0 still claims it
    assert _damaged(root) == []
    # the other operation is whole: restored byte for byte
    want = _tree(root, "r0")
    (op0,) = before_r0
    for f in before_r0[op0]["files"]:
        assert vault.check_blob(f["sha256"])
    outs = api.restore(root, run="r0")
    assert [o.status for o in outs] == [Outcome.RESTORED]
    got = _tree(root, "r0")
    for f in before_r0[op0]["files"]:
        with open(os.path.join(root, f["path"]), "rb") as fh:
            assert hashlib.sha256(fh.read()).hexdigest() == f["sha256"]
    assert {k for k in want if k in got and want[k] != got[k]} == set()
    assert _damaged(root) == []
    assert not vault.has_blob(shared)  # no operation claims it any more: released
    assert all(m.get("backup_purged") for m in vault.manifests() if m["kind"] == "reduce")


def _write_steps(run: str, timestamp: int, steps: range, hparams: Optional[dict] = None) -> None:
    """One event file of ``run`` written at ``timestamp``: ``hparams`` (with metric ``acc``) when
    given, a ``weights`` histogram at each of ``steps`` and, every 50 steps, ``acc`` = step / ``steps.stop``."""
    with sp.EventWriter(run, timestamp=timestamp) as w:
        if hparams:
            w.hparams(hparams, ["acc"])
        for s in steps:
            w.histogram("weights", s, [(k, k + 1, (k * s) % 5) for k in range(8)])
            if s % 50 == 0:
                w.scalar("acc", s, s / steps.stop)


def _reduced_twice(tmp_path, monkeypatch) -> str:
    """r0 reduced (its event file rewritten), a second event file written, r0 reduced again:
    the second reduction backs up the first one's output (small, packed)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = str(tmp_path / "logdir")
    run = os.path.join(root, "r0")
    _write_steps(run, 1795990000, range(300), hparams={"lr": 0.1})
    sp.age(root)
    rep = api.reduce_logdir(root, policy=ARCHIVE, dry_run=False, vault_format="compressed")
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED]
    _write_steps(run, 1795990500, range(300, 400))
    sp.age(root)
    rep = api.reduce_logdir(root, policy=ARCHIVE, dry_run=False, vault_format="compressed")
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED]
    return root


def test_a_run_reduced_twice_and_restored_in_one_command_leaves_no_pack_and_no_damage(tmp_path, monkeypatch):
    root = _reduced_twice(tmp_path, monkeypatch)
    vault = Vault(state_dir(root))
    ops = sorted((m for m in vault.manifests() if m["kind"] == "reduce"), key=lambda m: m["started_at"])
    assert len(ops) == 2
    first, second = ops
    outputs = {(c["path"], c["sha256"]) for c in first["created"]}
    carried = [f for f in second["files"] if (f["path"], f["sha256"]) in outputs]
    assert carried and all(vault.blob_form(f["sha256"]) == "packed" for f in carried)  # the case
    outs = api.restore(root)
    assert [o.status for o in outs] == [Outcome.RESTORED] * 2
    for f in first["files"]:
        with open(os.path.join(root, f["path"]), "rb") as fh:
            assert hashlib.sha256(fh.read()).hexdigest() == f["sha256"]
    assert not any(vault.has_blob(f["sha256"]) for m in ops for f in m["files"])  # was: the packed one, for good
    data = os.path.join(state_dir(root), "packs", "data")
    assert [n for _d, _s, fs in os.walk(data) for n in fs] == []
    assert all(m.get("backup_purged") for m in vault.manifests() if m["kind"] == "reduce")
    assert _damaged(root) == []
    api.purge(root, yes=True)
    api.recover_logdir(root)
    assert _damaged(root) == []


def test_a_purge_counts_as_lost_only_the_originals_whose_blob_went(tmp_path, monkeypatch):
    """A transaction under way pins a blob of the purged operation between the plan and the
    deletes (R11 F7: ``conc2.py``): it is kept, reported kept, and its original is not lost."""
    root = _shared_runs(tmp_path, monkeypatch, "hardlink", runs=("r0",))
    vault = Vault(state_dir(root))
    (m,) = [m for m in vault.manifests() if m["kind"] == "reduce"]
    assert len(m["files"]) == 2
    pinned = m["files"][0]["sha256"]

    def pin():
        with vault._blob_lock(pinned, wait=True):
            vault.pin_blob("20990101T000000-abcdef", pinned)
    faults.arm("purge.intent", pin)
    try:
        rep = api.purge(root, yes=True)
    finally:
        faults.disarm_all()
    assert [k["sha256"] for k in rep.kept] == [pinned]
    assert vault.has_blob(pinned)
    assert rep.originals_lost == 1  # was 2: the pinned blob's original was counted as lost
