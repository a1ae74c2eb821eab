"""Review R22 F5: a symlink planted at a retired run's freed name (another user, in a sticky shared
logdir) stopped the whole ``restore`` of every retirement with a command-level error, so the runs
after it were not restored. It is now that run's own refusal (``restore_blocked``, naming the link
and its owner, nothing followed), as a stranger's folder there is, and the others are restored."""
from __future__ import annotations

import os

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Failure, Outcome

pytestmark = pytest.mark.usefixtures("disarm_faults")

OLD = 1_600_000_000


def _run(logdir, name):
    with synth.EventWriter(str(logdir / name)) as w:
        for step in range(3):
            w.scalar("loss", step, 1.0 / (step + 1))
    synth.write_profile_session(str(logdir / name), synth.session_name_for(synth.DEFAULT_TIMESTAMP), n_events=50)


def test_a_link_at_a_retired_run_s_name_refuses_that_run_and_the_others_come_back(tmp_path):
    logdir = tmp_path / "logs"
    for name in ("other", "jp"):
        _run(logdir, name)
    for d, dirs, files in os.walk(logdir):
        for n in dirs + files:
            os.utime(os.path.join(d, n), (OLD, OLD))
    for name in ("other", "jp"):
        rep = api.retire(str(logdir), api.retire_rule(runs=[name]), dry_run=False, quiet_period=0)
        assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], [(o.status, o.reason) for o in rep.outcomes]
    assert not (logdir / "jp").exists() and not (logdir / "other").exists()
    private = tmp_path / "private"
    private.mkdir()
    os.symlink(private, logdir / "jp")

    outs = {o.run: o for o in api.restore(str(logdir))}
    assert set(outs) == {"jp", "other"}, outs
    assert outs["other"].status == Outcome.RESTORED, outs["other"].reason
    assert (logdir / "other").is_dir() and not (logdir / "other").is_symlink()
    jp = outs["jp"]
    assert jp.status == Outcome.FAILED and jp.code == Failure.RESTORE_BLOCKED, (jp.status, jp.code, jp.reason)
    assert "jp is a symbolic link" in jp.reason and "remove that link" in jp.reason, jp.reason
    assert os.listdir(private) == []  # nothing put through the link
    # once the link is gone, the run comes back
    os.unlink(logdir / "jp")
    [again] = api.restore(str(logdir), run="jp")
    assert again.status == Outcome.RESTORED, again.reason
