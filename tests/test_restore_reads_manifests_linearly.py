"""A restore of many runs reads the manifests O(N) times, not O(N²) (issues #27 item 5, #28).

Each run's restore read every manifest of the vault five times again: its checks (a newer
reduction? a retirement?) and, under the blob locks of its release, the claims of every other
operation (twice) and the restored operations left with no blob. Those reads now go through
one memo per call (``vault.ManifestMemo``): a manifest is parsed again only when its records
changed. The release still decides on the manifests of now: one committed or changed by
another process meanwhile is read under the locks, and its claim keeps the blob.
"""
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.paths import state_dir

from helpers_runs import aged_small_runs, count_manifest_reads

N = 30


def _reduced(tmp_path, monkeypatch, n: int) -> str:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    logdir = aged_small_runs(tmp_path / "logdir", n)
    rep = api.reduce_logdir(logdir, policy="archive", dry_run=False)
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED] * n
    return logdir


def test_restore_of_every_run_reads_each_manifest_a_few_times(tmp_path, monkeypatch):
    logdir = _reduced(tmp_path, monkeypatch, N)
    reads = count_manifest_reads(monkeypatch)
    outs = api.restore(logdir)
    assert [o.status for o in outs] == [Outcome.RESTORED] * N
    # before: ~5 full reads per run (30 runs: 5,490 reads); now a few passes of the call's and
    # each run's own two changed states (its reduction restored, the restore's manifest)
    assert reads[0] <= 12 * N, reads[0]
    # and every backup freed by the restores' releases, as before
    ms = Vault(state_dir(logdir)).manifests()
    assert all(m.get("backup_purged") for m in ms if m.get("kind") == "reduce")


def _extra_claim(vault: Vault, sha: str, size: int, claimant: dict) -> None:
    """``claimant`` (another reduction of the vault) now also claims blob ``sha`` (a reduce of
    identical bytes committed by another process while the restore ran)."""
    m = vault.read_manifest(claimant["op_id"])
    m["files"] = list(m["files"]) + [{**m["files"][0], "path": m["files"][0]["path"] + ".twin",
                                      "sha256": sha, "size": size}]
    vault.write_manifest(m)


def _hook_second_release(monkeypatch, vault_root: str, act) -> dict:
    """Call ``act(vault, candidates)`` just before the second run's release takes its blob locks
    (after the call's memo holds every manifest) — or, for packed backups, before the release
    of every run's pack copies together at the end of the call (``restore.Releases``); record
    what that release freed and whether the first candidate is still held right after it."""
    seen = {"calls": 0, "shas": None}

    def hook(name: str, at_call: int):
        real = getattr(Vault, name)

        def hooked(self, shas, needed, *a, **kw):
            seen["calls"] += 1
            if seen["shas"] is not None or seen["calls"] < at_call:
                return real(self, shas, needed, *a, **kw)
            shas = sorted(shas)
            seen["shas"] = shas
            act(Vault(vault_root), shas)
            out = real(self, shas, needed, *a, **kw)
            seen["freed"] = dict(out)
            seen["held"] = Vault(vault_root).has_blob(shas[0])
            return out
        monkeypatch.setattr(Vault, name, hooked)

    hook("delete_blobs", 2)
    hook("forget_packed_released", 1)
    return seen


def _size_of(vault: Vault, sha: str) -> int:
    for m in vault.manifests():
        for f in m.get("files", []):
            if f["sha256"] == sha:
                return f["size"]
    raise AssertionError(sha)


def test_release_sees_a_manifest_changed_meanwhile(tmp_path, monkeypatch):
    """A manifest the memo holds, changed after it was read, is read again under the locks."""
    logdir = _reduced(tmp_path, monkeypatch, 4)
    root = state_dir(logdir)
    before = Vault(root).manifests()

    def act(vault, shas):
        # the oldest reduction is restored last: still kept now, and the memo holds it
        op = min(before, key=lambda m: (m["started_at"], m["op_id"]))
        assert shas[0] not in {f["sha256"] for f in op["files"]}
        m = vault.read_manifest(op["op_id"])
        m["files"] = list(m["files"]) + [{**m["files"][0], "path": m["files"][0]["path"] + ".twin",
                                          "sha256": shas[0], "size": _size_of(vault, shas[0])}]
        vault.write_manifest(m)
    seen = _hook_second_release(monkeypatch, root, act)
    api.restore(logdir)
    assert seen["shas"]
    assert seen["freed"][seen["shas"][0]] == 0 and seen["held"], \
        "a blob a manifest changed meanwhile claims was released"


def test_release_keeps_a_blob_a_new_manifest_claims(tmp_path, monkeypatch):
    """A reduction committed meanwhile (an op id the memo never saw) keeps the blob it claims."""
    logdir = _reduced(tmp_path, monkeypatch, 4)
    root = state_dir(logdir)

    def act(vault, shas):
        model = vault.manifests()[0]
        m = {k: v for k, v in model.items() if k != "vault"}
        m["op_id"] = "20990101T000000-abcdef"
        m["files"] = [{**model["files"][0], "sha256": shas[0], "size": _size_of(vault, shas[0])}]
        vault.write_manifest(m)
    seen = _hook_second_release(monkeypatch, root, act)
    api.restore(logdir)
    assert seen["shas"]
    assert seen["freed"][seen["shas"][0]] == 0 and seen["held"], \
        "a blob a manifest committed meanwhile claims was released"
