"""A reduce killed between two unlinks of its swap, rolled forward by the next start, gives the
removed folders their mtime from before the swap (review R14 F1, second half). Before, each call
of ``apply_swap`` took the folders' mtimes at its own start: the roll-forward found a folder the
killed swap had already unlinked files from (its mtime already today's) and journaled that, so a
restore remade the folder with the time of the crash. The mode and mtime are now taken once, before
the first change, into the ``swap`` record, and every ``apply_swap`` of the operation uses them."""
import os

import pytest

from conftest import copy_real
from helpers_crash import Killed
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Recovery
from tb_footprint_plugin.storage import throttle

pytestmark = pytest.mark.usefixtures("disarm_faults")
T = 1_672_531_200_123_456_789  # 2023-01-01, with nanoseconds


def _tree(root):
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            if rel.startswith(".tb-footprint"):
                continue
            st = os.lstat(p)
            out[rel] = (st.st_mode, st.st_mtime_ns)
    return out


def test_removed_folders_keep_their_time_after_a_kill_between_two_unlinks(tmp_path, monkeypatch):
    logdir = copy_real("tf", tmp_path / "L" / "tf").parent
    run = logdir / "tf" / "summary_mix"
    (session,) = (run / "plugins" / "profile").iterdir()
    os.chmod(session, 0o700)
    for d, dirs, files in os.walk(logdir, topdown=False):
        for n in dirs + files:
            os.utime(os.path.join(d, n), ns=(T, T), follow_symlinks=False)
    before = _tree(logdir)
    real, seen = throttle.unlink, []

    def unlink_then_killed(p, *a, **kw):
        real(p, *a, **kw)
        if os.path.dirname(str(p)) == str(session):
            seen.append(p)
            raise Killed()  # after an unlink in the folder: its mtime has changed, its rmdir not journaled

    # no failpoint between two unlinks (local engine only): the swap's unlink helper is wrapped
    monkeypatch.setattr(throttle, "unlink", unlink_then_killed)
    with pytest.raises(Killed):
        api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0, runs=["tf/summary_mix"])
    monkeypatch.setattr(throttle, "unlink", real)
    assert len(seen) == 1 and session.is_dir() and os.lstat(session).st_mtime_ns != T
    outs = api.recover_logdir(str(logdir))
    assert [o.action for o in outs if o.run == "tf/summary_mix" and "swap finished" in o.detail] == \
        [Recovery.COMPLETED], [vars(o) for o in outs]
    assert not session.exists()
    (m,) = [m for m in api.operations(str(logdir)) if m.get("kind") == "reduce"]
    (rec,) = [d for d in m.get("removed_dirs") or [] if d["path"] == os.path.relpath(session, logdir)]
    assert (rec["mode"], rec["mtime_ns"]) == (0o700, T)
    outs = api.restore(str(logdir), run="tf/summary_mix")
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    after = _tree(logdir)
    assert {k: v for k, v in after.items() if v != before.get(k)} == {}
    assert after.keys() == before.keys()


@pytest.mark.parametrize("dirs", [None], ids=["older_journal"])
def test_a_swap_record_without_usable_dirs_rolls_forward_as_before(tmp_path, monkeypatch, dirs):
    """A journal of an earlier version (a ``swap`` record without ``dirs``) rolls forward as
    before: the folders' mode and mtime are taken from the folders at the roll-forward's start.
    (``dirs`` not of the shape written is refused by ``trust.check_journal`` since task N6 item 4:
    tests/test_trust_journal_fields.py.)"""
    import json

    logdir = copy_real("tf", tmp_path / "L" / "tf").parent
    run = logdir / "tf" / "summary_mix"
    (session,) = (run / "plugins" / "profile").iterdir()
    os.chmod(session, 0o700)
    real = throttle.unlink

    def unlink_then_killed(p, *a, **kw):
        real(p, *a, **kw)
        if os.path.dirname(str(p)) == str(session):
            raise Killed()

    monkeypatch.setattr(throttle, "unlink", unlink_then_killed)
    with pytest.raises(Killed):
        api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0, runs=["tf/summary_mix"])
    monkeypatch.setattr(throttle, "unlink", real)
    (journal,) = [os.path.join(d, n) for d, _, ns in os.walk(logdir / ".tb-footprint") for n in ns
                  if n.endswith(".jsonl") and os.path.basename(d) == "journal"]
    lines = []
    for line in open(journal).read().splitlines():
        r = json.loads(line)
        if r["type"] == "swap":
            assert r.pop("dirs")  # written by this version
            if dirs is not None:
                r["dirs"] = dirs
        lines.append(json.dumps(r, sort_keys=True))
    open(journal, "w").write("\n".join(lines) + "\n")
    crash_time = os.lstat(session).st_mtime_ns
    outs = api.recover_logdir(str(logdir))
    assert [o.action for o in outs if o.run == "tf/summary_mix" and "swap finished" in o.detail] == \
        [Recovery.COMPLETED], [vars(o) for o in outs]
    (m,) = [m for m in api.operations(str(logdir)) if m.get("kind") == "reduce"]
    (rec,) = [d for d in m.get("removed_dirs") or [] if d["path"] == os.path.relpath(session, logdir)]
    assert (rec["mode"], rec["mtime_ns"]) == (0o700, crash_time)
