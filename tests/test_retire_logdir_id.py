"""Retire and unretire journals and manifests are bound to their logdir by its identity (the
state's ``identity.json`` id), as a reduce's and a restore's already were; a state folder copied
from another logdir is refused by retire before anything moves."""
import json
import os
import shutil
import time
from pathlib import Path

from tb_footprint_plugin import api, synth

OLD = time.time() - 7 * 86400


def _logdir(root: Path) -> Path:
    for name in ("a", "b"):
        with synth.EventWriter(str(root / name)) as w:
            for step in range(5):
                w.scalar("loss", step, 1.0 / (step + 1))
    for dirpath, _dirs, files in os.walk(root):
        for n in files:
            os.utime(os.path.join(dirpath, n), (OLD, OLD))
    return root


def _identity(logdir: Path) -> str:
    return json.loads((logdir / ".tb-footprint" / "identity.json").read_text())["id"]


def _manifests(logdir: Path) -> dict:
    return {m["op_id"]: m for m in api.operations(str(logdir))}


def test_retire_and_unretire_records_and_manifests_carry_the_logdir_id(tmp_path, monkeypatch):
    logdir = _logdir(tmp_path / "logdir")
    begins = []
    from tb_footprint_plugin.engine import journal as journal_mod
    real_create = journal_mod.Journal.create.__func__

    def spy(cls, journal_dir, op_id, first):
        begins.append(first)
        return real_create(cls, journal_dir, op_id, first)
    monkeypatch.setattr(journal_mod.Journal, "create", classmethod(spy))
    rep = api.retire(str(logdir), api.retire_rule(runs=["a"]), dry_run=False)
    assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
    outs = api.restore(str(logdir), run="a")
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    ident = _identity(logdir)
    kinds = {b["kind"]: b for b in begins}
    assert set(kinds) >= {"retire", "unretire"}
    assert kinds["retire"]["logdir_id"] == ident and kinds["unretire"]["logdir_id"] == ident
    ms = [m for m in _manifests(logdir).values() if m.get("run") == "a"]
    assert {m["kind"] for m in ms} == {"retire", "restore"}
    assert all(m.get("logdir_id") == ident for m in ms), ms


def test_retire_refuses_a_state_folder_copied_from_another_logdir(tmp_path):
    first = _logdir(tmp_path / "first")
    rep = api.retire(str(first), api.retire_rule(runs=["a"]), dry_run=False)
    assert [o.status for o in rep.outcomes] == ["verified"]
    second = _logdir(tmp_path / "second")
    shutil.copytree(first / ".tb-footprint", second / ".tb-footprint", symlinks=True)
    before = sorted(p.relative_to(second).as_posix() for p in (second / "b").rglob("*"))
    rep = api.retire(str(second), api.retire_rule(runs=["b"]), dry_run=False)
    [o] = rep.outcomes
    assert (o.status, o.code) == ("failed", "refused"), rep.to_dict()
    assert "identity.json" in o.reason and "another" in o.reason, o.reason
    # nothing moved: the run is where it was, and no retirement of it was recorded
    assert sorted(p.relative_to(second).as_posix() for p in (second / "b").rglob("*")) == before
    assert not [p for p in (second / ".tb-footprint" / "retired").iterdir()
                if p.name not in {q.name for q in (first / ".tb-footprint" / "retired").iterdir()}]
