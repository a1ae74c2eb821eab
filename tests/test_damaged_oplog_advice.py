"""Review R16 F11: one undecodable piece of the operation log (it may have held a manifest) made
``restore RUN`` print "✓ RUN: restored" and then "✗ RUN: failed [restore_blocked]" for the same
run (``restore --all``: "✗ : failed" with no name), and every message sent the user to
``recover``, which cannot mend it (FAILSAFE: look at the file, move it aside once you know what it
held). The damage is now said as the state's, with FAILSAFE's advice, and the run stays restored."""
import json

from helpers_cli import run_cli as tbf
from test_issue29_gaps_purge import reduced_copies


def _plant_garbage_piece(logdir):
    seg = logdir / ".tb-footprint" / "oplog" / "segments" / "20261204T235959-1-deadbeef.00000.zst"
    seg.write_bytes(b"garbage, not a zstd frame\n")
    return seg


def test_damaged_piece_is_the_states_and_never_sends_to_recover(tmp_path):
    logdir = reduced_copies(tmp_path, ("a", "b"))
    seg = _plant_garbage_piece(logdir)
    p = tbf("restore", logdir, "a", "--yes")
    out = p.stdout + p.stderr
    assert p.returncode == 1, out  # damage that may hide a backup: exit 1, as FAILSAFE says
    lines = p.stdout.splitlines()
    assert any(ln.startswith("✓ a: restored") for ln in lines), out
    assert not any(ln.startswith("✗ a:") or ln.startswith("✗ :") for ln in lines), out
    blocked = [ln for ln in lines if "[restore_blocked]" in ln]
    assert blocked and all(str(seg) in ln and "move it aside" in ln for ln in blocked), out
    assert "tb-footprint recover" not in out, out
    p = tbf("restore", logdir, "--all", "--yes", "--json")
    outs = json.loads(p.stdout)
    assert [o["run"] for o in outs if o["status"] == "restored"] == ["b"], outs
    assert all(o["run"] == "" for o in outs if o["code"] == "restore_blocked"), outs
    st = tbf("status", logdir)
    assert str(seg) in st.stdout and "tb-footprint recover" not in st.stdout, st.stdout
