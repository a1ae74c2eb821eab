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


def du_logdir_only(logdir: Path) -> int:
    """``du`` of the logdir without its state folder (the vault): what the runs hold."""
    return du(*[p for p in logdir.iterdir() if p.name != ".tb-footprint"])


def check_status_freed_now_is_what_du_saw(logdir: Path, **kw) -> None:
    before = du(logdir)
    rep = reduce(logdir, **kw)
    real = before - du(logdir)
    st = api.status(str(logdir))
    assert real > 0
    assert abs(st["freed_now_bytes"] - real) <= SLACK + 0.01 * rep.removed_from_logdir_bytes, \
        (st["freed_now_bytes"], real, rep.freed_now_bytes)


def test_status_freed_now_counts_a_hard_linked_twin_once(tmp_path):
    check_status_freed_now_is_what_du_saw(twin_logdir(tmp_path))


def test_plan_disk_removable_counts_a_hard_linked_twin_once(tmp_path):
    logdir = twin_logdir(tmp_path)
    p = api.plan(str(logdir), "archive", quiet_period=0)
    before = du_logdir_only(logdir)
    reduce(logdir)
    gone = before - du_logdir_only(logdir)
    assert abs(p.disk_removable_bytes - gone) <= SLACK, (p.disk_removable_bytes, gone, p.removable_bytes)
    assert p.to_dict()["disk_removable_bytes"] == p.disk_removable_bytes
    rp = p.run("torch")
    assert rp.twin_bytes > 0 and rp.disk_removable_bytes == rp.removable_bytes - rp.twin_bytes
    from helpers_cli import run_cli as cli
    (tmp_path / "again").mkdir()
    logdir2 = twin_logdir(tmp_path / "again")
    out = cli("plan", logdir2, "--policy", "archive", "--quiet-period", "0").stdout
    from tb_footprint_plugin.fmt import human_bytes
    assert f"frees {human_bytes(p.disk_removable_bytes)} on disk)" in out, out


def test_status_freed_now_counts_a_blob_operations_share_once(tmp_path):
    """Three runs holding the same bytes: three reductions, one set of blobs in the vault."""
    logdir = tmp_path / "ld"
    logdir.mkdir()
    src = copy_real("torch/profiled", tmp_path / "src")
    shutil.rmtree(next(p for p in src.iterdir() if p.is_dir()))
    for n in ("c1", "c2", "c3"):
        shutil.copytree(src, logdir / n, copy_function=shutil.copy2)
        os.utime(logdir / n, (os.path.getmtime(src),) * 2)
    check_status_freed_now_is_what_du_saw(logdir)


def test_after_purge_counts_the_retired_runs_kept_in_the_vault(tmp_path):
    """Retired runs (renamed into the vault: du unchanged) are what a purge frees: status, the tab
    (and history's head, from the same count) say it, and "N with kept backups" counts them."""
    from helpers_cli import run_cli as cli
    logdir = tmp_path / "ld"
    logdir.mkdir()
    for n in ("a", "b"):
        copy_real("tf/keras_profiled/train", logdir / n)
    assert api.retire(str(logdir), api.retire_rule(runs=["a", "b"]), dry_run=False, quiet_period=0).ok
    st, tab = api.status(str(logdir)), api.disk_numbers(str(logdir))
    before = du(logdir)
    text = cli("status", logdir).stdout
    assert "operations: 2 (2 with kept backups)" in text, text
    done = api.purge(str(logdir), yes=True)
    gained = before - du(logdir)
    assert gained > 100 * 1024 and done.freed_bytes > 0
    for name, said in (("status", st["freed_after_purge_bytes"]), ("tab", tab["freed_after_purge_bytes"])):
        assert abs(said - gained) <= SLACK, (name, said, gained)


def test_purge_says_a_logdir_not_sticky_as_a_warning_not_a_refusal(tmp_path):
    """A group-writable logdir without the sticky bit is a warning: the purge goes on, and says so."""
    from helpers_cli import run_cli as cli
    logdir = dup_logdir(tmp_path)
    reduce(logdir)
    os.chmod(logdir, 0o775)
    for args in (("-n",), ("--yes",)):
        p = cli("purge", logdir, *args)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "warning [logdir_not_sticky]" in p.stdout and "refused [" not in p.stdout, p.stdout
    assert "freed" in p.stdout and api.status(str(logdir))["freed_after_purge_bytes"] == 0


