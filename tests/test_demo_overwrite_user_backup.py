"""Review R17 F16: ``demo DIR --overwrite`` over a vault that also holds a backup of the user's
kept the whole state folder, said nothing of it, and left the demo's own reductions in it: the
new demo's runs are whole, yet ``status`` counted those reductions' bytes as freed now. Now the
demo's own reductions are restored first (the user's stays, restorable), and the demo says it
kept the vault and change log, naming what they hold."""
import hashlib
import json
import math
import os

from helpers_cli import run_cli as cli
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.demo import MARKER, generate_demo

SCALE = 0.02


def _user_run(target):
    with synth.EventWriter(str(target / "mine")) as w:
        for s in range(10):
            w.scalar("loss", s, math.exp(-s))
    synth.write_profile_session(str(target / "mine"), synth.session_name_for(synth.DEFAULT_TIMESTAMP),
                                n_events=300, seed=5)
    for d, dirs, files in os.walk(target / "mine"):
        for n in dirs + files:
            os.utime(os.path.join(d, n), (1_600_000_000, 1_600_000_000))


def _digests(root):
    return {os.path.relpath(os.path.join(d, n), root): hashlib.sha256(open(os.path.join(d, n), "rb").read()).hexdigest()
            for d, _dirs, names in os.walk(root) for n in names}


def test_the_demos_own_reductions_are_undone_and_the_kept_state_is_said(tmp_path):
    target = tmp_path / "dm"
    generate_demo(str(target), scale=SCALE)
    _user_run(target)
    mine = _digests(target / "mine")
    rep = api.reduce_logdir(str(target), policy="archive", dry_run=False, quiet_period=0,
                            verify_backends=("python",))
    assert rep.ok and "mine" in {o.run for o in rep.outcomes if o.status == "verified"}, \
        [(o.run, o.status, o.reason) for o in rep.outcomes]
    assert len({o.run for o in rep.outcomes if o.status == "verified"}) > 1, "no demo run was reduced"

    p = cli("demo", target, "--scale", str(SCALE), "--overwrite")
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "kept the vault and change log" in p.stdout and "mine" in p.stdout, p.stdout
    # only the user's reduction is kept: nothing else counts as freed now
    assert [o["run"] for o in api.restorable(str(target))] == ["mine"], api.restorable(str(target))
    # the tree is the new demo's, as its marker records it, and the user's run
    marker = json.loads((target / MARKER).read_text())
    assert {k: v for k, v in _digests(target).items() if not k.startswith((".tb-footprint", "mine"))} == \
        {**{k: d["sha256"] for k, d in marker["digests"].items()}, MARKER: _digests(target)[MARKER]}
    assert api.restore(str(target), run="mine")[0].status == "restored"
    assert _digests(target / "mine") == mine

