"""An older version's manifest file (``ops/<op>.json``) beside the operation log (review W, S1,
S2): read when the log names the operation only on a damaged line, and removed once the log
holds a newer whole state of it, so a stale "verified" can never come back."""
import json
import os
import shutil

from tb_footprint_plugin import api, codes
from tb_footprint_plugin.engine import oplog
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.paths import state_dir

from helpers_runs import aged_small_runs


def _small_runs(root, first, n):
    """Runs ``first .. first+n-1`` of two scalar tags, a histogram and an xprof session, aged."""
    return aged_small_runs(root, n, first=first, tags=("loss", "accuracy"))


def _as_older_version(logdir) -> tuple:
    """The reduction's manifest as an older version kept it: its own file, no log segments."""
    vault = Vault(state_dir(logdir))
    (m,) = vault.manifests()
    os.makedirs(vault.ops, exist_ok=True)
    path = vault.manifest_path(m["op_id"])
    with open(path, "w") as f:
        json.dump({k: v for k, v in m.items() if k != "vault"}, f)
    shutil.rmtree(oplog.oplog_dir(vault.root))
    oplog._INDEXES.clear()
    return vault, m, path


def test_a_restore_of_an_older_versions_operation_removes_its_stale_file(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    logdir = _small_runs(tmp_path / "logdir", 0, 1)
    api.reduce_logdir(logdir, policy="archive", dry_run=False)
    vault, m, path = _as_older_version(logdir)
    assert [x["op_id"] for x in vault.manifests()] == [m["op_id"]]
    outs = api.restore(logdir, run="exp/run000")
    assert [o.status for o in outs] == [codes.Outcome.RESTORED]
    assert not os.path.exists(path)  # superseded by the log's state: no stale "verified" left
    # the log's record of it lost (both copies of every piece): the old file cannot stand in
    shutil.rmtree(oplog.oplog_dir(vault.root))
    oplog._INDEXES.clear()
    assert not [x for x in Vault(vault.root).manifests() if x.get("outcome") == "verified"
                and not x.get("restored_by")]


def test_an_older_versions_file_is_read_when_a_damaged_line_only_names_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    logdir = _small_runs(tmp_path / "logdir", 0, 1)
    api.reduce_logdir(logdir, policy="archive", dry_run=False)
    vault, m, path = _as_older_version(logdir)
    os.makedirs(oplog.segments_dir(vault.root), mode=0o700)
    with open(os.path.join(oplog.segments_dir(vault.root), "20260101T000000-1-abcd.jsonl"), "wb") as f:
        f.write(b'{"op":"' + m["op_id"].encode() + b'","type":"manifest", \xff garbage\n')
    oplog._INDEXES.clear()
    assert oplog.has_state(vault.root, m["op_id"])
    got = Vault(vault.root).read_manifest(m["op_id"])
    assert got["files"] == m["files"]
    outs = api.restore(logdir, run="exp/run000")
    assert [o.status for o in outs] == [codes.Outcome.RESTORED], [o.to_dict() for o in outs]
