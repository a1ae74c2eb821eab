"""``engine.usage``'s walk counts allocated blocks by the scan's one rule, ``scan.model.DiskTally.count``
(issue #26 item 6: a rule written once): a change of that rule changes both numbers."""
import os

from tb_footprint_plugin.engine import usage
from tb_footprint_plugin.scan.model import DiskTally


def test_disk_usage_counts_every_entry_through_the_scans_tally(tmp_path, monkeypatch):
    logdir = tmp_path / "logs"
    (logdir / "run").mkdir(parents=True)
    for i in range(3):
        (logdir / "run" / f"f{i}").write_bytes(os.urandom(5000))
    os.link(logdir / "run" / "f0", logdir / "run" / "f0-link")  # one inode, counted once
    vault = tmp_path / "vault"
    vault.mkdir(mode=0o700)
    (vault / "blob").write_bytes(b"x" * 9000)
    want = usage.disk_usage(str(logdir), [str(vault)])

    met = []
    real = DiskTally.count

    def count(self, st):
        met.append(st.st_ino)
        return real(self, st)

    monkeypatch.setattr(DiskTally, "count", count)
    got = usage.disk_usage(str(logdir), [str(vault)])
    # before: usage counted with a rule of its own and never asked the tally
    assert len(met) == 8  # logdir, run, 3 files, the link (met, counted once), the vault, its blob
    assert (got.total_bytes, got.by_device) == (want.total_bytes, want.by_device)
    assert got.total_bytes == sum(os.lstat(p).st_blocks * 512 for p in (
        logdir, logdir / "run", logdir / "run" / "f0", logdir / "run" / "f1", logdir / "run" / "f2", vault,
        vault / "blob"))
