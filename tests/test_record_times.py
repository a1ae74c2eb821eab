"""Times read from records are untrusted input: one rule (``storage.paths.plausible_mtime_ns``)
for a manifest's file record and an offloaded blob's remote record alike."""
import os

from tb_footprint_plugin.engine import remote_vault
from tb_footprint_plugin.engine.swap import recorded_mtime_ns
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.paths import plausible_mtime_ns

SHA = "ab" + "0" * 62


def test_plausible_mtime_ns_takes_only_what_a_file_can_have():
    assert plausible_mtime_ns(1_790_000_000_123_456_789) == 1_790_000_000_123_456_789
    assert plausible_mtime_ns(0) == 0
    assert plausible_mtime_ns(-1) == -1  # before 1970: a time a file can have (review R14 F7)
    for bad in (-(1 << 63), 1 << 63, 1 << 70, -(1 << 70), True, 1.5e18, "1790000000", None, [1]):
        assert plausible_mtime_ns(bad) is None, bad
    assert recorded_mtime_ns({"mtime_ns": 1 << 63}) is None


def test_an_offloaded_blobs_recorded_time_out_of_range_is_not_used(tmp_path):
    """A remote record whose mtime_ns is beyond what a file can have (planted, or damaged) gives no
    time for the restore (os.utime would raise on it half-way through a run's restore)."""
    vault = Vault(str(tmp_path / "vault"))
    vault.ensure()
    os.makedirs(os.path.dirname(remote_vault.record_path(vault.root, SHA)), exist_ok=True)
    remote_vault.set_configured_url(vault.root, "s3://bucket/vault")
    remote_vault.write_record(vault.root, SHA, "s3://bucket/vault", 10, "data/ab/x", mtime_ns=1 << 70)
    assert remote_vault.read_record(vault.root, SHA)["mtime_ns"] == 1 << 70  # the record is read…
    assert vault.blob_mtime_ns(SHA) is None  # …but its time is not taken
    remote_vault.write_record(vault.root, SHA, "s3://bucket/vault", 10, "data/ab/x", mtime_ns=123)
    assert vault.blob_mtime_ns(SHA) == 123
