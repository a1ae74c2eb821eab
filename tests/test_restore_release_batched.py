"""A restore of many runs lets its pack copies go together at its end (issue #27 item 5).

Each run's release used to forget its packed backups at once: one ``BlobStore.forget`` a run,
each rewriting the pack index and repacking the packs it left half dead (a restore of 30
profile-heavy runs: 30 forgets, 4 repacks). ``restore.Releases`` now leaves the blobs held only
in packs to the end of the call and forgets them in one go, under the same rules: the pack lock,
the blobs' locks, the claims read afresh under them (a manifest, an unfinished operation, a pin,
a file in place that changed). A call stopped before that end leaves every restored operation
unreleased and its backups kept; the next start releases them.
"""
import os

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin import synth as sp
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine import restore as restore_mod
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage import blobstore
from tb_footprint_plugin.storage.files import matches
from tb_footprint_plugin.storage.paths import state_dir

DROP_PROFILES = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}
RUNS, FILES = 4, 6


def _profiled(tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = str(tmp_path / "logdir")
    for r in range(RUNS):
        run = os.path.join(root, f"run{r}")
        with sp.EventWriter(run) as w:
            for step in range(5):
                w.scalar("loss", step, 1.0 / (step + 1))
        session = os.path.join(run, "plugins", "profile", "2026_01_01_00_00_00")
        os.makedirs(session)
        for i in range(FILES):
            sp.write_xplane(os.path.join(session, f"host{i}.xplane.pb"), 20 + i * 5, seed=r * 100 + i)
    sp.age(root)
    rep = api.reduce_logdir(root, policy=DROP_PROFILES, dry_run=False)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED] * RUNS
    vault = Vault(state_dir(root))
    assert all(vault.blob_form(f["sha256"]) == "packed" for m in vault.manifests() for f in m["files"])
    return root


def _pack_files(root: str) -> list:
    data = os.path.join(state_dir(root), "packs", "data")
    return [n for _d, _s, fs in os.walk(data) for n in fs]


def test_a_restore_of_many_packed_runs_forgets_once_and_frees_every_pack(tmp_path, monkeypatch):
    root = _profiled(tmp_path, monkeypatch)
    assert _pack_files(root)
    calls = []
    real = blobstore.BlobStore.forget

    def counted(self, shas, **kw):
        calls.append(len(set(shas)))
        return real(self, shas, **kw)
    monkeypatch.setattr(blobstore.BlobStore, "forget", counted)
    outs = api.restore(root)
    assert [o.status for o in outs] == [Outcome.RESTORED] * RUNS
    assert calls == [RUNS * FILES]  # was one forget a run
    assert all("redundant copy freed" in o.reason for o in outs), [o.reason for o in outs]
    vault = Vault(state_dir(root))
    reduces = [m for m in vault.manifests() if m["kind"] == "reduce"]
    assert all(m.get("backup_purged") and m.get("backup_released_by_restore") for m in reduces)
    assert not any(vault.has_blob(f["sha256"]) for m in reduces for f in m["files"])
    assert _pack_files(root) == []  # every pack dead at once: deleted, none repacked


def _hook_finish(monkeypatch, act) -> dict:
    """Call ``act(vault, shas)`` right before the end-of-call release takes its locks."""
    seen = {}
    real = Vault.forget_packed_released

    def hooked(self, shas, needed, *a, **kw):
        shas = sorted(shas)
        act(self, shas)
        out = real(self, shas, needed, *a, **kw)
        seen.update(shas=shas, freed=dict(out))
        return out
    monkeypatch.setattr(Vault, "forget_packed_released", hooked)
    return seen


def test_a_file_changed_in_place_before_the_end_keeps_its_pack_copy(tmp_path, monkeypatch):
    """Restored early in the call and written to before its end: the pack copy is then the only
    copy of the original bytes, so it stays (the claims are read at the end, not at each run)."""
    root = _profiled(tmp_path, monkeypatch)
    vault = Vault(state_dir(root))
    first = min((m for m in vault.manifests() if m["kind"] == "reduce"), key=lambda m: m["run"])
    target = first["files"][0]

    def act(vault, shas):
        assert target["sha256"] in shas
        with open(os.path.join(root, target["path"]), "ab") as f:
            f.write(b"written after the restore")
    seen = _hook_finish(monkeypatch, act)
    outs = api.restore(root)
    assert all(o.status == Outcome.RESTORED for o in outs)
    assert seen["freed"][target["sha256"]] == 0
    assert vault.blob_form(target["sha256"]) == "packed"
    m = vault.read_manifest(first["op_id"])
    assert not m.get("backup_purged")  # it still claims its kept copy
    others = [x for x in vault.manifests() if x["kind"] == "reduce" and x["op_id"] != first["op_id"]]
    assert all(x.get("backup_purged") for x in others)


