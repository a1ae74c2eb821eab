"""The dry run says exactly what a reduce frees when originals have other hard links (task N1,
review R13 F1's other half).

A ``cp -al`` or ``rsync --link-dest`` snapshot of the logdir gives every file a second name. The
reduce then copies such an original into the vault (a link would leave the backup an inode the
user still writes through the snapshot) and its swap removes one name only: the disk gains
nothing from it, and the copy even costs its size until purge. The plan said it freed them. Now
the scan notes each file's links, the plan leaves those bytes out of "freed now" and names them
(code ``hard_linked_elsewhere``), and the reduce's measured "freed now" (``du``-style, each inode
once) leaves out the files whose other names are outside what it walks: plan == measured == the
real ``du`` of logdir + snapshot, within the 1% rule of tests/test_disk_usage.py.
"""
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from conftest import copy_real
from helpers_cli import run_cli as cli
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.scan.scanner import scan

OLD = time.time() - 3600
MB = 1 << 20


def du(*paths) -> int:
    """``du`` over every path in one invocation: each inode counted once, as the disk holds it."""
    out = subprocess.run(["du", "-sc", "--block-size=1", *map(str, paths)], capture_output=True, text=True,
                         check=True).stdout
    return int(out.strip().splitlines()[-1].split()[0])


def near(a: int, b: int, removed: int) -> bool:
    """Equal within 1% of what the reduce removed from the logdir (the figures may be below 0)."""
    return abs(a - b) <= 0.01 * removed


