"""A bucket reduce's "N more after `tb-footprint purge`" is what the purge then frees (review R17
F8). The vault holds a whole server-side copy of every original a run's actions change: a
rewritten event file's whole original, not only the bytes it lost. The reduce said the bytes
removed from the logdir (11.4 MB on the real fixtures) while ``status`` and ``purge -n`` said what
the copies hold (14.8 MB) for the same backups."""
import pytest

from conftest import copy_real
from tb_footprint_plugin import api

pytestmark = pytest.mark.usefixtures("disarm_faults")


def test_the_reduces_after_purge_figure_is_what_status_and_purge_say(s3_bucket, tmp_path):
    logdir = copy_real("torch", tmp_path / "torch")
    url = s3_bucket.upload(logdir, "afterpurge")
    rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0)
    assert any(o.status == "verified" for o in rep.outcomes)
    assert all(o.status in ("verified", "skipped") for o in rep.outcomes), [o.to_dict() for o in rep.outcomes]
    rewritten = [a for rp in rep.plan.runs for a in rp.actions if a.kind == "rewrite"]
    assert rewritten, "the fixture's event files are rewritten: their originals are whole copies in the vault"
    said = rep.to_dict()["freed_on_disk_after_purge_bytes"]
    assert said > rep.removed_from_logdir_bytes
    assert said == api.status(url)["freed_after_purge_bytes"]
    assert said == api.purge(url, yes=False).freed_bytes


def test_a_bucket_restore_says_its_backup_stays_until_purge(s3_bucket, tmp_path):
    """Review R17 F9: a disk's restore lets its now redundant backup go and says so; a bucket's
    server-side copies stay, billed, until a purge, which its words said nowhere."""
    from tb_footprint_plugin.fmt import human_bytes

    logdir = copy_real("torch", tmp_path / "torch")
    url = s3_bucket.upload(logdir, "restoresays")
    rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0)
    verified = [o for o in rep.outcomes if o.status == "verified"]
    assert verified
    held = {m["op_id"]: m["bytes"] for m in api.purge(url, yes=False).ops}
    for o in api.restore(url):
        assert o.status == "restored", o.to_dict()
        assert f"its backup ({human_bytes(held[o.op_id])}) stays in the bucket's vault (billed) until " \
               "`tb-footprint purge`" in o.reason, o.reason
    assert api.purge(url, yes=False).freed_bytes == sum(held.values())
