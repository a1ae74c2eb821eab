"""Review R19 F4 (#28): a restore whose run has names with links outside its reduced files (a
``cp -al logs logs.snap`` beside the logdir makes that every run) walked every file entry of every
manifest to find their other names (``Relinks.join``): ``restore --all`` over N runs did N passes
over all N manifests' entries. Now the entries are indexed by inode once for the command's
restores and each run looks up only its own inodes. Counted by the calls of ``relink.inode_of``
(every entry looked at once per walk): before, 8 runs cost 3 + 8 looks per entry (3 in its
run's own set-up, one in each run's walk); now 5 (indexed once, looked up once), whatever N."""
import os
import subprocess

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine import relink

RUNS = 8


def _logdir(root):
    logdir = root / "logs"
    for i in range(RUNS):
        run = logdir / f"run{i}"
        with synth.EventWriter(str(run), timestamp=1_700_000_000) as w:
            for step in range(3):
                w.scalar("loss", step, 1.0 / (step + 1))
        synth.write_profile_session(str(run), synth.session_name_for(1_700_000_600), "host", n_events=5, seed=i)
    for d, dirs, files in os.walk(logdir):
        for n in dirs + files:
            os.utime(os.path.join(d, n), (1_700_001_000, 1_700_001_000))
    subprocess.run(["cp", "-al", str(logdir), str(root / "logs.snap")], check=True)  # the snapshot habit
    return logdir


def test_each_restore_looks_up_its_own_inodes_only(tmp_path, monkeypatch):
    logdir = _logdir(tmp_path)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0,
                            verify_backends=("python",))
    assert sum(o.status == Outcome.VERIFIED for o in rep.outcomes) == RUNS, [o.to_dict() for o in rep.outcomes]
    entries = sum(len(m["files"]) for m in api.operations(str(logdir)) if m["kind"] == "reduce")
    assert entries >= RUNS, entries
    looks = []
    real = relink.inode_of
    monkeypatch.setattr(relink, "inode_of", lambda f: looks.append(1) or real(f))
    outs = api.restore(str(logdir))
    assert [o.status for o in outs] == [Outcome.RESTORED] * RUNS, [(o.status, o.reason) for o in outs]
    assert all("links outside" in o.reason for o in outs), outs[0].reason  # every run had such names
    assert len(looks) <= 5 * entries, (len(looks), entries)  # 88 for 8 entries before, 40 now