def payload(seed: int, size: int) -> bytes:
    """Bytes that compress to about half, evenly (so the compressed vault's sampled estimate
    holds for the whole file): 32 KiB random, 32 KiB of a pattern, alternating."""
    out = bytearray()
    rnd = os.urandom(32 * 1024 * (size // (64 * 1024)))
    for i in range(size // (64 * 1024)):
        out += rnd[i * 32 * 1024:(i + 1) * 32 * 1024] + bytes([seed % 251]) * (32 * 1024)
    return bytes(out)


def make_logdir(root: Path, runs=("a", "b"), size: int = 6 * MB) -> Path:
    """Aged runs whose profiles (``size`` bytes each, distinct) the archive policy removes."""
    src = copy_real("tf/keras_profiled", root / "src")
    logdir = root / "logdir"
    for i, run in enumerate(runs):
        shutil.copytree(src / "train", logdir / run, copy_function=shutil.copy2)
        with open(next((logdir / run).rglob("*.xplane.pb")), "ab") as f:
            f.write(payload(i + 1, size))
    for p in [logdir, *logdir.rglob("*")]:
        os.utime(p, (OLD, OLD), follow_symlinks=False)
    shutil.rmtree(src)
    return logdir


def snapshot(src: Path, dest: Path) -> None:
    subprocess.run(["cp", "-al", str(src), str(dest)], check=True)


def reduce(logdir: Path, dry: bool, **kw):
    return api.reduce_logdir(str(logdir), policy="archive", dry_run=dry, quiet_period=0,
                             verify_backends=("python",), **kw)


def check_agrees(logdir: Path, real_paths, **kw):
    """Dry run, then the reduce: the dry run's "freed now" == the reduce's measured one == what
    ``du`` of ``real_paths`` (everything holding a name of the files) says the disk gained."""
    dry = reduce(logdir, True, **kw)
    before = du(*real_paths)
    rep = reduce(logdir, False, **kw)
    assert rep.ok and all(o.status == "verified" for o in rep.outcomes), [o.to_dict() for o in rep.outcomes]
    real = before - du(*real_paths)
    removed = rep.removed_from_logdir_bytes
    assert removed > 5 * MB
    assert near(rep.freed_now_bytes, real, removed), (rep.freed_now_bytes, real, removed)
    assert near(dry.freed_now_bytes, rep.freed_now_bytes, removed), (dry.freed_now_bytes, rep.freed_now_bytes)
    return dry, rep, real


def test_scan_notes_other_links_fresh_even_from_the_cache(tmp_path):
    logdir = make_logdir(tmp_path, runs=("a",), size=64 * 1024)
    first = scan(str(logdir))  # writes the cache: the event files' stats
    assert all(f.links == 1 for r in first.runs for f in r.files)
    snapshot(logdir / "a", tmp_path / "snap")
    again = scan(str(logdir))
    assert again.files_cached > 0  # the event file's stats came from the cache...
    files = [f for r in again.runs for f in r.files]
    assert files and all(f.links == 2 for f in files), [(f.path, f.links) for f in files]  # ...its links did not
    assert any(f.kind == "event" for f in files)
    d = again.to_dict()
    assert all(f["links"] == 2 for r in d["runs"] for f in r["files"])


def test_snapshot_outside_hardlink_vault_plan_measured_and_du_agree(tmp_path):
    logdir = make_logdir(tmp_path)
    snap = tmp_path / "snap"
    snapshot(logdir, snap)
    dry, rep, real = check_agrees(logdir, [logdir, snap], vault_format="hardlink")
    # nothing freed: every original stays through the snapshot, and each backup is a copy
    assert real < -0.9 * rep.removed_from_logdir_bytes, (real, rep.removed_from_logdir_bytes)
    p = dry.plan
    linked = [a for rp in p.runs for a in rp.actions if a.links > 1]
    assert linked and all(a.links == 2 for a in linked)
    assert p.hard_links["code"] == Finding.HARD_LINKED and p.hard_links["files"] == len(linked)
    assert p.hard_links["bytes"] == sum(a.bytes_before for a in linked) == sum(rp.linked_bytes for rp in p.runs)
    assert dry.freed_now_bytes == -p.hard_links["bytes"]
    assert any(n.startswith(f"{Finding.HARD_LINKED}: {len(linked)} file(s)") for n in p.notes), p.notes
    # purge frees the copies (not the snapshot's inodes)
    assert dry.freed_on_disk_after_purge_bytes == p.removable_bytes
    # status and the history say the same as things stand: the copies cost disk until purge
    st = api.status(str(logdir))
    assert near(st["freed_now_bytes"], rep.freed_now_bytes, rep.removed_from_logdir_bytes), st["freed_now_bytes"]
    entries = [e for e in api.history(str(logdir)) if e.get("kind") == "reduce"]
    assert len(entries) == 2 and near(sum(e["freed_now_bytes"] for e in entries), rep.freed_now_bytes,
                                      rep.removed_from_logdir_bytes), entries
    before = du(logdir, snap)
    pr = api.purge(str(logdir), yes=True)
    assert pr.freed_bytes > 0
    gained = before - du(logdir, snap)
    assert near(gained, dry.freed_on_disk_after_purge_bytes, rep.removed_from_logdir_bytes), gained
    # purged: the reductions freed nothing, as the snapshot still holds every original
    entries = [e for e in api.history(str(logdir)) if e.get("kind") == "reduce"]
    assert all(e["freed_now_bytes"] == 0 and e["freed_after_purge_bytes"] == 0 for e in entries), entries
    assert api.status(str(logdir))["freed_now_bytes"] == 0


def test_snapshot_outside_compressed_vault_plan_measured_and_du_agree(tmp_path):
    logdir = make_logdir(tmp_path)
    snap = tmp_path / "snap"
    snapshot(logdir, snap)
    dry, rep, real = check_agrees(logdir, [logdir, snap])  # the default vault: compressed
    # the compressed copies cost about half the originals; the originals free nothing
    assert real < -0.3 * rep.removed_from_logdir_bytes, (real, rep.removed_from_logdir_bytes)
    assert dry.plan.hard_links["files"] == 2
    # purge frees the compressed copies, as the dry run said (the snapshot keeps the originals)
    before = du(logdir, snap)
    assert api.purge(str(logdir), yes=True).freed_bytes > 0
    gained = before - du(logdir, snap)
    assert near(gained, dry.freed_on_disk_after_purge_bytes, rep.removed_from_logdir_bytes), \
        (gained, dry.freed_on_disk_after_purge_bytes)


def test_snapshot_inside_another_run_only_the_run_reduced(tmp_path):
    logdir = make_logdir(tmp_path)
    snapshot(logdir / "a", logdir / "c")  # run c: a hard-linked copy of run a, inside the logdir
    for p in [logdir / "c", *(logdir / "c").rglob("*")]:
        os.utime(p, (OLD, OLD), follow_symlinks=False)
    dry, rep, real = check_agrees(logdir, [logdir], runs=["a"], vault_format="hardlink")
    assert dry.plan.hard_links["files"] == 1 and dry.plan.run("a").linked_files == 1
    assert real < -5 * MB  # run a's profile stays through run c, and its backup is a copy


def test_names_all_changed_by_the_plan_free_their_inode_once(tmp_path):
    logdir = make_logdir(tmp_path)
    snapshot(logdir / "a", logdir / "c")
    for p in [logdir / "c", *(logdir / "c").rglob("*")]:
        os.utime(p, (OLD, OLD), follow_symlinks=False)
    dry, rep, real = check_agrees(logdir, [logdir])  # runs a, b and c, compressed vault
    hl = dry.plan.hard_links
    assert hl["files"] == 0 and hl["twin_files"] == 1, hl  # a's and c's profile: one inode, freed once
    assert real > 0.4 * 2 * 6 * MB  # two distinct profiles freed, about half kept compressed


def test_cli_dry_run_text_and_json_name_them(tmp_path):
    logdir = make_logdir(tmp_path, size=1 * MB)
    snapshot(logdir, tmp_path / "snap")
    p = cli("reduce", logdir, "--dry-run", "--quiet-period", "0s", "--vault-format", "hardlink")
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"note: {Finding.HARD_LINKED}: 2 file(s) to be changed" in p.stdout, p.stdout
    assert "freed now: ~-" in p.stdout and "other hard links" in p.stdout, p.stdout
    assert p.stdout.count("1 file(s) hard-linked elsewhere") == 2, p.stdout  # said under each run too
    p = cli("reduce", logdir, "--dry-run", "--quiet-period", "0s", "--vault-format", "hardlink", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    js = json.loads(p.stdout)
    plan = js["plans"][0] if "plans" in js else js["plan"]
    assert plan["hard_links"]["code"] == "hard_linked_elsewhere", plan["hard_links"]
    assert plan["hard_links"]["files"] == 2, plan["hard_links"]
    assert sum(r["linked_files"] for r in plan["runs"]) == 2
    assert sum(1 for r in plan["runs"] for a in r["actions"] if a["links"] == 2) == 2
    assert js.get("freed_now_bytes", plan["hard_links"]["bytes"] * -1) == -plan["hard_links"]["bytes"]


def test_vault_on_another_filesystem_frees_nothing_of_them_now(tmp_path):
    """The backups go to another disk (a real tmpfs): the logdir's disk would gain the removed
    bytes at once (tests/test_disk_usage.py), but not those a snapshot keeps."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(mnt)], capture_output=True,
                       text=True)
    assert p.returncode == 0, f"cannot mount a tmpfs (tests run as root): {p.stderr}"
    try:
        logdir = make_logdir(tmp_path)
        snap = tmp_path / "snap"
        snapshot(logdir, snap)
        dry, rep, real = check_agrees(logdir, [logdir, snap], backup_dir=str(mnt / "vault"),
                                      vault_format="hardlink")
        removed = rep.removed_from_logdir_bytes
        assert abs(real) <= 0.01 * removed and abs(dry.freed_now_bytes) <= 0.01 * removed, (real, dry.freed_now_bytes)
        assert dry.freed_on_disk_after_purge_bytes == dry.plan.removable_bytes  # the copies there
        assert any("on another disk" in n and Finding.HARD_LINKED in n for n in dry.plan.notes), dry.plan.notes
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_bucket_plan_has_no_hard_links(s3_bucket, tmp_path):  # noqa: F811
    """Objects have no hard links: a logdir uploaded from a disk where its files had other names
    plans as any (every ``links`` 1, no note, no ``hard_links``)."""
    logdir = make_logdir(tmp_path, size=64 * 1024)
    snapshot(logdir, tmp_path / "snap")
    url = s3_bucket.upload(logdir, "logs")
    fp = scan(url, write_cache=False)
    assert all(f.links == 1 for r in fp.runs for f in r.files)
    p = api.plan(url, "archive", quiet_period=0)
    assert any(rp.actions for rp in p.runs)
    assert p.hard_links is None and all(rp.linked_files == 0 for rp in p.runs)
    assert all(a.links == 1 for rp in p.runs for a in rp.actions)
    assert not any(Finding.HARD_LINKED in n for n in p.notes), p.notes


def test_a_plan_from_an_older_scan_looks_at_its_originals_again(tmp_path):
    """A tab plans from a scan it keeps for minutes: a snapshot made since is seen all the same."""
    logdir = make_logdir(tmp_path, size=64 * 1024)
    fp = scan(str(logdir), write_cache=False)
    snapshot(logdir, tmp_path / "snap")
    fp.scanned_at -= 120  # walked two minutes ago, before the snapshot
    p = api.plan(str(logdir), "archive", quiet_period=0, footprint=fp)
    assert p.hard_links is not None and p.hard_links["files"] == 2, p.hard_links
    assert sum(1 for rp in p.runs for a in rp.actions if a.links == 2) == 2
    assert any(n.startswith(f"{Finding.HARD_LINKED}: 2 file(s)") for n in p.notes), p.notes
