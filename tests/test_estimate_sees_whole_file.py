"""The dry run's estimate of what the compressed vault keeps decides from the same windows over
the whole file as the compaction does (``zst.sample``): it compressed only each file's head, so a
file random at its start and compressible after (an event file whose first records are images, an
xprof file with a packed header) was estimated as stored whole while the reduce stored it
compressed — the plan said less than the reduce did."""
import os

from tb_footprint_plugin.engine import usage
from tb_footprint_plugin.storage import zst

MiB = 1 << 20


class Sink:
    def write(self, b) -> int:
        return len(b)


def test_a_file_random_at_its_start_is_estimated_as_compaction_stores_it(tmp_path):
    p = tmp_path / "random-then-zeros.bin"
    with open(p, "wb") as f:
        f.write(os.urandom(9 * MiB))  # more than the old head's 4 MiB, and than zst.PROBE_BYTES
        f.write(bytes(27 * MiB))
    size = p.stat().st_size
    est = usage.estimate_compressed([(str(p), size)])
    with open(p, "rb") as src:
        got = zst.compress_stream(src, Sink(), size)  # what a compaction writes
    assert got is not None  # compaction compresses it
    assert est < 0.5 * size  # before: estimated whole (its head does not compress)
    assert abs(est - got[1]) < 0.2 * size


def test_an_incompressible_file_is_still_estimated_whole(tmp_path):
    p = tmp_path / "random.bin"
    p.write_bytes(os.urandom(12 * MiB))
    assert usage.estimate_compressed([(str(p), 12 * MiB)]) == 12 * MiB
