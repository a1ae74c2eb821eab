"""Times before 1970 are negative ``st_mtime_ns``; a restore gives them back exactly, for files and
for the folders a reduce removed (review R14 F7). Before, records with a negative ``mtime_ns``
were taken as implausible: files fell back to the float ``mtime`` (off by 1 ns) and removed
folders got the restore's time."""
import os

from conftest import copy_real
from tb_footprint_plugin import api
from tb_footprint_plugin.storage.paths import plausible_mtime_ns


def test_negative_times_are_plausible_and_the_extremes_are_not():
    assert plausible_mtime_ns(-86_400_000_000_001) == -86_400_000_000_001
    assert plausible_mtime_ns(-5) == -5 and plausible_mtime_ns(0) == 0
    assert plausible_mtime_ns(-(1 << 63)) is None and plausible_mtime_ns(1 << 63) is None
    assert plausible_mtime_ns(True) is None and plausible_mtime_ns(1.5) is None


def test_a_restore_gives_back_times_before_1970_to_the_nanosecond(tmp_path):
    logdir = copy_real("jax", tmp_path / "L" / "jax").parent
    base = logdir / "jax" / "profiled" / "plugins" / "profile"
    s1, s2 = sorted(base.iterdir())
    f_old = s1 / "vm.xplane.pb"
    os.utime(f_old, ns=(-86_400_000_000_001,) * 2)
    os.utime(s2, ns=(-5, -5))
    os.utime(s1, ns=(-1_500_000_000_000_000_007,) * 2)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0, runs=["jax/profiled"])
    assert [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]
    assert not s1.exists() and not s2.exists()
    outs = api.restore(str(logdir), run="jax/profiled")
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert os.lstat(f_old).st_mtime_ns == -86_400_000_000_001
    assert os.lstat(s2).st_mtime_ns == -5
    assert os.lstat(s1).st_mtime_ns == -1_500_000_000_000_000_007
