"""A restore of many runs leaves its pack copies to one forget at its end (``engine.restore.Releases``):
what it holds until then is each operation's digests and its files' records, never the manifests
themselves (a manifest carries its verification summary, kilobytes to tens of kilobytes a run: a
restore of 100,000 runs would hold them all, #28's 'memory must not grow with run count')."""
import tracemalloc

from tb_footprint_plugin.engine.restore import Releases
from tb_footprint_plugin.engine.vault import Vault


def test_releases_keep_digests_not_manifests(tmp_path):
    vault = Vault(str(tmp_path / "vault"))
    rel = Releases()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(20):
            sha = f"{i:064x}"
            f = {"path": f"run{i}/plugins/profile/x.xplane.pb", "sha256": sha, "size": 10}
            manifest = {"op_id": f"op{i}", "files": [f],
                        "verification": {"series": "v" * 200_000 + str(i)}}  # 200 KB a manifest
            rel.add(vault, manifest, {sha: f}, keep=(), freed=10)
            del manifest
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert all(rel.defers(f"op{i}") for i in range(20))
    assert held < 1_000_000, held  # 20 manifests of 200 KB would be 4 MB
