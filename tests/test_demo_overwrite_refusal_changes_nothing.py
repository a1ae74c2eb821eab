"""Review R20 F1: ``demo DIR --overwrite`` over a state folder that also holds a user's backup
restored the demo's own reductions BEFORE its refusals (a demo file written to since; a new demo
file that would replace one the demo did not write), then refused. Now every refusal is decided
first and the reductions are restored only right before the previous demo's files are removed:
a refused overwrite changes nothing, and says so."""
import json
import math
import os

from helpers_cli import run_cli as cli
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.demo import MARKER, generate_demo

SCALE = 0.02


def _demo_with_a_user_backup(target):
    """The demo, a run of the user's beside it, every run reduced: the state folder must stay."""
    generate_demo(str(target), scale=SCALE)
    with synth.EventWriter(str(target / "mine")) as w:
        for s in range(10):
            w.scalar("loss", s, math.exp(-s))
    synth.write_profile_session(str(target / "mine"), synth.session_name_for(synth.DEFAULT_TIMESTAMP),
                                n_events=300, seed=5)
    for d, dirs, files in os.walk(target / "mine"):
        for n in dirs + files:
            os.utime(os.path.join(d, n), (1_600_000_000, 1_600_000_000))
    assert api.reduce_logdir(str(target), policy="archive", dry_run=False, quiet_period=0,
                             verify_backends=("python",)).ok
    ops = sorted(o["op_id"] for o in api.restorable(str(target)))
    assert len(ops) > 1 and "mine" in {o["run"] for o in api.restorable(str(target))}
    return ops


def _tree(root):
    """Every file under ``root`` but the state folder: (size, mtime) by name."""
    out = {}
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if x != ".tb-footprint"]
        for n in names:
            st = os.lstat(os.path.join(d, n))
            out[os.path.relpath(os.path.join(d, n), root)] = (st.st_size, st.st_mtime_ns)
    return out


def test_a_demo_file_written_to_refuses_before_any_reduction_is_restored(tmp_path):
    target = tmp_path / "dm"
    ops = _demo_with_a_user_backup(target)
    marker = json.loads((target / MARKER).read_text())
    written = next(target / f for f in marker["files"] if "tfevents" in f and (target / f).exists())
    with open(written, "ab") as f:  # a demo file the user wrote to: the overwrite refuses
        f.write(b"user bytes")
    before = _tree(target)
    p = cli("demo", target, "--scale", str(SCALE), "--overwrite")
    assert p.returncode != 0, (p.stdout, p.stderr)
    assert sorted(o["op_id"] for o in api.restorable(str(target))) == ops, \
        "the refused overwrite restored the demo's reductions"
    assert _tree(target) == before
    assert "nothing was changed" in p.stderr and "restored" not in p.stderr, p.stderr


def test_a_clash_refuses_before_any_reduction_is_restored(tmp_path):
    target = tmp_path / "dm"
    ops = _demo_with_a_user_backup(target)
    marker = json.loads((target / MARKER).read_text())
    # an event file the marker no longer lists: the new demo's file would replace one it did not write
    rel = next(f for f in marker["files"] if "tfevents" in f and (target / f).exists())
    marker["files"].remove(rel)
    del marker["digests"][rel]
    (target / MARKER).write_text(json.dumps(marker))
    os.chmod(target / MARKER, 0o644)
    before = _tree(target)
    p = cli("demo", target, "--scale", str(SCALE), "--overwrite")
    assert p.returncode != 0, (p.stdout, p.stderr)
    assert sorted(o["op_id"] for o in api.restorable(str(target))) == ops, \
        "the refused overwrite restored the demo's reductions"
    assert _tree(target) == before
    assert "would replace files the demo did not write" in p.stderr and "nothing was changed" in p.stderr, p.stderr


def test_a_demo_reduction_under_a_users_newer_one_refuses_before_anything(tmp_path):
    """A run the demo wrote, reduced, then given a profile session of the user's and reduced again:
    the demo's reduction can be restored only after the user's, so the overwrite refuses up front
    (it used to restore the other runs' reductions first, then fail on this one)."""
    target = tmp_path / "dm"
    generate_demo(str(target), scale=SCALE)
    assert api.reduce_logdir(str(target), policy="archive", dry_run=False, quiet_period=0,
                             verify_backends=("python",)).ok
    run = target / "tf_summary_mix"
    synth.write_profile_session(str(run), synth.session_name_for(1_600_000_000), n_events=300, seed=9)
    for d, dirs, files in os.walk(run / "plugins"):
        for n in dirs + files:
            os.utime(os.path.join(d, n), (1_600_000_000, 1_600_000_000))
    rep = api.reduce_logdir(str(target), policy="archive", dry_run=False, quiet_period=0,
                            verify_backends=("python",))
    assert "tf_summary_mix" in {o.run for o in rep.outcomes if o.status == "verified"}, \
        [(o.run, o.status, o.reason) for o in rep.outcomes]
    ops = sorted(o["op_id"] for o in api.restorable(str(target)))
    before = _tree(target)
    p = cli("demo", target, "--scale", str(SCALE), "--overwrite")
    assert p.returncode != 0, (p.stdout, p.stderr)
    assert sorted(o["op_id"] for o in api.restorable(str(target))) == ops, \
        "the refused overwrite restored the demo's reductions"
    assert _tree(target) == before
    assert "lies under a newer one" in p.stderr and "nothing was changed" in p.stderr, p.stderr
