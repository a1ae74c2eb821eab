"""Review R17: the figures "freed now" and "after purge" say what ``du`` sees, when files of a run
share bytes (hard-linked twins, byte-identical files), when reductions share a blob, when
retired runs fill the vault. Each figure is compared with ``du`` (allocated blocks, as
``engine.usage`` counts them), never with another figure of ours.
"""
import os
import shutil
import subprocess
from pathlib import Path

from conftest import copy_real
from tb_footprint_plugin import api

PY = ("python",)
#: what a figure may differ from ``du`` by: blocks of the vault's small files (oplog lines, a
#: manifest rewritten) and a blob's last block (purge counts its size as stored)
SLACK = 48 * 1024


def du(*paths) -> int:
    """``du`` over every path in one invocation: each inode counted once, as the disk holds it."""
    out = subprocess.run(["du", "-sc", "--block-size=1", *map(str, paths)], capture_output=True, text=True,
                         check=True).stdout
    return int(out.strip().splitlines()[-1].split()[0])


def reduce(logdir: Path, **kw):
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0, verify_backends=PY, **kw)
    assert rep.ok and rep.outcomes and all(o.status == "verified" for o in rep.outcomes), \
        [o.to_dict() for o in rep.outcomes]
    return rep


def twin_logdir(tmp_path: Path) -> Path:
    """A PyTorch run whose two traces are one inode under two names (``ln``), as r17_f1 made it."""
    logdir = tmp_path / "ld"
    logdir.mkdir()
    run = copy_real("torch/profiled", logdir / "torch")
    shutil.rmtree(next(p for p in run.iterdir() if p.is_dir()))
    trace = next(run.glob("*.pt.trace.json"))
    os.link(trace, run / "hardlinked.pt.trace.json")
    st = os.stat(trace)
    os.utime(run / "hardlinked.pt.trace.json", ns=(st.st_atime_ns, st.st_mtime_ns))
    return logdir


def dup_logdir(tmp_path: Path) -> Path:
    """A run whose profile session holds five byte-identical xplanes (plain copies), as r17_f5."""
    logdir = tmp_path / "ld"
    logdir.mkdir()
    run = copy_real("tf/keras_profiled/train", logdir / "run")
    xp = next(run.rglob("*.xplane.pb"))
    for n in "abcd":
        shutil.copy2(xp, xp.parent / f"{n}.xplane.pb")
    return logdir


def check_after_purge_is_what_purge_frees(logdir: Path, rep) -> None:
    """The reduce's, status's and purge -n's "after purge" == what ``du`` sees the purge free."""
    st = api.status(str(logdir))
    dry = api.purge(str(logdir), yes=False)
    before = du(logdir)
    done = api.purge(str(logdir), yes=True)
    gained = before - du(logdir)
    assert gained > 0 and done.freed_bytes > 0
    for name, said in (("reduce", rep.freed_on_disk_after_purge_bytes), ("status", st["freed_after_purge_bytes"]),
                       ("purge -n", dry.freed_bytes), ("purge", done.freed_bytes)):
        assert abs(said - gained) <= SLACK, (name, said, gained)


def test_after_purge_counts_a_hard_linked_twins_blob_once(tmp_path):
    logdir = twin_logdir(tmp_path)
    check_after_purge_is_what_purge_frees(logdir, reduce(logdir))


def test_after_purge_counts_byte_identical_files_blob_once(tmp_path):
    logdir = dup_logdir(tmp_path)
    check_after_purge_is_what_purge_frees(logdir, reduce(logdir))
