"""A reduction's restore on a disk looks at what stands at the run's path without following a link
(invariant 4). Its look for the new-run rule (``retire_rules.new_run_refusal``) was an ``os.walk``
by path (``openfiles.files_under``): a link that IS the run's path was followed, the folder it
points to outside the logdir listed and its file named in the refusal, and a link to a folder
inside the run was no name at all, so a run holding only such a link was restored into. It is now
the look of the disk's unretire (``engine.standing.standing_at``): the link is a name, never a way."""
from __future__ import annotations

import math
import os

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine.retire_rules import output_gone_words


def _write(run) -> None:
    with synth.EventWriter(str(run), timestamp=1_500_000_000) as w:
        for s in range(40):
            w.scalar("loss", s, math.exp(-s / 10.0))
            w.image("img", s, synth.make_png(8, 8, seed=s), 8, 8)


def _tree(root) -> dict:
    out = {}
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x != ".tb-footprint"]
        for n in files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (open(p, "rb").read(), st.st_mtime_ns, st.st_mode)
    return out


def _reduced(logdir) -> list:
    before = _tree(logdir)
    rep = api.reduce_logdir(str(logdir), None, policy="archive", dry_run=False, quiet_period=0,
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], [o.reason for o in rep.outcomes]
    out = sorted(k for k, v in _tree(logdir).items() if before.get(k) != v)
    assert out, "the reduction changed nothing"
    return out


def _outside(tmp_path):
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_bytes(b"not the logdir's\n")
    os.utime(d / "secret.txt", (1_400_000_000, 1_400_000_000))
    return d


@pytest.fixture
def looked_at(monkeypatch):
    """Every folder listed while the restore runs, resolved (a path or a descriptor)."""
    seen = []

    def where(p):
        if isinstance(p, int):
            return os.readlink(f"/proc/self/fd/{p}")
        return os.path.realpath(os.fsdecode(p)) if p is not None else os.getcwd()

    for name in ("scandir", "listdir"):
        real = getattr(os, name)

        def spy(p=None, _real=real):
            seen.append(where(p))
            return _real() if p is None else _real(p)
        monkeypatch.setattr(os, name, spy)
    return seen


def _never_listed(seen, outside) -> None:
    out = os.path.realpath(outside)
    assert seen, "the spy saw nothing"
    assert not [p for p in seen if p == out or p.startswith(out + os.sep)], seen


def test_a_link_at_the_runs_path_is_a_name_never_followed(tmp_path, monkeypatch, looked_at):
    logdir = tmp_path / "logs"
    _write(logdir / "r")
    _reduced(logdir)
    outside = _outside(tmp_path)
    os.rename(logdir / "r", tmp_path / "aside")
    os.symlink(outside, logdir / "r")
    was = _tree(outside)
    looked_at.clear()
    (o,) = api.restore(str(logdir))
    assert (o.status, o.code) == (Outcome.FAILED, Failure.RESTORE_BLOCKED), o.to_dict()
    assert o.reason == output_gone_words("r", "r"), o.reason  # the link itself named, not what it points to
    assert "secret" not in o.reason
    _never_listed(looked_at, outside)
    monkeypatch.undo()
    assert os.readlink(logdir / "r") == str(outside) and _tree(outside) == was
    assert not api.unfinished(str(logdir))["unfinished_operations"]
    # nothing lost: the link moved away and the run put back, the restore goes through
    os.unlink(logdir / "r")
    os.rename(tmp_path / "aside", logdir / "r")
    (o,) = api.restore(str(logdir))
    assert o.status == Outcome.RESTORED, o.reason


def test_a_link_to_a_folder_inside_the_run_is_a_name_it_never_had(tmp_path, monkeypatch, looked_at):
    logdir = tmp_path / "logs"
    _write(logdir / "r")
    old = _tree(logdir)
    output = _reduced(logdir)
    for p in output:
        os.unlink(logdir / p)  # the reduction's output gone: only the link stands in the run
    outside = _outside(tmp_path)
    os.symlink(outside, logdir / "r" / "plugins")
    was, now = _tree(outside), _tree(logdir)
    looked_at.clear()
    (o,) = api.restore(str(logdir))
    assert (o.status, o.code) == (Outcome.FAILED, Failure.RESTORE_BLOCKED), o.to_dict()
    assert o.reason == output_gone_words("r", "r/plugins"), o.reason
    _never_listed(looked_at, outside)
    monkeypatch.undo()
    assert _tree(logdir) == now and _tree(outside) == was
    assert os.readlink(logdir / "r" / "plugins") == str(outside)
    # the way the words give: the link moved away, restored, the run as it was
    os.unlink(logdir / "r" / "plugins")
    (o,) = api.restore(str(logdir))
    assert o.status == Outcome.RESTORED, o.reason
    assert _tree(logdir) == old


def test_the_logdirs_own_run_is_looked_at_from_its_root(tmp_path):
    """Guard (passes before too): the logdir's own run (".") is looked at from the logdir's root,
    its names bare as the reduction recorded them, and restored."""
    logdir = tmp_path / "logs"
    _write(logdir)
    old = _tree(logdir)
    _reduced(logdir)
    (o,) = api.restore(str(logdir))
    assert (o.run, o.status) == (".", Outcome.RESTORED), o.to_dict()
    assert _tree(logdir) == old
