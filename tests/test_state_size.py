"""What the vault keeps per reduced run beyond its backups (issue 28 item 2): a manifest keeps its
plan's actions as per-category totals and a digest, not the actions themselves (``files`` and
``removed_dirs`` list what was done, path by path); the check page's bytes per category are the
same from either."""
import glob
import hashlib
import json
import os

from tb_footprint_plugin import api
from tb_footprint_plugin.engine.catalogue import stored_plan
from tb_footprint_plugin.plan.summary import category_changes
from tb_footprint_plugin.storage.paths import state_dir

from helpers_runs import aged_small_runs  # aged past the quiet period


def _logged_line(vault_root: str, op_id: str) -> bytes:
    """The first line of the operation log that records ``op_id``'s manifest in full."""
    from tb_footprint_plugin.engine import oplog

    from tb_footprint_plugin.storage import zst

    for p in sorted(glob.glob(os.path.join(oplog.segments_dir(vault_root), "*"))):
        with open(p, "rb") as f:
            text = f.read() if p.endswith(".jsonl") else zst.open_decompressed(f).read()  # a batch's end seals it
        for line in text.splitlines(keepends=True):
            if line.startswith(b'{"op":"%s"' % op_id.encode()) and b'"type":"manifest"' in line:
                return line
    raise AssertionError(f"no record of {op_id}")


def test_a_manifest_keeps_its_plans_actions_as_totals_and_a_digest(tmp_path, monkeypatch):
    """Before, each manifest of a small run held its plan's four actions whole (~700 of its ~3,400
    bytes) beside ``files`` and ``removed_dirs`` that list the same paths: now the per-category
    totals the check page shows and the sha256 of the actions, and the manifest is under 2,900 bytes."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    logdir = aged_small_runs(tmp_path / "logdir", 4)
    plans = {rp.run: rp for rp in api.plan(logdir, "archive").runs}
    rep = api.reduce_logdir(logdir, policy="archive", dry_run=False)
    assert [o.status for o in rep.outcomes] == ["verified"] * 4
    from tb_footprint_plugin.engine.vault import Vault

    ms = Vault(state_dir(logdir)).manifests()
    assert len(ms) == 4 and not glob.glob(os.path.join(state_dir(logdir), "ops", "*.json"))
    for m in ms:
        size = len(_logged_line(state_dir(logdir), m["op_id"]))  # its record in the operation log
        assert size < 2900, size
        plan = m["plan"]
        assert "actions" not in plan and "run" not in plan and "removable_bytes" not in plan
        actions = plans[m["run"]].to_dict()["actions"]
        assert plan["actions_sha256"] == hashlib.sha256(
            json.dumps(actions, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
        # what the check page shows: the same bytes per category as the plan's own actions give
        full = plans[m["run"]].to_dict()
        assert category_changes(plan, {}) == category_changes(full, {})
        assert any(c["name"] == "profile_xplane" and c["after"] == 0 for c in category_changes(plan, {}))
        # what restore needs is all there, path by path
        assert {f["path"] for f in m["files"]} == {a["path"] for a in actions if a["kind"] == "delete"}
        assert {d["path"] for d in m["removed_dirs"]} <= {a["path"] for a in actions if a["kind"] == "remove_dir"}
    # and every run comes back
    outs = api.restore(logdir)
    assert outs and all(o.status == "restored" for o in outs)


def test_a_rewritten_event_files_categories_keep_their_own_bytes_in_the_totals():
    """A rewrite action's per-category split survives into the manifest's totals (the file's
    framing stays in "everything else"), and an older manifest with whole actions reads the same."""
    plan = {"run": "r", "bytes_before": 1000, "expected_after_bytes": 600, "fidelity": ["x"],
            "actions": [{"kind": "rewrite", "path": "r/events.out.tfevents.1", "category": "histograms",
                         "bytes_before": 900, "bytes_after": 500, "reason": "thin",
                         "categories": {"histograms": [700, 320], "images": [150, 130], "scalars": [40, 40]}},
                        {"kind": "delete", "path": "r/x.pb", "category": "profile_xplane", "bytes_before": 100,
                         "bytes_after": 0, "reason": "p"},
                        {"kind": "remove_dir", "path": "r/plugins", "category": "plugin_assets", "bytes_before": 0,
                         "bytes_after": 0, "reason": "only if empty"}]}
    kept = stored_plan(plan)
    assert kept["changes"] == {"histograms": [700, 320, 1], "images": [150, 130, 1],
                               "profile_xplane": [100, 0, 1], "plugin_assets": [0, 0, 0]}
    assert category_changes(kept, {}) == category_changes(plan, {})
    assert category_changes(kept, {})[-1] == {"name": "_unchanged", "label": "everything else (unchanged)",
                                              "before": 50, "after": 50, "files": 0}
    # read back from disk: a malformed total is left out, never guessed
    assert [c["name"] for c in category_changes(dict(kept, changes={"images": "x"}), {})] == ["_unchanged"]


def test_the_oplog_leaves_out_what_follows_and_the_reader_puts_it_back(tmp_path, monkeypatch):
    """A backup's blob is the one its digest names, its float mtime is its mtime_ns, the plan
    checks repeat the fidelity lines: the log (a manifest's only record) does not repeat them, and
    the manifest read back has them all. A blob name that is not its digest's is logged as it is."""
    from tb_footprint_plugin.engine import oplog
    from tb_footprint_plugin.engine.vault import Vault

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    logdir = aged_small_runs(tmp_path / "logdir", 1)
    o = api.reduce_logdir(logdir, policy="archive", dry_run=False).outcomes[0]
    vault = Vault(state_dir(logdir))
    m = vault.read_manifest(o.op_id)
    assert m["files"] and all(f["blob"] == f"blobs/{f['sha256'][:2]}/{f['sha256']}" for f in m["files"])
    assert all(f["mtime"] == f["mtime_ns"] / 1e9 for f in m["files"])
    assert [c["detail"] for c in m["verification"]["checks"] if c["name"] == "plan"] == m["plan"]["fidelity"]
    first = json.loads(_logged_line(vault.root, o.op_id))["manifest"]
    assert not any("blob" in f or "mtime" in f for f in first["files"]) and "vault" not in first
    assert not [c for c in first["verification"]["checks"] if c["name"] == "plan"]
    assert oplog.derived(oplog._loggable(m)) == {k: v for k, v in m.items() if k != "vault"}
    odd = dict(m, files=[dict(m["files"][0], blob="blobs/elsewhere")])
    assert oplog._loggable(odd)["files"][0]["blob"] == "blobs/elsewhere"
