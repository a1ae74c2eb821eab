"""A reduce's rewritten event file has the original's permission bits (helper S's note, r37): it
came out with the umask's 0644, so a private (0600, 0640) event file's reduced records were
readable by anyone until a restore. Never set-user-id, set-group-id or sticky."""
import os
import stat
import time

import pytest

from tb_footprint_plugin import api, synth


def _mode(p) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o444])
def test_the_reduced_event_file_keeps_the_originals_mode(tmp_path, mode):
    run = tmp_path / "logdir" / "run"
    with synth.EventWriter(str(run)) as w:
        for s in range(30):
            w.scalar("loss", s, 1.0 / (s + 1))
            w.image("img", s, synth.make_png(32, 32, seed=s), 32, 32)
        path = w.path
    os.chmod(path, mode)
    old = time.time() - 7200
    os.utime(path, (old, old))
    before = os.path.getsize(path)
    (o,) = api.reduce_logdir(str(tmp_path / "logdir"), policy="archive", dry_run=False,
                             verify_backends=("python",)).outcomes
    assert str(o.status) == "verified", o.reason
    assert os.path.getsize(path) < before, "the event file was not rewritten"
    assert _mode(path) == mode, oct(_mode(path))
    (o,) = api.restore(str(tmp_path / "logdir"))
    assert str(o.status) == "restored" and _mode(path) == mode, (o.reason, oct(_mode(path)))
