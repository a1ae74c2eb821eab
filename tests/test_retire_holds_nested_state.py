"""A retirement never moves another logdir's state or vault out of the run that holds it (review R13 F5).

A run that is itself a logdir (``reduce logs/exp1`` earlier: its removed originals live only in
``exp1/.tb-footprint``), or one holding a vault another logdir was given as its ``--backup-dir``:
since R11 G7 the scan leaves those folders out, so the plan of ``retire logs exp1`` counted one file
of 138 bytes while the retirement moved nine of 53 kB, the nested logdir's vault, journals and
identity included, into this logdir's vault, whose purge then destroyed its only copies. The plan
now refuses such a run before the yes (``holds_nested_state``, naming the folder), and the engine
asks the same rule of the tree it would move (a plan made before the folder appeared)."""
import os

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import RetireSkip

DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}
OLD = 1_600_000_000


def _run(path, seed=0):
    with synth.EventWriter(str(path)) as w:
        w.scalar("loss", 0, 1.0 + seed)
    prof = path / "plugins" / "profile" / "2024_01_01_00_00_00"
    prof.mkdir(parents=True)
    (prof / "host.xplane.pb").write_bytes(os.urandom(50000))
    for root, _ds, fs in os.walk(path):
        for n in fs:
            os.utime(os.path.join(root, n), (OLD, OLD))


def _tree(root):
    out = {}
    for d, _ds, fs in os.walk(root):
        for n in fs:
            with open(os.path.join(d, n), "rb") as f:
                out[os.path.relpath(os.path.join(d, n), root)] = f.read()
    return out


def test_a_run_that_is_a_logdir_is_not_retired_with_its_backups(tmp_path):
    logs = tmp_path / "logs"
    exp1 = logs / "exp1"
    _run(exp1)
    before = _tree(exp1)
    rep = api.reduce_logdir(str(exp1), policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]

    fp = api.scan(str(logs), write_cache=False)
    (aside,) = fp.set_aside
    assert aside["path"] == "exp1/.tb-footprint" and aside["run"] == "exp1" and aside["code"] == "nested_state", aside
    assert fp.to_dict()["set_aside"] == [aside]
    (item,) = api.retire_plan(str(logs), api.retire_rule(runs=["exp1"]), quiet_period=0).items
    assert not item.selected and item.code == RetireSkip.HOLDS_STATE, item
    assert item.reason.startswith("holds exp1/.tb-footprint, another logdir's state or vault"), item.reason
    rep = api.retire(str(logs), api.retire_rule(runs=["exp1"]), dry_run=False, quiet_period=0)
    assert rep.outcomes == [] and (exp1 / ".tb-footprint").is_dir()
    # the nested logdir restores whole where it stands
    outs = api.restore(str(exp1))
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert {k: v for k, v in _tree(exp1).items() if not k.startswith(".tb-footprint")} == before


def test_the_engine_refuses_a_vault_that_appeared_after_the_plan(tmp_path):
    logs = tmp_path / "logs"
    _run(logs / "exp1" / "a")
    _run(logs / "old", seed=1)
    kept_scan = api.scan(str(logs), write_cache=False)  # the tab retires from the scan it keeps
    plan = api.retire_plan(str(logs), api.retire_rule(runs=["old"]), quiet_period=0)
    assert [i.run for i in plan.items if i.selected] == ["old"]
    # since the plan: another logdir's --backup-dir made inside the run, its backups there
    rep = api.reduce_logdir(str(logs / "exp1"), policy=DROP, dry_run=False, quiet_period=0,
                            backup_dir=str(logs / "old" / "vault"), verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]
    kept = _tree(logs / "old")
    rep = api.retire(str(logs), api.retire_rule(runs=["old"]), dry_run=False, quiet_period=0, footprint=kept_scan)
    (o,) = rep.outcomes
    assert o.status != "verified" and o.code == RetireSkip.HOLDS_STATE, o.to_dict()
    assert "old/vault: another logdir's state or vault inside the run" in o.reason, o.reason
    assert _tree(logs / "old") == kept and api.operations(str(logs)) == []
    assert [o.status for o in api.restore(str(logs / "exp1"), backup_dir=str(logs / "old" / "vault"))] == ["restored"]


