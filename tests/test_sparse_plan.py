"""The dry run and ``status`` count a sparse file at what it holds on disk (review R14 F2).

A trace written with holes (200 MB apparent, a few KB allocated) frees its allocated blocks when
it goes, not its size: "freed now" and "after purge" counted apparent sizes, so the dry run
promised ~209 MB freed with 2.2 MB in use and ``status`` said the same after the reduce. Now the
walk's lstat notes a sparse file's allocated bytes (``FileEntry.allocated``, only when below its
size), each action on it carries them, the run counts its holes (``RunPlan.hole_bytes``) and the
disk figures leave them out, while ``removable_bytes`` stays the logical data the plan removes.
Dry run == measured == ``du`` within 1% of what the disk held (not of the apparent size).
"""
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import copy_real
from tb_footprint_plugin import api
from tb_footprint_plugin.scan.scanner import scan

OLD = time.time() - 3600
MB = 1 << 20
APPARENT = 64 * MB


def du(*paths) -> int:
    out = subprocess.run(["du", "-sc", "--block-size=1", *map(str, paths)], capture_output=True, text=True,
                         check=True).stdout
    return int(out.strip().splitlines()[-1].split()[0])


def make_logdir(root: Path) -> Path:
    """One aged run: a real event file and a sparse PyTorch trace (``APPARENT`` bytes, two blocks)."""
    src = copy_real("torch/profiled", root / "src")
    logdir = root / "logdir"
    run = logdir / "run"
    run.mkdir(parents=True)
    for ev in src.glob("events.out.tfevents.*"):
        shutil.copy2(ev, run / ev.name)
    with open(run / "big.pt.trace.json", "wb") as f:
        f.write(b'{"traceEvents": [')
        f.seek(APPARENT)
        f.write(b"]}")
    st = os.stat(run / "big.pt.trace.json")
    if st.st_blocks * 512 >= st.st_size // 2:
        pytest.skip("this filesystem does not keep holes")
    for p in [logdir, *logdir.rglob("*")]:
        os.utime(p, (OLD, OLD), follow_symlinks=False)
    shutil.rmtree(src)
    return logdir


def reduce(logdir: Path, dry: bool, **kw):
    return api.reduce_logdir(str(logdir), policy="archive", dry_run=dry, quiet_period=0,
                             verify_backends=("python",), **kw)


def test_scan_notes_allocated_only_for_sparse_files(tmp_path):
    logdir = make_logdir(tmp_path)
    files = {f.path: f for r in scan(str(logdir)).runs for f in r.files}
    trace = files["run/big.pt.trace.json"]
    assert trace.size > APPARENT and trace.allocated is not None and trace.allocated < 64 * 1024
    assert all(f.allocated is None for p, f in files.items() if p != trace.path)  # dense: nothing held
    assert scan(str(logdir)).to_dict()["runs"][0]["files"]  # the schema's dict still builds


@pytest.mark.parametrize("vault_format", ["compressed", "hardlink"])
def test_dry_run_freed_counts_disk_blocks_not_holes(tmp_path, vault_format):
    logdir = make_logdir(tmp_path)
    in_use = du(logdir)
    dry = reduce(logdir, True, vault_format=vault_format)
    p = dry.plan
    rp = p.run("run")
    # removable is the logical data the plan removes; the disk figures leave the holes out
    assert p.removable_bytes > APPARENT * 0.9
    assert rp.hole_bytes > APPARENT * 0.9 and p.disk_removable_bytes == p.removable_bytes - rp.hole_bytes
    assert p.to_dict()["disk_removable_bytes"] == p.disk_removable_bytes
    assert abs(dry.freed_now_bytes) < in_use, (dry.freed_now_bytes, in_use)  # before: ~APPARENT promised
    assert abs(dry.freed_on_disk_after_purge_bytes) < in_use, dry.freed_on_disk_after_purge_bytes
    before = du(logdir)
    rep = reduce(logdir, False, vault_format=vault_format)
    assert rep.ok and all(o.status == "verified" for o in rep.outcomes), [o.to_dict() for o in rep.outcomes]
    real = before - du(logdir)
    slack = 0.01 * max(in_use, abs(p.disk_removable_bytes)) + 64 * 1024  # 1% of the disk's figures, plus a few blocks
    assert abs(rep.freed_now_bytes - real) <= slack, (rep.freed_now_bytes, real)
    assert abs(dry.freed_now_bytes - rep.freed_now_bytes) <= slack, (dry.freed_now_bytes, rep.freed_now_bytes)
    # status as things stand says what the disk gained, not the apparent size
    st = api.status(str(logdir))
    assert abs(st["freed_now_bytes"] - rep.freed_now_bytes) <= slack, (st["freed_now_bytes"], rep.freed_now_bytes)
    entries = [e for e in api.history(str(logdir)) if e.get("kind") == "reduce"]
    assert entries and all(abs(e["freed_now_bytes"]) < in_use for e in entries), entries


def test_cli_dry_run_note_says_no_apparent_freed(tmp_path):
    from helpers_cli import run_cli as cli

    logdir = make_logdir(tmp_path)
    out = cli("reduce", str(logdir), "--dry-run", "--quiet-period", "0").stdout
    note = next(line for line in out.splitlines() if "freed now:" in line)
    assert " MB" not in note.split("freed now:")[1].split(":")[0], note  # before: "~67.4 MB on disk"
