"""The missing-manifest rule (review R26 F1, ``catalogue.missing_manifests``) is asked at every run of
a batch (each release, rollback and compaction reads ``journal_blobs``): each operation the change log
names is looked for in the vaults once per command, not once per run — with many reductions in the
log a batch of many runs would look ops x runs times (and bring the operation index up to date at
each look)."""
import os
import time

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine.vault_manifests import VaultManifests

DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


def _runs(root, names):
    old = time.time() - 7200
    for i, n in enumerate(names):
        run = root / n
        with synth.EventWriter(str(run)) as w:
            w.scalar("loss", 0, 1.0)
        synth.write_profile_session(str(run), n_events=50, with_caches=False, seed=i)
    for p in root.rglob("*"):
        os.utime(p, (old, old))


def test_a_batch_looks_for_each_logged_operations_manifest_once(tmp_path, monkeypatch):
    logdir = tmp_path / "logs"
    first = [f"a{i}" for i in range(6)]
    _runs(logdir, first)
    outs = api.reduce_logdir(str(logdir), policy=DROP, dry_run=False, verify_backends=("python",)).outcomes
    assert [o.status for o in outs] == [Outcome.VERIFIED] * 6, [o.reason for o in outs]
    _runs(logdir, [f"b{i}" for i in range(6)])
    looks = []
    real = VaultManifests.has_manifest
    monkeypatch.setattr(VaultManifests, "has_manifest", lambda self, op: looks.append(op) or real(self, op))
    outs = api.reduce_logdir(str(logdir), policy=DROP, dry_run=False, verify_backends=("python",),
                             runs=[f"b{i}" for i in range(6)]).outcomes
    assert [o.status for o in outs] == [Outcome.VERIFIED] * 6, [o.reason for o in outs]
    # the six logged operations, each once (and the batch's own, once each as their lines land)
    assert len(looks) == len(set(looks)) and len(looks) <= 12, sorted(looks)