def test_a_pin_or_a_claim_made_before_the_end_keeps_the_blob(tmp_path, monkeypatch):
    root = _profiled(tmp_path, monkeypatch)
    op = "20990101T000000-abcdef"

    def act(vault, shas):
        vault.pin_blob(op, shas[0])  # a transaction under way relies on it
        m = {k: v for k, v in vault.manifests()[0].items() if k != "vault"}
        m.update(op_id="20990101T000001-abcdef",
                 files=[{**m["files"][0], "sha256": shas[1], "size": _size(vault, shas[1]),
                         "blob": f"blobs/{shas[1][:2]}/{shas[1]}"}])
        m.pop("restored_by"); m.pop("backup_purged")
        vault.write_manifest(m)  # a reduction of identical bytes committed meanwhile
    seen = _hook_finish(monkeypatch, act)
    outs = api.restore(root)
    assert all(o.status == Outcome.RESTORED for o in outs)
    vault = Vault(state_dir(root))
    for sha in seen["shas"][:2]:
        assert seen["freed"][sha] == 0 and vault.blob_form(sha) == "packed"
    assert all(seen["freed"][sha] for sha in seen["shas"][2:])


def _size(vault, sha):
    return next(f["size"] for m in vault.manifests() for f in m["files"] if f["sha256"] == sha)


def test_a_call_stopped_before_its_end_keeps_every_backup_and_the_next_start_releases_them(tmp_path, monkeypatch):
    root = _profiled(tmp_path, monkeypatch)

    def stop(self, ctx, memo=None):
        raise KeyboardInterrupt
    with monkeypatch.context() as mp:
        mp.setattr(restore_mod.Releases, "finish", stop)
        with pytest.raises(KeyboardInterrupt):
            api.restore(root)
    vault = Vault(state_dir(root))
    reduces = [m for m in vault.manifests() if m["kind"] == "reduce"]
    assert all(m.get("restored_by") and not m.get("backup_purged") for m in reduces)
    assert all(matches(os.path.join(root, f["path"]), f["sha256"], f["size"]) for m in reduces for f in m["files"])
    assert all(vault.check_blob(f["sha256"]) for m in reduces for f in m["files"])  # every copy kept
    api.recover_logdir(root)  # the next start
    vault = Vault(state_dir(root))
    reduces = [m for m in vault.manifests() if m["kind"] == "reduce"]
    assert all(m.get("backup_purged") for m in reduces)
    assert not any(vault.has_blob(f["sha256"]) for m in reduces for f in m["files"])
    assert all(matches(os.path.join(root, f["path"]), f["sha256"], f["size"]) for m in reduces for f in m["files"])


def test_many_lock_batches_still_make_one_forget_and_no_repack(tmp_path, monkeypatch):
    """The blobs' locks are taken a batch at a time (open files stay bounded), the forget is one:
    a forget a batch repacked every pack each left half dead (60x80 files: 71 repacks)."""
    root = _profiled(tmp_path, monkeypatch)
    real = Vault.forget_packed_released
    monkeypatch.setattr(Vault, "forget_packed_released",
                        lambda self, shas, needed, batch=256: real(self, shas, needed, batch=5))
    figs = []
    real_forget = blobstore.BlobStore.forget

    def counted(self, shas, **kw):
        figs.append(real_forget(self, shas, **kw))
        return figs[-1]
    monkeypatch.setattr(blobstore.BlobStore, "forget", counted)
    outs = api.restore(root)
    assert [o.status for o in outs] == [Outcome.RESTORED] * RUNS
    assert len(figs) == 1 and figs[0]["packs_repacked"] == 0 and figs[0]["forgotten"] == RUNS * FILES
    assert _pack_files(root) == []


def test_a_backup_stored_and_pinned_after_the_checks_keeps_its_own_copy(tmp_path, monkeypatch):
    """Between a batch's checks and the one forget only a transaction's store can touch a digest
    (packing and purges wait for the pack lock): it makes a plain copy of its own, never relies
    on the pack copy the forget drops."""
    root = _profiled(tmp_path, monkeypatch)
    vault = Vault(state_dir(root))
    m0 = min((m for m in vault.manifests() if m["kind"] == "reduce"), key=lambda m: m["run"])
    f0 = m0["files"][0]
    op = "20990101T000000-abcdef"
    real = Vault._forget_packed

    def late_store(self, shas):
        assert f0["sha256"] in shas
        self.store(os.path.join(root, f0["path"]), f0["sha256"], pin=op)  # a reduce of identical bytes
        return real(self, shas)
    monkeypatch.setattr(Vault, "_forget_packed", late_store)
    outs = api.restore(root)
    assert all(o.status == Outcome.RESTORED for o in outs)
    monkeypatch.undo()
    assert vault.pinned_by(f0["sha256"]) == [op]
    assert vault.local_form(f0["sha256"]) == "plain" and vault.check_blob(f0["sha256"])
