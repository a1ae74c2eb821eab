"""The folders a ``BlobStore`` makes in a folder store (``data/``, ``data/xx/``, ``index/``,
``pending/``) are private, 0700, as every state folder of the tool is (review R24's note: a bucket's
blob folder made ``data/`` and ``index/`` with the umask's 0755, so the names of its blobs — the
sha256 of the originals — could be listed by anyone when the folder given was itself 0755). One
of ours already there with the umask's mode (an older version's) is accepted as it is, never
refused. Real files; the bucket case on moto with the real reduce."""
import os
import stat

import pytest

from tb_footprint_plugin import api, codes, demo
from tb_footprint_plugin.storage.blobstore import BlobSource, BlobStore
from tb_footprint_plugin.storage.store_posix import PosixStore

pytestmark = pytest.mark.usefixtures("disarm_faults")

STATE = ".tb-footprint"
DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _src(data: bytes) -> BlobSource:
    import hashlib
    import io
    return BlobSource(hashlib.sha256(data).hexdigest(), len(data), lambda d=data: io.BytesIO(d))


def _modes(root):
    """rel folder -> its permission bits, for every folder below ``root``."""
    out = {}
    for d, ds, _ in os.walk(root):
        for n in ds:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = stat.S_IMODE(os.lstat(p).st_mode)
    return out


def test_a_blob_stores_folders_are_made_0700(tmp_path, umask_022):
    root = tmp_path / "store"
    root.mkdir(mode=0o755)
    bs = BlobStore(PosixStore(str(root)), pack_below=1024)
    bs.add([_src(os.urandom(300)) for _ in range(3)] + [_src(os.urandom(4096))])
    modes = _modes(root)
    assert {"data", "index", "pending"} <= set(modes), modes
    assert all(m == 0o700 for m in modes.values()), {k: oct(m) for k, m in modes.items()}


def test_a_plain_folder_stores_folders_keep_the_umask(tmp_path, umask_022):
    """The other side: a store of a user's files (a logdir's) makes its folders as before."""
    store = PosixStore(str(tmp_path))
    store.put("run/plugins/x.txt", b"x")
    assert stat.S_IMODE(os.lstat(tmp_path / "run" / "plugins").st_mode) == 0o755


def test_folders_of_ours_made_0755_before_are_accepted(tmp_path, umask_022):
    root = tmp_path / "store"
    for sub in ("", "data", "index"):
        (root / sub).mkdir(mode=0o755, exist_ok=True)
    bs = BlobStore(PosixStore(str(root)), pack_below=1024)
    refs = bs.add([_src(os.urandom(300)) for _ in range(3)])
    assert all(bs.open(r.sha).read() for r in refs)
    modes = _modes(root)
    assert modes["data"] == modes["index"] == 0o755  # left as they were
    assert modes["pending"] == 0o700 and all(m == 0o700 for k, m in modes.items() if k.startswith("data/"))


def test_a_buckets_blob_folder_given_0755_gets_private_subfolders(s3_bucket, tmp_path, umask_022):
    """The real case: a bucket reduced into an existing 0755 folder of ours (``--backup-dir``)."""
    root = tmp_path / "demo"
    demo.generate_demo(str(root), scale=0.05)
    for p in root.glob(".footprint-demo*"):
        p.unlink()
    url = s3_bucket.upload(root, "pd")
    before = s3_bucket.hashes("pd", skip=(STATE + "/",))
    folder = tmp_path / "blobs"
    folder.mkdir(mode=0o755)
    rep = api.reduce_logdir(url, backup_dir=str(folder), policy=DROP, dry_run=False, quiet_period=0)
    assert [o for o in rep.outcomes if o.status == codes.Outcome.VERIFIED], rep.to_dict()
    modes = _modes(folder)
    assert modes["data"] == modes["index"] == modes["places"] == 0o700, {k: oct(m) for k, m in modes.items()}
    assert all(m == 0o700 for k, m in modes.items() if k.startswith(("data/", "pending"))), modes
    # a folder of ours made 0755 (by an older version) is accepted: the restore gives every run back
    os.chmod(folder / "index", 0o755)
    res = api.restore(url, backup_dir=str(folder))
    assert res and {o.status.value for o in res} == {"restored"}, [o.to_dict() for o in res]
    assert s3_bucket.hashes("pd", skip=(STATE + "/",)) == before
