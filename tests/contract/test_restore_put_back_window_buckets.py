"""A bucket's restore puts an original back create-only where its key was absent at the look (the
run's listing), and over the reduced object only at the version looked at: an object a writer
puts at the key between the look and the put is kept as it is, never replaced, and the original
stays in the vault, named as not put back (invariant 1; the disk's put-back: test_restore_put_back_window).
A guard (it held before the disk's window was closed), on Azurite: Azure's IfMissing is enforced by
the emulator too. S3's If-None-Match on CopyObject and GCS's ifGenerationMatch=0 are enforced by the
services, not by moto nor gcp-storage-emulator, whose metadata read before the copy the restore's
fresh listing spares (``listed_absent``): on those emulators a put at this instant is not refused,
and no test on them can show the service's own refusal."""
import pytest

from contract_stores import buckets, logdir_on, reduced_and_retired_source  # noqa: F401 - fixtures
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import bucket_restore
from tb_footprint_plugin.storage.store_object import ObjectStore
from tb_footprint_plugin.storage.stores import open_store

PROFILE = "exp/plugins/profile/2026_01_01_00_00_00/host.xplane.pb"
THEIRS = b"a writer's profile, put while the run came back"


@pytest.mark.parametrize("kind", ["az"])
def test_an_object_put_between_the_look_and_the_put_back_is_kept(kind, tmp_path, logdir_on):  # noqa: F811
    url = logdir_on(kind, reduced_and_retired_source(tmp_path / "src"))
    store = open_store(url)
    assert isinstance(store, ObjectStore)
    original = store.read_range(PROFILE, 0, 1 << 20)
    drop = {"name": "drop-profiles", "rules": {c: "delete" for c in ("profile_xplane", "profile_other")}}
    rep = api.reduce_logdir(url, policy=drop, dry_run=False, quiet_period=0, verify_backends=("python",))
    op = next(o.op_id for o in rep.outcomes if o.run == "exp")
    assert store.stat(PROFILE) is None, "the policy removes the profile"
    real = bucket_restore.run_listing
    made, looks = [], []

    def look(*a, **kw):
        got = real(*a, **kw)
        looks.append(1)
        # the put-back's look is the second listing (the first, before the journal, checks for a
        # new run of the name); an object found there at the look is kept in the vault and the
        # original put over it (test_bucket_restore_written_again): this one comes after it
        if len(looks) == 2 and not made:
            made.append(PROFILE)
            store.put(PROFILE, THEIRS)  # right after the look found the key absent
        return got

    mp = pytest.MonkeyPatch()
    mp.setattr(bucket_restore, "run_listing", look)
    try:
        outs = api.restore(url, op=op)
    finally:
        mp.undo()
    assert made, "the restore never looked"
    assert store.read_range(PROFILE, 0, 1 << 20) == THEIRS, "the writer's object was replaced"
    assert "exist again" in outs[0].reason and PROFILE in outs[0].reason, outs[0].to_dict()
    # the original is still whole in the vault (purge keeps it)
    kept = [e.key for e in store.list(".tb-footprint", every_key=True)
            if e.size == len(original) and store.read_range(e.key, 0, 1 << 20) == original]
    assert kept, "the original is nowhere"
