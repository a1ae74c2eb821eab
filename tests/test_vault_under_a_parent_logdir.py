"""A vault kept inside a folder that is later reduced as a whole is no set of runs (G7's class).

``reduce /logs/exp1 --backup-dir /logs/vault``, then one day ``reduce /logs``: the vault's retired
runs (``retired/<op>/<run>/``: event files and profile sessions, keyed like runs) were runs of
``/logs``. The parent's reduce took their profile data into its own vault (the retirement's tree then
no longer matched: the unretire refused it as damaged), and the parent's purge destroyed the only
copies. On a bucket, a vault prefix of server-side copies (``manifests/``, ``blobs/<run>/...``)
under the parent prefix was the same. The scan now leaves out any folder shaped like a vault (its
manifests folder holding a manifest beside its blobs or retired runs) and says so; a user's
folder named like one but holding no manifest stays a run."""
import os

import pytest

from helpers_runs import read_tree, write_loss_run
from tb_footprint_plugin import api

OLD = 1_600_000_000
DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


def _aged(root):
    for d, _dirs, files in os.walk(root):
        for n in files:
            os.utime(os.path.join(d, n), (OLD, OLD))


def _runs(logdir):
    return {r.name for r in api.scan(str(logdir), write_cache=False).runs}


def test_a_disk_vault_inside_a_parent_logdir_is_left_out_and_restores_whole(tmp_path):
    top = tmp_path / "logs"
    for name, seed in (("a", 1), ("b", 2), ("c", 3)):
        write_loss_run(top / "exp1" / name, seed=seed)
    _aged(top)
    vault = str(top / "vault")
    before = read_tree(str(top / "exp1"))
    exp1 = str(top / "exp1")
    rep = api.reduce_logdir(exp1, policy=DROP, dry_run=False, quiet_period=0, backup_dir=vault, runs=["a"],
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]
    rep = api.retire(exp1, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0, backup_dir=vault)
    assert [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]

    fp = api.scan(str(top), write_cache=False)
    assert {r.name for r in fp.runs} == {"exp1/a", "exp1/c"}, sorted(r.name for r in fp.runs)
    assert any(w.startswith("a vault at vault") and "left out" in w for w in fp.warnings), fp.warnings
    rep = api.reduce_logdir(str(top), policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",))
    assert {o.run for o in rep.outcomes if o.status == "verified"} == {"exp1/c"}, [o.to_dict() for o in rep.outcomes]
    assert api.purge(str(top), yes=True).ops  # the parent's own backup of exp1/c: nothing of the vault's

    outs = api.restore(exp1, backup_dir=vault)
    assert sorted(o.status for o in outs) == ["restored", "restored"], [o.to_dict() for o in outs]
    def runs_a_b(tree):  # exp1/c was reduced by the parent since; the state folder is the tool's
        return {k: v for k, v in tree.items() if k.startswith(("a/", "b/"))}

    assert runs_a_b(read_tree(exp1)) == runs_a_b(before) and runs_a_b(before)


def test_a_users_folder_named_like_a_vault_stays_a_run(tmp_path):
    top = tmp_path / "logs"
    write_loss_run(top / "sweep" / "blobs", seed=4)  # "ops" and "blobs" runs: no manifest, no vault
    write_loss_run(top / "sweep" / "ops", seed=5)
    (top / "sweep" / "ops" / "notes.json").write_text("{}")
    assert _runs(top) == {"sweep/blobs", "sweep/ops"}


def test_a_bucket_vault_prefix_inside_a_parent_prefix_is_left_out(s3_bucket, tmp_path):
    src = tmp_path / "src"
    for name, seed in (("a", 1), ("c", 3)):
        write_loss_run(src / "exp1" / name, seed=seed)
    _aged(src)
    s3_bucket.upload(src, "runs")
    exp1, vault, top = s3_bucket.url("runs/exp1"), s3_bucket.url("runs/vault"), s3_bucket.url("runs")
    rep = api.reduce_logdir(exp1, policy=DROP, dry_run=False, quiet_period=0, backup_dir=vault, runs=["a"],
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]
    fp = api.scan(top, write_cache=False)
    assert {r.name for r in fp.runs} == {"exp1/a", "exp1/c"}, sorted(r.name for r in fp.runs)
    assert any(w.startswith("a vault at vault") and "left out" in w for w in fp.warnings), fp.warnings
    rep = api.reduce_logdir(top, policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",))
    assert {o.run for o in rep.outcomes if o.status == "verified"} == {"exp1/c"}, [o.to_dict() for o in rep.outcomes]
    outs = api.restore(exp1, backup_dir=vault, run="a")
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
