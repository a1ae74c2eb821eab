"""A disk's purge of retired runs keeps a restored retirement that left an original in the vault
(``not_restored``, #26): the restore found another file standing at that path, left it as it is,
and kept the retired copy ``files/<n>`` as the only copy of the original. The purge passes the
whole retirement over and lists it in ``kept`` with ``not_restored`` (the preview too), as a
bucket's purge does; before, the preview offered it as "restored" (its copy to delete) and a
confirmed purge passed it over without a word."""
import json
import os

import pytest

from helpers_cli import run_cli
from helpers_runs import write_notes_runs
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine.retire_tree import retired_dir
from tb_footprint_plugin.engine.vault import Vault

pytestmark = pytest.mark.usefixtures("disarm_faults")

STANDING = b"written at the path by someone else before the restore reached it\n"


def _restored_with_one_kept(logdir):
    """Runs ``a`` and ``b`` retired; ``a`` then left as a restore that met a file at ``a/notes.txt``
    leaves it: every other file back at its path and its ``files/<n>`` released, the standing
    file untouched, the original's ``files/<n>`` kept, the manifest marked restored with
    ``not_restored`` (its copy not purged). Returns (manifest, kept copy's path, its bytes)."""
    write_notes_runs(logdir, ("a", "b"))
    rep = api.retire(str(logdir), api.retire_rule(runs=["a", "b"]), dry_run=False, quiet_period=0)
    assert rep.ok, rep.to_dict()
    (op,) = [m["op_id"] for m in api.operations(str(logdir)) if m["kind"] == "retire" and m["run"] == "a"]
    vault = Vault(str(logdir / ".tb-footprint"))
    m = vault.read_manifest(op)
    d = retired_dir(vault, op)
    kept = None
    for d_ in sorted(m["dirs"], key=lambda e: e["path"].count("/")):
        os.makedirs(logdir / d_["path"], exist_ok=True)
    for i, f in enumerate(m["tree"]):
        stored = os.path.join(d, "files", str(i))
        if f["path"] == "a/notes.txt":
            (logdir / f["path"]).write_bytes(STANDING)
            kept = stored
        else:
            os.replace(stored, logdir / f["path"])
    assert kept is not None
    m.update(restored_by="20261205-000000-deadbeef", restored_at=m["finished_at"] + 1, not_restored=["a/notes.txt"],
             backup_purged=False)
    vault.write_manifest(m)
    with open(kept, "rb") as fh:
        return m, kept, fh.read()


def test_a_kept_original_of_a_restored_retirement_is_kept_by_purge_and_listed(tmp_path):
    logdir = tmp_path / "logs"
    m, kept, original = _restored_with_one_kept(logdir)
    assert original != STANDING
    preview = api.purge(str(logdir))
    assert m["op_id"] not in [o["op_id"] for o in preview.ops], preview.to_dict()
    (k,) = [k for k in preview.kept if k["op_id"] == m["op_id"]]
    assert (k["run"], k["kind"], k["code"]) == ("a", "retire", Finding.NOT_RESTORED), k
    assert "a/notes.txt" in k["detail"] and "only copy" in k["detail"], k
    assert k["bytes"] == len(original), k
    rep = api.purge(str(logdir), yes=True)
    assert [o["run"] for o in rep.ops] == ["b"], rep.to_dict()
    assert [(k["op_id"], k["code"]) for k in rep.kept] == [(m["op_id"], Finding.NOT_RESTORED)], rep.to_dict()
    with open(kept, "rb") as fh:
        assert fh.read() == original  # the only copy of a/notes.txt's original is still in the vault
    assert (logdir / "a" / "notes.txt").read_bytes() == STANDING
    assert api.recover_logdir(str(logdir)) == []
    assert os.path.exists(kept)
    # the CLI says it too, and a second purge keeps it again
    r = run_cli("purge", logdir, "--yes", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["ops"] == [] and [(k["op_id"], k["code"]) for k in d["kept"]] == [(m["op_id"], "not_restored")], d
    assert os.path.exists(kept)
