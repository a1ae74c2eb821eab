"""A local ``status`` and a batch's end read each manifest once (issue #28).

``status`` lists the operations, checks the catalogue (every blob a manifest claims), counts what
a purge would free (purge's own rule) and names each vault's problems: it made six passes over the
manifests, each reading every one again through ``Vault.read_manifest``. A reduce's batch end
counted what a purge would free with two (its own list, then the blobs every manifest claims).
One read is now handed to every pass (``catalogue.read_vaults``); the batch end's is slim: it
holds no manifest's verification (the series the check page draws), whatever the run count.
"""
import copy

from tb_footprint_plugin import api
from tb_footprint_plugin.engine import oplog, purge
from tb_footprint_plugin.engine.catalogue import own_manifests, read_vaults
from tb_footprint_plugin.engine.front_local import local_context
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.paths import state_dir

from helpers_runs import aged_small_runs, count_manifest_reads

N = 50


def test_status_reads_each_manifest_once(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    logdir = aged_small_runs(tmp_path / "logdir", 2)
    rep = api.reduce_logdir(logdir, policy="archive", dry_run=False)
    assert [o.status for o in rep.outcomes] == ["verified"] * 2
    vault = Vault(state_dir(logdir))
    model = vault.manifests()[0]
    for i in range(N):  # N more verified operations of this logdir, as a long history leaves them
        m = copy.deepcopy(model)
        m.pop("vault", None)
        m["op_id"] = f"20260101T00{i // 60:02d}{i % 60:02d}-{i:06x}"
        vault.write_manifest(m)
    vault.seal_log()
    oplog._INDEXES.clear()  # a fresh process's status

    reads = count_manifest_reads(monkeypatch)
    st = api.status(logdir)

    assert len(st["operations"]) == N + 2
    assert not st["problems"], st["problems"]
    assert st["freed_after_purge_bytes"] > 0  # the count that read them twice more is still made
    assert reads[0] <= N + 2, reads[0]  # six passes read each one six times before

    # the tab's header numbers: the same count, from one read (three before)
    reads[0] = 0
    numbers = api.disk_numbers(logdir)
    assert numbers["freed_after_purge_bytes"] == st["freed_after_purge_bytes"]
    assert reads[0] <= N + 2, reads[0]


def test_a_batch_end_reads_each_manifest_once_and_holds_no_verification(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    logdir = aged_small_runs(tmp_path / "logdir", 3)
    reads = count_manifest_reads(monkeypatch)
    held = []
    real_manifests = Vault.manifests

    def manifests(self, *a, **kw):
        out = real_manifests(self, *a, **kw)
        held.append(out)
        return out
    monkeypatch.setattr(Vault, "manifests", manifests)
    at_last = [0]
    rep = api.reduce_logdir(logdir, policy="archive", dry_run=False,
                            on_outcome=lambda o: (at_last.__setitem__(0, reads[0]), held.clear()))
    assert [o.status for o in rep.outcomes] == ["verified"] * 3
    assert reads[0] - at_last[0] <= 3, reads[0] - at_last[0]  # twice each before
    # what the batch end read of them: no verification held, every run's count the same
    assert held and all("verification" not in m for ms in held for m in ms)
    ctx = local_context(logdir, None)
    full = own_manifests(ctx)
    assert all(m.get("verification") for m in full)
    ops = [m["op_id"] for m in full]
    assert rep.freed_on_disk_after_purge_bytes == purge.freeable_bytes(ctx, ops, read_vaults(ctx)) > 0
