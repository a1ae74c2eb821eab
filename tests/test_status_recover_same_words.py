"""Review R16 F6 (fourth bullet), N8's remainder: for a reduce killed before its swap, ``status``
said "settling only removes the attempt's staging files and journal" and ``recover`` then said
"originals put back byte for byte" — neither true: nothing was ever changed, and recover also drops
the attempt's backups and records it rolled back. Both now say what recovery does
(``health.recover_will``: status prints it, recovery's outcome uses the same words)."""
import shutil

from conftest import copy_real
from helpers_cli import cli_env, run_cli as tbf
from tb_footprint_plugin.engine import health


def test_killed_before_swap_status_and_recover_say_the_same(tmp_path):
    logdir = tmp_path / "logdir"
    shutil.copytree(copy_real("tf/keras_profiled", tmp_path / "src") / "train", logdir / "a")
    env = dict(cli_env(), TB_FOOTPRINT_FAILPOINTS="reduce.verify=kill")
    p = tbf("reduce", logdir, "--verify", "python", "--quiet-period", "0", "-y", env=env)
    assert p.returncode == -9, p.stdout + p.stderr
    st = tbf("status", logdir)
    said = st.stdout + st.stderr
    assert health.BEFORE_SWAP in said, said
    rec = tbf("recover", logdir)
    assert health.BEFORE_SWAP in rec.stdout and "originals put back" not in rec.stdout, rec.stdout
