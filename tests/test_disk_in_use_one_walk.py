"""A plan's "disk in use now" without a second walk of the logdir (issue #27 item 4, #28 item 1).

``api.plan`` used to walk the logdir again for the figure (``engine.usage.disk_usage``) right
after its scan had walked it: at 100,000 runs with a warm scan cache that second walk would be
most of the plan. The scan's walk now counts the blocks it lstats (``scan.model.DiskTally``) and
the plan walks only what the scan set aside (state folders, a vault inside the logdir) and the
vaults elsewhere. The figure is the full walk's to the byte, and within 1% of ``du``.
"""
import os
import time

from test_disk_usage import close, du, two_runs
from test_numbers_everywhere import reduced
from tb_footprint_plugin import api
from tb_footprint_plugin.engine.usage import disk_usage
from tb_footprint_plugin.scan.model import footprint_from_dict
from tb_footprint_plugin.storage.paths import STATE_DIR_NAME


def _full_walk(logdir, *vaults) -> int:
    """The figure as a second walk of everything counts it (the rule the plan must keep)."""
    state = os.path.join(str(logdir), STATE_DIR_NAME)
    return disk_usage(str(logdir), [state, *map(str, vaults)]).total_bytes


def test_warm_plan_scans_each_folder_of_the_logdir_once(tmp_path, monkeypatch):
    logdir = reduced(tmp_path)  # a vault inside the logdir holds backups already
    api.scan(str(logdir))  # the scan cache is warm: the plan's scan reads no event file again
    state = os.path.join(str(logdir), STATE_DIR_NAME)
    folders = [d for d, _dirs, _files in os.walk(logdir) if not (d + "/").startswith(state + "/")]
    assert len(folders) > 5, folders
    calls = []
    real = os.scandir

    def counting(path="."):
        calls.append(os.path.abspath(os.fsdecode(path)))
        return real(path)

    monkeypatch.setattr(os, "scandir", counting)
    p = api.plan(str(logdir), "archive", quiet_period=0)
    monkeypatch.setattr(os, "scandir", real)
    twice = {f: calls.count(f) for f in folders if calls.count(f) != 1}
    assert not twice, twice  # each folder of the logdir listed once: by the scan, not by a du pass after it
    assert any(c == state or c.startswith(state + "/") for c in calls), "the vault is walked for its part"
    assert p.disk_in_use_bytes == _full_walk(logdir), (p.disk_in_use_bytes, _full_walk(logdir))
    assert close(p.disk_in_use_bytes, du(logdir)), (p.disk_in_use_bytes, du(logdir))


def test_links_across_logdir_and_vaults_count_once_and_others_state_is_not_counted(tmp_path):
    logdir = two_runs(tmp_path)
    outside = tmp_path / "vault"
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, runs=["a"], quiet_period=0,
                            backup_dir=str(outside), verify_backends=("python",), vault_format="hardlink")
    assert rep.ok and any(o.status == "verified" for o in rep.outcomes), [o.to_dict() for o in rep.outcomes]
    big = logdir / "b" / "big.bin"  # a third of the logdir: counted twice, the figure is off by far more than 1%
    big.write_bytes(os.urandom(3 * du(logdir) // 4))
    os.link(big, logdir / STATE_DIR_NAME / "linked-into-state")  # the scan meets it; the vault walk too
    os.link(big, outside / "linked-into-outside-vault")
    theirs = logdir / ".tb-footprint-u4242"  # another user's state folder: theirs to account for
    theirs.mkdir()
    (theirs / "blob").write_bytes(os.urandom(400_000))
    os.chown(theirs, 4242, 4242)
    p = api.plan(str(logdir), "archive", backup_dir=str(outside), quiet_period=0)
    want = _full_walk(logdir, outside)
    assert p.disk_in_use_bytes == want, (p.disk_in_use_bytes, want)
    assert close(p.disk_in_use_bytes, du(logdir, outside) - du(theirs)), (p.disk_in_use_bytes, du(logdir, outside))


def test_a_footprint_without_its_walk_or_with_an_old_one_is_walked_again(tmp_path):
    logdir = reduced(tmp_path)
    fp = api.scan(str(logdir), write_cache=False)
    assert fp.disk is not None and "disk" not in fp.to_dict() and "listed_bytes" not in fp.to_dict()
    read_back = footprint_from_dict(fp.to_dict())  # no walk comes with JSON
    assert read_back.disk is None
    assert api.plan(str(logdir), "archive", quiet_period=0, footprint=read_back).disk_in_use_bytes == \
        _full_walk(logdir)
    # written after the caller's scan, which is old: its walk is not taken for "now"
    (logdir / "b" / "late.bin").write_bytes(os.urandom(1_000_000))
    fp.disk.started = time.time() - 3600
    p = api.plan(str(logdir), "archive", quiet_period=0, footprint=fp)
    assert p.disk_in_use_bytes == _full_walk(logdir) and close(p.disk_in_use_bytes, du(logdir))
