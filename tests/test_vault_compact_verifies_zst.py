"""Issue #27 audit gap 4: a compaction decodes and hashes its new ``.zst`` before the plain blob
is unlinked.

``Vault._compact_locked`` writes ``<sha>.zst`` as a temp, then reads it back through a descriptor
of that very inode, decompresses and hashes it, and only if it gives the blob's bytes renames it
and unlinks the plain blob. These tests damage the temp between its write and that check (the
``compact_written`` failpoint): the compaction is refused (``KEPT_DAMAGED``), the plain blob stays
as it was, no temp or ``.zst`` is left, the backup restores exactly, and a later compaction of the
undamaged blob succeeds. Without the decode-and-hash check the damaged ``.zst`` would replace the
only backup.
"""
import hashlib
import os
from pathlib import Path

import pytest

from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.vault import COMPRESSED, KEPT_DAMAGED, ZST_TMP_SUFFIX, Vault
from tb_footprint_plugin.storage import zst

DATA = b"step=17 loss=0.25 histogram bucket record " * 40_000  # compresses far below MIN_SAVING


@pytest.fixture(autouse=True)
def _disarm():
    yield
    faults.disarm_all()


def _stored(v: Vault, path: Path, data: bytes) -> str:
    """``data`` backed up from ``path`` (a hard link), then the original name removed, as the
    swap does: the plain blob is the only copy. Returns its digest."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    v.store(str(path), sha)
    os.unlink(path)
    return sha


def _the_temp(v: Vault, sha: str) -> Path:
    folder = Path(v.blob_path(sha)).parent
    temps = [p for p in folder.iterdir() if p.name.startswith(sha + ZST_TMP_SUFFIX)]
    assert len(temps) == 1, sorted(p.name for p in folder.iterdir())
    return temps[0]


def _flip_a_byte(v: Vault, sha: str):
    def hook():
        tmp = _the_temp(v, sha)
        data = bytearray(tmp.read_bytes())
        data[len(data) // 2] ^= 0xFF  # inside the compressed payload, past the frame header
        with open(tmp, "r+b") as f:  # the same inode the compaction wrote and will check
            f.write(bytes(data))
            f.flush()
            os.fsync(f.fileno())
    return hook


def _other_bytes(v: Vault, sha: str, tmp_path: Path):
    """A well-formed zstd frame of other bytes of the same length: only hashing the decoded
    bytes (not merely decoding them) tells it from the blob's."""
    def hook():
        other = tmp_path / "other.bin"
        other.write_bytes(DATA[:-1] + b"!")
        tmp = _the_temp(v, sha)
        with open(other, "rb") as src, open(tmp, "r+b") as out:
            out.truncate(0)
            zst.compress_stream(src, out, len(DATA))
            out.flush()
            os.fsync(out.fileno())
    return hook


@pytest.mark.parametrize("damage", ["flipped_byte", "other_bytes"])
def test_a_zst_damaged_before_its_check_is_refused_and_the_plain_blob_stays(tmp_path, damage):
    v = Vault(str(tmp_path / ".tb-footprint"))
    v.ensure()
    sha = _stored(v, tmp_path / "logs" / "events.out.tfevents.1", DATA)
    plain = Path(v.blob_path(sha))
    ident = (plain.stat().st_dev, plain.stat().st_ino, plain.stat().st_mtime_ns)
    hits = []
    hook = _flip_a_byte(v, sha) if damage == "flipped_byte" else _other_bytes(v, sha, tmp_path)
    faults.arm("compact_written", lambda: (hits.append(1), hook()))

    assert v.compact(sha) == KEPT_DAMAGED
    assert hits == [1], "the failpoint compact_written was never reached"
    faults.disarm_all()

    # the plain blob is untouched: same inode, same time, same bytes; nothing else is left
    assert (plain.stat().st_dev, plain.stat().st_ino, plain.stat().st_mtime_ns) == ident
    assert plain.read_bytes() == DATA
    assert v.blob_form(sha) == "plain" and v.check_blob(sha)
    assert sorted(p.name for p in plain.parent.iterdir()) == [sha]  # no .zst, no temp
    # the backup restores exactly
    dest = tmp_path / "back" / "events.out.tfevents.1"
    v.restore_blob(sha, str(dest), mode=0o640, mtime_ns=1_700_000_000_123_456_789)
    assert dest.read_bytes() == DATA
    assert dest.stat().st_mtime_ns == 1_700_000_000_123_456_789 and (dest.stat().st_mode & 0o777) == 0o640
    # undamaged, the same blob compacts and still verifies
    assert v.compact(sha) == COMPRESSED and v.check_blob(sha)
    assert sorted(p.name for p in plain.parent.iterdir()) == [sha + ".zst"]
