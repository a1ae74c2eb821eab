"""One start reads the manifests once (issue #26, H2 item 3).

Every start (``api.recover_logdir``: the CLI's changing verbs, the tab at load) settles journals,
then releases backups a restore kept on doubt, then records runs a dead worker's ledger left in
flight. Each of these looked at every manifest on its own: the recovery (for salvage), the
release of kept restores, and the stale-ledger settling. With 200 operations in the vault each
look reads 200 manifests from the operation log; one start now takes one look, shared.
"""
import os
import subprocess
import sys
import time

from tb_footprint_plugin import api
from tb_footprint_plugin.engine.ledger import ledger_path, load_ledger
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.paths import state_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N_OPS = 200


def _manifest(logdir: str, vault: Vault, i: int) -> dict:
    return {"op_id": f"20260101T{i // 3600:02d}{i // 60 % 60:02d}{i % 60:02d}-{i:06x}", "kind": "reduce",
            "run": f"run{i}", "logdir": logdir, "vault": vault.root, "files": [], "created": [],
            # committed after the in-flight mark below (a worker killed between its commit and "done")
            "outcome": "verified", "started_at": 4e9 + i, "finished_at": 4e9 + i + 0.5,
            "bytes_before": 100, "bytes_after": 40, "host": None}


def _logdir_with_ops(tmp_path) -> str:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    base = os.path.realpath(str(logdir))
    vault = Vault(state_dir(base))
    vault.ensure()
    for i in range(N_OPS):
        vault.write_manifest(_manifest(base, vault, i))
    vault.seal_log()
    return base


def _dead_worker_in_flight(base: str, run: str, path: str = "") -> None:
    """A ledger entry ``reducing`` for ``run``, written by a process that is gone (a killed worker)."""
    code = ("import sys; from tb_footprint_plugin.engine.ledger import Ledger\n"
            "b = Ledger(sys.argv[1], 'archive', sys.argv[2]); b.start([sys.argv[3]])\n"
            "b.mark(sys.argv[3], 'reducing', original_size_bytes=100)\n")
    subprocess.run([sys.executable, "-c", code, path or ledger_path(state_dir(base)), base, run], check=True,
                   cwd=ROOT)


def _count_reads(monkeypatch) -> list:
    calls = []
    real = Vault.manifests

    def counted(self):
        calls.append(self.root)
        return real(self)

    monkeypatch.setattr(Vault, "manifests", counted)
    return calls


def test_a_start_reads_the_manifests_once_and_settles_a_dead_workers_ledger(tmp_path, monkeypatch):
    base = _logdir_with_ops(tmp_path)
    api.recover_logdir(base)  # the first start after the writes: identity and the like settled
    _dead_worker_in_flight(base, "run7")
    calls = _count_reads(monkeypatch)
    t = time.perf_counter()
    api.recover_logdir(base)
    elapsed = time.perf_counter() - t
    print(f"\nstart over {N_OPS} operations + a stale ledger: {len(calls)} manifest read(s), {elapsed:.3f} s")
    assert len(calls) == 1, calls
    data, _problems = load_ledger(ledger_path(state_dir(base)), base)
    # the stale entry was settled from the same look at the manifests
    assert data["runs"]["run7"]["state"] == "done", data["runs"]["run7"]
    assert data["runs"]["run7"]["op_id"] == _manifest(base, Vault(state_dir(base)), 7)["op_id"]


def test_a_start_with_nothing_stale_reads_the_manifests_once(tmp_path, monkeypatch):
    base = _logdir_with_ops(tmp_path)
    api.recover_logdir(base)
    calls = _count_reads(monkeypatch)
    api.recover_logdir(base)
    assert len(calls) == 1, calls


def test_a_reduce_with_its_own_ledger_settles_a_dead_workers_entry_in_it(tmp_path):
    """A custom ``--ledger PATH`` is not one a start knows of: the reduce that names it settles it,
    as a start settles the default ones (the run committed, the worker died before "done")."""
    base = _logdir_with_ops(tmp_path)
    custom = os.path.join(base, "my-ledger.json")
    _dead_worker_in_flight(base, "run7", custom)
    api.reduce_logdir(base, dry_run=False, ledger=custom, quiet_period=0)
    data, _problems = load_ledger(custom, base)
    assert data["runs"]["run7"]["state"] == "done", data["runs"]["run7"]
    assert data["runs"]["run7"]["op_id"] == _manifest(base, Vault(state_dir(base)), 7)["op_id"]
