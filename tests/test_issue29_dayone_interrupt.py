"""Issue 29, day one item 3: Ctrl-C at any moment of a changing verb exits 130 with one line saying
what was interrupted, never a Python traceback.

Found trying it as a new user (``timeout -s INT 1 tb-footprint reduce logs -y``): the first second
or so of every verb is spent importing the library (numpy, the verifier), and an interrupt there
printed a traceback through numpy's import and said nothing of what happened. Here the import is
paused for real (a module finder that waits while the library's engine loads), SIGINT is sent
there, and the real CLI must answer as it does for an interrupt later on."""
from conftest import copy_real, tree_hashes
from helpers_cli import interrupt, start_paused

# pauses the import of the library's engine (after argparse, before any verb runs) until SIGINT
PAUSED_IMPORT = """
import importlib.abc, sys, time
class Pause(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "tb_footprint_plugin.engine":
            sys.meta_path.remove(self)
            open(sys.argv[1], "w").close()
            time.sleep(300)
        return None
sys.meta_path.insert(0, Pause())
from tb_footprint_plugin.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_ctrl_c_while_the_library_loads_exits_130_with_one_line_and_no_traceback(tmp_path):
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    before = tree_hashes(logdir)
    p = start_paused(PAUSED_IMPORT, tmp_path / "paused", "reduce", logdir, "-y", "--verify", "python", wait=120)
    out, err = interrupt(p, timeout=120)
    assert p.returncode == 130, out + err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "tb-footprint reduce: interrupted while starting; nothing was changed" in err, err
    assert tree_hashes(logdir) == before and not (logdir / ".tb-footprint").exists()


# pauses the ledger's "done" record of a run (after its reduction committed and its backups were
# compacted) until SIGINT: the interrupt then finds no journal to settle
PAUSED_LEDGER = """
import os, sys, time
from tb_footprint_plugin.engine import ledger
mark, hit = ledger.Ledger.mark, []
def paused(self, run, state, **kw):
    if state == "done" and not hit:  # the batch's record only, not what settling writes after
        hit.append(run)
        open(sys.argv[1], "w").close()
        time.sleep(300)
    return mark(self, run, state, **kw)
ledger.Ledger.mark = paused
from tb_footprint_plugin.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_ctrl_c_after_a_runs_commit_says_it_was_reduced_and_verified(tmp_path):
    """Interrupted after the run's reduction committed (nothing left for recovery to settle), the
    command used to name the run ("interrupted while changing train") and say nothing of what it
    came to; it now says the run was reduced and verified, with its operation."""
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    p = start_paused(PAUSED_LEDGER, tmp_path / "paused", "reduce", logdir, "-y", "--verify", "python",
                     "--quiet-period", "0")
    out, err = interrupt(p)
    assert p.returncode == 130, out + err
    assert "interrupted while changing train" in err, err
    import tb_footprint_plugin.api as api

    (op,) = [o for o in api.operations(str(logdir), run="train") if o["kind"] == "reduce"]
    assert str(op["outcome"]) == "verified"
    settled = err.split("settling what it left")[1]
    line = next((ln for ln in settled.splitlines() if "✓ train: " in ln), "")
    assert "reduced and verified" in line and op["op_id"] in line, err
    assert "Traceback" not in err, err