def test_a_bucket_plan_refuses_a_run_holding_a_nested_logdirs_state(s3_bucket, tmp_path):
    src = tmp_path / "src"
    _run(src / "exp1")
    s3_bucket.upload(src, "runs")
    exp1, top = s3_bucket.url("runs/exp1"), s3_bucket.url("runs")
    rep = api.reduce_logdir(exp1, policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]
    (aside,) = api.scan(top, write_cache=False).set_aside
    assert aside["path"] == "exp1/.tb-footprint" and aside["run"] == "exp1", aside
    (item,) = api.retire_plan(top, api.retire_rule(runs=["exp1"]), quiet_period=0).items
    assert not item.selected and item.code == RetireSkip.HOLDS_STATE, item


def test_the_engine_refuses_a_vault_made_at_the_run_folder_itself(tmp_path):
    """Review R14 G2: ``--backup-dir`` given as an existing run folder makes it a vault's root; the
    disk engine's look skipped the run's own folder and moved that vault whole."""
    logs = tmp_path / "logs"
    _run(logs / "exp1" / "a")
    _run(logs / "old", seed=1)
    kept_scan = api.scan(str(logs), write_cache=False)
    rep = api.reduce_logdir(str(logs / "exp1"), policy=DROP, dry_run=False, quiet_period=0,
                            backup_dir=str(logs / "old"), verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]
    rep = api.retire(str(logs), api.retire_rule(runs=["old"]), dry_run=False, quiet_period=0, footprint=kept_scan)
    (o,) = rep.outcomes
    assert o.status != "verified" and o.code == RetireSkip.HOLDS_STATE, o.to_dict()
    assert [b.status for b in api.restore(str(logs / "exp1"), backup_dir=str(logs / "old"))] == ["restored"]


def test_a_bucket_retirement_refuses_a_nested_state_made_after_the_kept_scan(s3_bucket, tmp_path):
    """Review R14 G1: the bucket engine moved a nested logdir's state (its manifests and copies)
    into this logdir's vault when the plan came from a scan kept since (the tab's)."""
    src = tmp_path / "src"
    _run(src / "exp1")
    s3_bucket.upload(src, "runs")
    exp1, top = s3_bucket.url("runs/exp1"), s3_bucket.url("runs")
    kept_scan = api.scan(top, write_cache=False)
    rep = api.reduce_logdir(exp1, policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]
    rep = api.retire(top, api.retire_rule(runs=["exp1"]), dry_run=False, quiet_period=0, footprint=kept_scan)
    (o,) = rep.outcomes
    assert o.status != "verified" and o.code == RetireSkip.HOLDS_STATE, o.to_dict()
    assert "exp1/.tb-footprint: another logdir's state or vault inside the run" in o.reason, o.reason
    assert [b.status for b in api.restore(exp1)] == ["restored"]


def test_a_bucket_retirement_refuses_a_vault_of_copies_made_in_the_run(s3_bucket, tmp_path):
    src = tmp_path / "src"
    _run(src / "exp1")
    _run(src / "old", seed=1)
    s3_bucket.upload(src, "runs")
    exp1, top = s3_bucket.url("runs/exp1"), s3_bucket.url("runs")
    kept_scan = api.scan(top, write_cache=False)
    vault = s3_bucket.url("runs/old/vault")
    rep = api.reduce_logdir(exp1, policy=DROP, dry_run=False, quiet_period=0, backup_dir=vault,
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]
    rep = api.retire(top, api.retire_rule(runs=["old"]), dry_run=False, quiet_period=0, footprint=kept_scan)
    (o,) = rep.outcomes
    assert o.status != "verified" and o.code == RetireSkip.HOLDS_STATE, o.to_dict()
    assert "old/vault: another logdir's state or vault" in o.reason, o.reason
    assert [b.status for b in api.restore(exp1, backup_dir=vault)] == ["restored"]


def test_the_listing_rule_finds_what_the_scan_sets_aside():
    from tb_footprint_plugin.scan.set_aside import set_aside_in_listing

    assert set_aside_in_listing(["r/a.tfevents", "r/plugins/profile/s/h.xplane.pb"], "r") is None
    assert set_aside_in_listing(["r/x/.tb-footprint/manifests/m.json"], "r") == "r/x/.tb-footprint"
    assert set_aside_in_listing(["r/v/manifests/20261206T102617-fd2f8b.json", "r/v/blobs/o/f"], "r") == "r/v"
    assert set_aside_in_listing(["r/manifests/20261206T102617-fd2f8b.json", "r/blobs/o/f"], "r") == "r"
    # a user's folders named like a vault's, holding no record named as the tool names them
    assert set_aside_in_listing(["r/manifests/notes.json", "r/blobs/o/f"], "r") is None
