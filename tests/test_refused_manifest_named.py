"""A manifest the one schema refuses hides nothing in silence on a disk, as on a bucket.

A disk manifest whose field is of the wrong type (``restored_by`` a number) or names a file
outside its run is never acted on (its backups kept). ``status`` named it, but ``verify`` exited 0
checking the other runs only and ``restore --all`` exited 0 restoring them, saying nothing of the
run whose backups that manifest holds; a bucket's verify and restore name a damaged manifest as a
failed row / ``restore_blocked`` outcome. Now a disk's do too (code of the refusal, its file, the
bucket's words), and exit 1 (a check of another run named does not, when the refusal names its run);
a refused manifest another logdir sharing the vault wrote is that logdir's to name. Every verb runs the real CLI.
"""
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import copy_real
from helpers_cli import run_cli as cli
from tb_footprint_plugin.engine.catalogue import refused_manifests
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.paths import state_dir


def _reduced(root: Path):
    """A logdir with runs ``a`` and ``b``, both reduced by one archive reduce: (logdir, op ids by run)."""
    src = copy_real("tf/keras_profiled", root / "src")
    logdir = root / "logdir"
    for run in ("a", "b"):
        shutil.copytree(src / "train", logdir / run, copy_function=shutil.copy2)
    p = cli("reduce", logdir, "--quiet-period", "0", "--verify", "python", "--yes", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    ops = {o["run"]: o["op_id"] for o in json.loads(p.stdout)["outcomes"]}
    assert set(ops) == {"a", "b"}, ops
    return logdir, ops


def _blobs(logdir: Path) -> list:
    return sorted(str(p) for p in Path(state_dir(str(logdir))).rglob("*") if p.is_file() and "blobs" in p.parts
                  or p.suffix == ".pack")


def _outside(m: dict) -> dict:
    files = [dict(m["files"][0], path="b/" + m["files"][0]["path"].split("/", 1)[1])] + m["files"][1:]
    return dict(m, files=files)


@pytest.mark.parametrize("damage,code", [(lambda m: dict(m, restored_by=7), "bad_manifest"),
                                         (_outside, "path_outside")], ids=["wrong_type", "file_outside_its_run"])
def test_verify_and_restore_all_name_a_refused_manifest(tmp_path, damage, code):
    logdir, ops = _reduced(tmp_path)
    vault = Vault(state_dir(str(logdir)))
    vault.write_manifest(damage(vault.read_manifest(ops["a"])))
    kept = _blobs(logdir)
    assert kept

    text = cli("verify", logdir, "--verify", "python")
    js = cli("verify", logdir, "--verify", "python", "--json")
    assert text.returncode == 1 and js.returncode == 1, text.stdout + text.stderr
    rows = json.loads(js.stdout)
    assert [r["ok"] for r in rows if r["run"] == "b"] == [True], rows  # the other run still checked
    (row,) = [r for r in rows if r.get("code") == code]
    assert row["ok"] is False and (os.path.exists(row["path"]) or ops["a"] in row["path"]), row
    if code == "bad_manifest":  # refused by the one schema: its op and run are strings, named
        assert (row["run"], row["op_id"]) == ("a", ops["a"]), row
    else:  # refused as it was read (``trust.check_manifest``): the file and the run in its words
        assert (row["run"], row["op_id"]) == ("(vault)", "-") and "run 'a'" in text.stdout, row
    assert f"[{code}]" in text.stdout and "not restored until it is mended or moved aside" in text.stdout, text.stdout
    named = cli("verify", logdir, "a", "--verify", "python")
    assert named.returncode == 1 and f"[{code}]" in named.stdout, named.stdout + named.stderr
    # the other run's check: a refusal that names run a is a's, not b's; one that names no run may be
    # any run's, b's included, and still fails b's check
    other = cli("verify", logdir, "b", "--verify", "python")
    assert (other.returncode, f"[{code}]" in other.stdout) == ((0, False) if code == "bad_manifest" else (1, True)), \
        other.stdout + other.stderr

    # the run's own restore: its refusal names the manifest (exit 1), not "no such run" (exit 2)
    one = cli("restore", logdir, "a", "--yes")
    assert one.returncode == 1 and "[restore_blocked]" in one.stderr, one.stdout + one.stderr
    assert "not restored until it is mended or moved aside" in one.stderr and "a typo" not in one.stderr, one.stderr
    # a name nothing recorded, while a refused manifest stands: that manifest may be its (refused
    # before its run could be read), so the refusal names it too rather than calling the name a typo
    rest = cli("restore", logdir, "--all", "--yes", "--json")
    assert rest.returncode == 1, rest.stdout + rest.stderr
    outs = json.loads(rest.stdout)
    assert [o["status"] for o in outs if o["run"] == "b"] == ["restored"], outs
    (blocked,) = [o for o in outs if o["code"] == "restore_blocked"]
    assert row["path"] in blocked["reason"] and "moved aside" in blocked["reason"], blocked
    # its backups stay: a purge of everything does not take them either
    assert cli("purge", logdir, "--yes").returncode in (0, 1)
    assert set(kept) & set(_blobs(logdir)), "the refused manifest's backups were deleted"


def test_another_logdirs_refused_manifest_in_a_shared_vault_is_not_this_ones(tmp_path):
    logdir, ops = _reduced(tmp_path)
    vault = Vault(state_dir(str(logdir)))
    m = vault.read_manifest(ops["a"])
    mine = dict(m, restored_by=7)
    theirs = dict(mine, op_id=ops["a"][:-6] + "ffffff", logdir=str(tmp_path / "elsewhere"))
    theirs.pop("logdir_id", None)
    vault.write_manifest(theirs)
    assert refused_manifests(Context(str(logdir))) == []
    vault.write_manifest(mine)
    (r,) = refused_manifests(Context(str(logdir)))
    assert (r["code"], r["op_id"], r["run"]) == ("bad_manifest", ops["a"], "a"), r
    assert os.path.basename(str(logdir)) in r["file"] or ops["a"] in r["file"], r