def test_history_csv_carries_each_reduces_freed_figures_after_the_older_columns(tmp_path):
    import csv
    import io
    from helpers_cli import run_cli as cli
    logdir = twin_logdir(tmp_path)
    before, runs_before = du(logdir), du_logdir_only(logdir)
    reduce(logdir)
    real, gone = before - du(logdir), runs_before - du_logdir_only(logdir)
    p = cli("history", logdir, "--csv")
    assert p.returncode == 0, p.stdout + p.stderr
    rows = list(csv.reader(io.StringIO(p.stdout)))
    older = ["time", "op_id", "kind", "run", "policy", "before", "after", "verified", "outcome", "code",
             "backup_kept", "user", "host", "tool_version", "reason", "backup", "freed", "shard"]
    assert rows[0][:len(older)] == older, rows[0]  # the older columns where they were
    assert rows[0][len(older):] == ["removed_from_logdir_bytes", "freed_now_bytes", "freed_after_purge_bytes"]
    row = next(dict(zip(rows[0], r)) for r in rows[1:] if r[2] == "reduce")
    assert abs(int(row["freed_now_bytes"]) - real) <= SLACK + 0.01 * int(row["removed_from_logdir_bytes"]), row
    assert int(row["removed_from_logdir_bytes"]) >= gone > 0, row  # apparent bytes, each name: at least du's
    blobs = sum(f.stat().st_size for f in (logdir / ".tb-footprint" / "blobs").rglob("*") if f.is_file())
    assert abs(int(row["freed_after_purge_bytes"]) - blobs) <= SLACK, (row, blobs)


def test_reduce_with_the_vault_on_another_disk_says_freed_now_is_the_logdirs(tmp_path):
    """``--backup-dir`` on another filesystem (a tmpfs): the measured "freed now" is the logdir's
    disk's (du of the logdir); the summary says so, as the plan's note does, not "logdir + vault"."""
    from helpers_cli import run_cli as cli
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], capture_output=True, text=True)
    assert p.returncode == 0, f"cannot mount a tmpfs (tests run as root): {p.stderr}"
    try:
        logdir = dup_logdir(tmp_path)
        before, vault_before = du(logdir), 0
        out = cli("reduce", logdir, "--backup-dir", mnt / "v", "--quiet-period", "0", "--yes", "--json")
        assert out.returncode == 0, out.stdout + out.stderr
        import json
        js = json.loads(out.stdout)
        logdir_freed, vault_grew = before - du(logdir), du(mnt / "v") - vault_before
        assert vault_grew > 0 and abs(js["freed_now_bytes"] - logdir_freed) <= SLACK, (js["freed_now_bytes"],
                                                                                     logdir_freed, vault_grew)
        (tmp_path / "two").mkdir()
        logdir2 = dup_logdir(tmp_path / "two")
        out = cli("reduce", logdir2, "--backup-dir", mnt / "v2", "--quiet-period", "0", "--yes")
        assert out.returncode == 0, out.stdout + out.stderr
        assert "on the logdir's disk (the vault is on another disk)" in out.stdout, out.stdout
        assert "on disk (logdir + vault)" not in out.stdout, out.stdout
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_the_tabs_freed_now_is_status_s_with_hard_linked_twins(tmp_path):
    """The tab's disk numbers read the manifests slim (``vault_reads.slim``): the plan's counts
    (linked, holes, twins) are kept there, so its "freed now" is status's, what du saw."""
    logdir = twin_logdir(tmp_path)
    check_status_freed_now_is_what_du_saw(logdir)
    assert api.disk_numbers(str(logdir))["freed_now_bytes"] == api.status(str(logdir))["freed_now_bytes"]


def test_purge_json_lists_a_logdir_not_sticky_under_warnings(tmp_path):
    import json
    from helpers_cli import run_cli as cli
    logdir = dup_logdir(tmp_path)
    reduce(logdir)
    os.chmod(logdir, 0o775)
    p = cli("purge", logdir, "--yes", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    js = json.loads(p.stdout)
    assert [w["code"] for w in js["warnings"]] == ["logdir_not_sticky"], js
    assert not any(r["code"] == "logdir_not_sticky" for r in js["refused"]), js
    assert js["freed_bytes"] > 0
