"""A bucket's verify names the damaged index object of its blob folder that alone may list a
missing blob, code ``backup_index_damaged`` (as restore does since 3bf6099, and a disk's verify),
not "backups DAMAGED" alone (review R22 F3's words; helper F2's patch to bucket_catalogue)."""
import pytest

from tb_footprint_plugin import api, codes
from tb_footprint_plugin.engine import bucket_blob_index
from test_pack_index_rebuilt_bucket import _damage, demo_logdir, reduced  # noqa: F401 - fixtures

pytestmark = pytest.mark.usefixtures("disarm_faults")


def test_verify_names_the_folders_damaged_index_when_it_alone_may_list_a_blob(reduced, monkeypatch):
    """With the rebuild a no-op (a blob the walk could not find), verify's rows say the blob is
    hidden by the damaged index object (named, with recover), code ``backup_index_damaged``, not
    "backups DAMAGED" alone (R22 F3's words on a bucket's blob folder)."""
    url, folder, _before, _prefix = reduced
    damaged = _damage(folder)
    monkeypatch.setattr(bucket_blob_index, "rebuild", lambda bv, manifests: None)
    rows = api.verify(url, backup_dir=folder)
    bad = [r for r in rows if not r.get("ok")]
    assert bad and all(r.get("code") == codes.Failure.BACKUP_INDEX_DAMAGED for r in bad), rows
    assert all(damaged[0] in d and "recover" in d for r in bad for d in r["damaged_backups"]), rows
