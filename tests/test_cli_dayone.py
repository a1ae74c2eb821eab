"""Day one on the command line (issue 29, items 2-6): the CLI behaves as a new user following the
README expects.

Every test runs the real ``tb-footprint`` (the console script of the test environment) in a
subprocess without a terminal, or with a real pseudo-terminal where the terminal is the point."""
import csv
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import copy_real, tree_hashes, user_files
from helpers_cli import cli_env, interrupt, start_paused
from test_cli import cli_on_terminal

BIN = Path(sys.executable).parent / "tb-footprint"
TB_FOOTPRINT = [str(BIN)] if BIN.exists() else [sys.executable, "-m", "tb_footprint_plugin.cli"]


def tbf(*args, **kw):
    """``tb-footprint ARGS`` without a terminal (stdin from /dev/null, as in CI or a notebook)."""
    extra = kw.pop("env", {})
    return subprocess.run(TB_FOOTPRINT + [str(a) for a in args], env=cli_env(**extra), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=600, **kw)


def staging_files(root):
    return [os.path.join(d, n) for d, _, files in os.walk(root) for n in files
            if n.startswith(".footprint-") and n.endswith(".tmp")]


@pytest.fixture
def logdir(tmp_path):
    return copy_real("tf/keras_profiled", tmp_path / "logdir")  # runs: train (to reduce), validation


# --- 2. one rule for every verb that changes something ---------------------------------------

def test_every_changing_verb_without_a_terminal_needs_yes_shows_the_plan_and_exits_2(logdir):
    before = tree_hashes(logdir)
    p = tbf("reduce", logdir, "--verify", "python")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "train: " in p.stdout and "add --yes (-y) to reduce" in p.stderr
    assert tree_hashes(logdir) == before and not (logdir / ".tb-footprint").exists()
    p = tbf("reduce", logdir, "--verify", "python", "-n")  # the dry run asked for: exit 0
    assert p.returncode == 0 and "dry run: nothing was changed" in p.stdout, p.stderr
    assert tree_hashes(logdir) == before

    assert tbf("reduce", logdir, "--verify", "python", "-y").returncode == 0
    reduced = user_files(logdir)
    p = tbf("restore", logdir, "train")
    assert p.returncode == 2 and "train: reduction" in p.stdout and "add --yes (-y) to restore" in p.stderr
    assert user_files(logdir) == reduced
    assert tbf("restore", logdir, "train", "-n").returncode == 0 and user_files(logdir) == reduced

    vault = tree_hashes(logdir / ".tb-footprint" / "blobs")
    p = tbf("purge", logdir, "--older-than", "0s")
    assert p.returncode == 2 and "1 backup(s); would free" in p.stdout and "add --yes (-y) to purge" in p.stderr
    assert tree_hashes(logdir / ".tb-footprint" / "blobs") == vault
    p = tbf("purge", logdir, "--older-than", "0s", "--json")  # machine-readable, same rule
    assert p.returncode == 2 and json.loads(p.stdout)["dry_run"] is True

    p = tbf("retire", logdir, "validation", "--quiet-period", "0")
    assert p.returncode == 2 and "→ validation" in p.stdout and "add --yes (-y) to retire" in p.stderr
    assert (logdir / "validation").is_dir()
    p = tbf("retire", logdir, "validation", "--quiet-period", "0", "-n")
    assert p.returncode == 0 and "nothing moved (dry run)" in p.stdout

    # -y on every verb that has --yes
    assert tbf("retire", logdir, "validation", "--quiet-period", "0", "-y").returncode == 0
    assert not (logdir / "validation").exists()
    assert tbf("restore", logdir, "validation", "-y").returncode == 0 and (logdir / "validation").is_dir()
    assert tbf("purge", logdir, "--older-than", "0s", "-y").returncode == 0
    # recover only settles what a crash left (every start does it too): no --yes needed
    assert tbf("recover", logdir).returncode == 0


# --- 3. Ctrl-C ----------------------------------------------------------------------------------

PAUSED_CLI = """
import sys, time
from tb_footprint_plugin.engine import faults
def pause():
    open(sys.argv[1], "w").close()
    time.sleep(300)
faults.arm(sys.argv[2], pause)
from tb_footprint_plugin.cli import main
sys.exit(main(sys.argv[3:]))
"""


def test_ctrl_c_mid_reduce_rolls_the_run_back_exits_130_and_says_what_next(tmp_path):
    """SIGINT while the run's new files are staged beside the originals: exit 130, no
    ``.footprint-*.tmp`` left, every file as it was, the interrupted run named, the command that
    goes on printed; ``status`` then says the run is untouched, with no shard wording."""
    logdir = tmp_path / "logdir"
    copy_real("torch/profiled", logdir / "torchrun")
    before = user_files(logdir)
    p = start_paused(PAUSED_CLI, tmp_path / "paused", "reduce.stage", "reduce", logdir, "--policy", "lossless",
                     "--verify", "python", "--yes")
    assert staging_files(logdir), "the test must interrupt while staging files exist"
    out, err = interrupt(p)
    assert p.returncode == 130, out + err
    assert staging_files(logdir) == []
    assert user_files(logdir) == before
    run = "torchrun"
    assert f"interrupted while changing {run}" in err, err
    assert "untouched" in err and f"tb-footprint reduce {logdir}" in err and "--yes" in err, err
    st = tbf("status", logdir, "--runs")
    assert st.returncode == 0, st.stderr
    assert "unfinished operations: 0" in st.stdout and "shard" not in st.stdout and "half changed" not in st.stdout
    again = tbf("reduce", logdir, "--policy", "lossless", "--verify", "python", "--yes")
    assert again.returncode == 0 and f"✓ {run}: verified" in again.stdout, again.stdout + again.stderr


PAUSED_API = """
import sys, time
import tb_footprint_plugin as fp
from tb_footprint_plugin.engine import faults
def pause():
    open(sys.argv[1], "w").close()
    time.sleep(300)
faults.arm("reduce.stage", pause)
try:
    fp.reduce_logdir(sys.argv[2], policy="lossless", dry_run=False, verify_backends=("python",))
except fp.Interrupted as e:
    print([(o["run"], str(o["action"]), o["untouched"]) for o in e.settled])
    sys.exit(3)
"""


def test_ctrl_c_in_a_notebook_rolls_back_through_the_api_too(tmp_path):
    """``fp.reduce_logdir(..., dry_run=False)`` interrupted (a notebook's stop button sends SIGINT):
    the run is rolled back before the interrupt reaches the caller, staging files removed."""
    logdir = tmp_path / "logdir"
    copy_real("torch/profiled", logdir / "torchrun")
    before = user_files(logdir)
    p = start_paused(PAUSED_API, tmp_path / "paused", logdir)
    assert staging_files(logdir), p.communicate()
    out, err = interrupt(p)
    assert p.returncode == 3, out + err
    assert "('torchrun', 'rolled_back', True)" in out, out
    assert staging_files(logdir) == [] and user_files(logdir) == before
    assert "unfinished operations: 0" in tbf("status", logdir).stdout


def test_ctrl_c_mid_retire_puts_the_run_back_and_exits_130(logdir, tmp_path):
    before = user_files(logdir)
    p = start_paused(PAUSED_CLI, tmp_path / "paused", "retire.mid_move", "retire", logdir, "train", "validation",
                     "--with-nested", "--quiet-period", "0", "--yes")
    out, err = interrupt(p)
    assert p.returncode == 130, out + err
    assert "interrupted while changing train" in err and "rolled back" in err, err
    assert user_files(logdir) == before
    assert "unfinished operations: 0" in tbf("status", logdir).stdout


def test_after_a_kill_status_says_untouched_and_the_rerun_names_the_run_it_redoes(tmp_path):
    logdir = tmp_path / "logdir"
    copy_real("torch/profiled", logdir / "torchrun")
    before = user_files(logdir)
    p = tbf("reduce", logdir, "--policy", "lossless", "--verify", "python", "--yes",
            env={"TB_FOOTPRINT_FAILPOINTS": "reduce.stage=kill"})
    assert p.returncode == -signal.SIGKILL
    run = "torchrun"
    st = tbf("status", logdir)
    assert "untouched" in st.stdout and "sha256" in st.stdout, st.stdout
    assert "may be half changed" not in st.stdout + st.stderr
    st = tbf("status", logdir, "--runs")
    assert "shard" not in st.stdout, st.stdout  # one machine: no shard to rerun
    rc, shown = cli_on_terminal("reduce", logdir, "--policy", "lossless", "--verify", "python", answer="n")
    assert rc == 0, shown
    assert "1 run(s) to reduce" in shown and f"{run}: " in shown and "interrupted attempt" in shown, shown
    rc, shown = cli_on_terminal("reduce", logdir, "--policy", "lossless", "--verify", "python", answer="y")
    assert rc == 0 and f"✓ {run}: verified" in shown, shown
    assert staging_files(logdir) == []
    assert tbf("restore", logdir, run, "--yes").returncode == 0 and user_files(logdir) == before


PAUSED_NTH_CLI = """
import os, sys, threading, time
from tb_footprint_plugin.engine import faults
hits, lock = [], threading.Lock()
def pause():  # a long step: it ends when the test says so (a worker thread sees the interrupt after it)
    with lock:
        hits.append(1)
        n = len(hits)
    if n == int(sys.argv[2]):
        open(sys.argv[1], "w").close()
        deadline = time.monotonic() + 300
        while not os.path.exists(sys.argv[1] + ".release") and time.monotonic() < deadline:
            time.sleep(0.05)
faults.arm(sys.argv[3], pause)
from tb_footprint_plugin.cli import main
sys.exit(main(sys.argv[4:]))
"""


def interrupt_at(tmp_path, nth: int, failpoint: str, *args):
    """Run the real CLI with ``args``, pause it at the ``nth`` hit of ``failpoint`` (on any
    worker thread), send SIGINT there and let the paused step end a second later; returns
    (exit code, stdout, stderr)."""
    flag = tmp_path / f"paused-{time.monotonic_ns()}"
    p = start_paused(PAUSED_NTH_CLI, flag, nth, failpoint, *args)
    p.send_signal(signal.SIGINT)
    time.sleep(1)
    Path(str(flag) + ".release").touch()
    out, err = p.communicate(timeout=300)
    return p.returncode, out, err


def _asked_runs(shown: str) -> dict:
    """The runs a reduce's question lists as to reduce: name -> its line."""
    return {m.group(1): m.group(0) for m in re.finditer(r"^  (\S+): [\d.]+ [kMG]?B → .*$", shown, re.M)}


def test_after_ctrl_c_the_reruns_question_counts_only_the_runs_it_will_touch(tmp_path):
    """A resumed batch skips the runs its ledger settled: the question after an interrupt names
    and counts only the runs the reduce then touches (the one whose killed attempt it rolls back
    and redoes included), its total is theirs, and the progress bar counts those runs. The run
    finished before the interrupt would be planned again here (the policy file now also slims
    traces), so only the ledger keeps it out."""
    from tb_footprint_plugin.fmt import human_bytes

    logdir = tmp_path / "logdir"
    for r in ("r1", "r2", "r3"):
        copy_real("torch/profiled", logdir / r)
    policy = tmp_path / "mine.json"
    policy.write_text(json.dumps({"name": "mine", "base": "lossless"}))
    common = ["--policy", policy, "--verify", "python", "--quiet-period", "0"]  # r1 was just written
    before = user_files(logdir)
    rc, out, err = interrupt_at(tmp_path, 2, "reduce.stage", "reduce", logdir, *common, "--yes")
    assert rc == 130, out + err
    assert "✓ r1: verified" in out and "interrupted while changing r2" in err, out + err
    assert staging_files(logdir) == []
    assert {k: v for k, v in user_files(logdir).items() if not k.startswith("r1/")} == \
        {k: v for k, v in before.items() if not k.startswith("r1/")}
    policy.write_text(json.dumps({"name": "mine", "base": "lossless",
                                  "content": {"trace": {"drop_python_function": True}}}))
    plan = {r["run"]: r for r in json.loads(tbf("plan", logdir, *common[:2], "--quiet-period", "0", "--json").stdout)["runs"]}
    assert plan["r1"]["actions"] and not plan["r1"]["skipped"], plan["r1"]  # planned, but the ledger has it done

    rc, shown = cli_on_terminal("reduce", logdir, *common, answer="n")
    assert rc == 0, shown
    asked = _asked_runs(shown)
    assert sorted(asked) == ["r2", "r3"], shown
    size = plan["r2"]["bytes_before"] + plan["r3"]["bytes_before"]
    freed = plan["r2"]["removable_bytes"] + plan["r3"]["removable_bytes"]
    assert f"2 run(s) to reduce, {human_bytes(size)}, {human_bytes(freed)} removable" in shown, shown
    assert "already settled are skipped: r1" in shown and "Reduce 2 run(s)?" in shown, shown

    # killed while r2 is staged: the next question names r2 as the attempt it rolls back and redoes
    p = tbf("reduce", logdir, *common, "--yes", env={"TB_FOOTPRINT_FAILPOINTS": "reduce.stage=kill"})
    assert p.returncode == -signal.SIGKILL
    rc, shown = cli_on_terminal("reduce", logdir, *common, answer="y")
    assert rc == 0, shown
    asked = _asked_runs(shown)
    assert sorted(asked) == ["r2", "r3"] and "interrupted attempt" in asked["r2"], shown
    assert "Reduce 2 run(s)?" in shown and "2/2 runs" in shown and "3/2 runs" not in shown, shown
    assert "✓ r2: verified" in shown and "✓ r3: verified" in shown, shown
    assert "r1: skipped [already_in_ledger]" in shown, shown
    assert staging_files(logdir) == []


def _ledger_runs(logdir) -> dict:
    st = json.loads(tbf("status", logdir, "--json").stdout)
    return {r: e for r, e in st["batch"]["runs"].items() if "/" not in r}


def test_ctrl_c_with_two_jobs_leaves_every_run_untouched_or_reduced_and_the_rerun_finishes(tmp_path):
    """``--jobs 2``: SIGINT while one worker thread is in a long step and the other goes on.
    Exit 130; each run is either exactly as before (sha256) or reduced and verified; no
    ``.footprint-*.tmp`` anywhere; the runs stopped under way are named untouched; ``status``
    lists no failure and no unfinished operation; the rerun reduces the rest."""
    logdir = tmp_path / "logdir"
    runs = ["r1", "r2", "r3", "r4"]
    for r in runs:
        copy_real("torch/profiled", logdir / r)
    before = user_files(logdir)
    common = ["--policy", "lossless", "--verify", "python", "--jobs", "2"]
    rc, out, err = interrupt_at(tmp_path, 1, "reduce.stage", "reduce", logdir, *common, "--yes")
    assert rc == 130, out + err
    assert staging_files(logdir) == [], staging_files(logdir)
    m = re.search(r"interrupted while changing (\S+)", err)
    assert m and m.group(1).rstrip(",;") in runs, err
    ledger = _ledger_runs(logdir)
    now = user_files(logdir)
    done = sorted(r for r in runs if ledger.get(r, {}).get("state") == "done")
    assert len(done) < len(runs), (out, err)  # the interrupt stopped the batch
    for r in runs:
        mine = lambda files: {k: v for k, v in files.items() if k.startswith(r + "/")}  # noqa: E731
        if r in done:
            assert ledger[r]["verified"] is True and mine(now) != mine(before), r
        else:
            assert mine(now) == mine(before), r  # untouched: every byte as before
            assert ledger.get(r, {}).get("state", "pending") == "pending", (r, ledger.get(r))
    stopped = [r for r in runs if f"✓ {r}: untouched" in err]
    assert stopped and not set(stopped) & set(done), err  # the runs under way are named untouched
    assert "✗" not in err.split("settling what it left")[1], err
    st = tbf("status", logdir, "--runs")
    assert "unfinished operations: 0" in st.stdout and " failed " not in st.stdout, st.stdout
    assert "half changed" not in st.stdout and "shard" not in st.stdout, st.stdout

    again = tbf("reduce", logdir, *common, "--yes")
    assert again.returncode == 0, again.stdout + again.stderr
    for r in runs:
        if r in done:
            assert f"{r}: skipped [already_in_ledger]" in again.stdout, again.stdout
        else:
            assert f"✓ {r}: verified" in again.stdout, again.stdout
    assert all(e["state"] == "done" for e in _ledger_runs(logdir).values())
    assert staging_files(logdir) == []


PAUSED_API_JOBS = """
import json, os, sys, threading, time
import tb_footprint_plugin as fp
from tb_footprint_plugin.engine import faults
hits, lock = [], threading.Lock()
def pause():
    with lock:
        hits.append(1)
        n = len(hits)
    if n == 1:
        open(sys.argv[1], "w").close()
        deadline = time.monotonic() + 300
        while not os.path.exists(sys.argv[1] + ".release") and time.monotonic() < deadline:
            time.sleep(0.05)
faults.arm("reduce.stage", pause)
try:
    fp.reduce_logdir(sys.argv[2], policy="lossless", dry_run=False, jobs=2, verify_backends=("python",),
                     ledger="default")
except fp.Interrupted as e:
    print(json.dumps([[o["run"], str(o["action"]), o["untouched"]] for o in e.settled]))
    sys.exit(3)
"""


def test_ctrl_c_in_a_notebook_with_two_jobs_stops_the_other_threads_run_too(tmp_path):
    """``fp.reduce_logdir(..., jobs=2)`` interrupted with no cancel token of the caller's: the run
    a worker thread has under way stops at its next step and rolls back (it used to run on to its
    end), and ``fp.Interrupted`` names it untouched."""
    logdir = tmp_path / "logdir"
    runs = ["r1", "r2", "r3"]
    for r in runs:
        copy_real("torch/profiled", logdir / r)
    before = user_files(logdir)
    flag = tmp_path / "paused"
    p = start_paused(PAUSED_API_JOBS, flag, logdir)
    p.send_signal(signal.SIGINT)
    time.sleep(1)
    Path(str(flag) + ".release").touch()
    out, err = p.communicate(timeout=300)
    assert p.returncode == 3, out + err
    settled = json.loads(out.strip().splitlines()[-1])
    paused = [r for r, action, untouched in settled if action == "rolled_back" and untouched is True]
    assert paused, settled
    assert staging_files(logdir) == []
    ledger = _ledger_runs(logdir)
    for r in runs:
        if ledger.get(r, {}).get("state") != "done":
            assert {k: v for k, v in user_files(logdir).items() if k.startswith(r + "/")} == \
                {k: v for k, v in before.items() if k.startswith(r + "/")}, r
    assert all(ledger[r]["state"] == "pending" for r in paused), ledger


def test_progress_counts_what_it_shows_and_its_total_is_the_plans_bytes(logdir):
    """A run with nothing to do is not counted as done ("2/1 runs" before); the bar's total is
    the bytes the plan summary printed for the runs it reduces."""
    from tqdm import tqdm

    from tb_footprint_plugin.fmt import human_bytes

    plan = json.loads(tbf("plan", logdir, "--json").stdout)
    todo = [r for r in plan["runs"] if r["actions"] and not r["skipped"]]
    size = sum(r["bytes_before"] for r in todo)
    rc, shown = cli_on_terminal("reduce", logdir, "--verify", "python", answer="y")
    assert rc == 0, shown
    assert f"{len(todo)} run(s) to reduce, {human_bytes(size)}," in shown, shown
    assert f"{len(todo)}/{len(todo)} runs" in shown and f"{len(todo) + 1}/{len(todo)} runs" not in shown, shown
    assert f"{len(todo)}/{len(todo)} runs of {human_bytes(size)}" in shown, shown
    assert f"/{tqdm.format_sizeof(size, divisor=1000)}B " in shown, shown


# --- 4. one meaning of "run", one glob rule, the same selectors -------------------------------

@pytest.fixture
def nested(tmp_path):
    """runs sweep/a, sweep/a/eval and sweep/b, plus a profile-only folder (a JAX profile)."""
    root = tmp_path / "logs"
    src = copy_real("tf/keras_profiled", tmp_path / "src") / "train"
    for name in ("sweep/a", "sweep/a/eval", "sweep/b"):
        shutil.copytree(src, root / name, dirs_exist_ok=True)
    copy_real("jax/profiled", root / "jax_profile")
    return root


def plan_runs(*args):
    p = tbf("plan", *args, "--json")
    assert p.returncode == 0, p.stderr
    return sorted(r["run"] for r in json.loads(p.stdout)["runs"])


def test_profile_only_folders_are_runs_for_retire(nested):
    scan = json.loads(tbf("scan", nested, "--json").stdout)
    assert "jax_profile" in [r["name"] for r in scan["runs"]]
    p = tbf("retire", nested, "jax_profile", "--quiet-period", "0", "--json", "-n")
    assert p.returncode == 0, p.stderr
    (item,) = [i for i in json.loads(p.stdout)["plan"]["items"] if i["run"] == "jax_profile"]
    assert item["selected"], item
    p = tbf("retire", nested, "jax_profile", "--quiet-period", "0", "-y")
    assert p.returncode == 0 and "✓ jax_profile: retired" in p.stdout, p.stdout + p.stderr
    assert not (nested / "jax_profile").exists()


def test_retire_of_no_such_run_or_an_empty_glob_exits_2(nested):
    before = tree_hashes(nested)
    for args in (["no_such_run"], ["--glob", "zzz*"], ["--runs", "zzz*"], ["--group", "nothing/*", "--keep-best", "1",
                                                                           "--metric", "epoch_loss"]):
        p = tbf("retire", nested, *args, "-y")
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert "no run of" in p.stderr, p.stderr
    assert tree_hashes(nested) == before


def test_one_glob_rule_for_every_verb_star_stays_in_a_folder(nested):
    """``*`` stays within one folder, ``**`` spans folders, a matched folder takes the runs inside
    it (.gitignore's rule): the same for plan, reduce and retire."""
    (nested / "deep" / "x").mkdir(parents=True)
    shutil.copytree(nested / "sweep" / "b", nested / "deep" / "x" / "eval")
    everything = ["deep/x/eval", "jax_profile", "sweep/a", "sweep/a/eval", "sweep/b"]
    assert plan_runs(nested, "--runs", "*") == everything
    assert plan_runs(nested, "--runs", "sweep/*") == ["sweep/a", "sweep/a/eval", "sweep/b"]
    assert plan_runs(nested, "--runs", "sweep/*/eval") == ["sweep/a/eval"]
    assert plan_runs(nested, "--runs", "**/eval") == ["deep/x/eval", "sweep/a/eval"]
    for verb in ("plan", "reduce"):  # `*` crossed `/` before (fnmatch): `*/eval` was deep/x/eval too
        p = tbf(verb, nested, "--runs", "*/eval", *(["-n"] if verb == "reduce" else []))
        assert p.returncode == 2 and "'**/eval'" in p.stderr, p.stderr  # says how to write it now
    p = tbf("retire", nested, "--glob", "*/eval", "--quiet-period", "0", "-n")
    assert p.returncode == 2 and "'**/eval'" in p.stderr, p.stderr
    p = tbf("retire", nested, "--glob", "**/eval", "--quiet-period", "0", "--json", "-n")
    chosen = sorted(i["run"] for i in json.loads(p.stdout)["plan"]["items"] if i["selected"])
    assert chosen == ["deep/x/eval", "sweep/a/eval"], p.stdout


def test_the_same_selectors_for_every_verb_that_takes_runs(nested):
    scan = json.loads(tbf("scan", nested, "--runs", "sweep/*", "--json").stdout)
    assert sorted(r["name"] for r in scan["runs"]) == ["sweep/a", "sweep/a/eval", "sweep/b"]
    assert scan["total_bytes"] == sum(r["total_bytes"] for r in scan["runs"])
    assert "jax_profile" not in tbf("scan", nested, "sweep/b").stdout
    assert tbf("scan", nested, "--run", "nope").returncode == 2
    assert plan_runs(nested, "sweep/b") == ["sweep/b"]  # positional names
    assert plan_runs(nested, "--run", "sweep/b", "--run", "sweep/a") == ["sweep/a", "sweep/b"]
    p = tbf("reduce", nested, "sweep/b", "-n", "--json")  # a run name after the logdir, as for plan
    assert p.returncode == 0, p.stderr
    assert [o["run"] for o in json.loads(p.stdout)["outcomes"]] == ["sweep/b"]
    assert tbf("reduce", nested, "--glob", "sweep/*", "--verify", "python", "-y").returncode == 0
    for verb in ("verify", "restore"):
        p = tbf(verb, nested, "--runs", "sweep/*", *(["--verify", "python"] if verb == "verify" else ["-n"]))
        assert p.returncode == 0, (verb, p.stdout, p.stderr)
        assert "sweep/a" in p.stdout and "sweep/b" in p.stdout, p.stdout
        p = tbf(verb, nested, "--runs", "nothing/*", *(["--verify", "python"] if verb == "verify" else ["-n"]))
        assert p.returncode == 2, (verb, p.stdout, p.stderr)
    p = tbf("verify", nested, "sweep/a", "sweep/b", "--verify", "python")
    assert p.returncode == 0 and p.stdout.count("(op ") == 2, p.stdout
    p = tbf("restore", nested, "sweep/a", "--run", "sweep/b", "-y")
    assert p.returncode == 0 and p.stdout.count(": restored") == 2, p.stdout


# --- 5. a folder with no TensorBoard data is not a logdir -------------------------------------

@pytest.mark.parametrize("verb", ["scan", "plan", "reduce"])
def test_a_folder_without_tensorboard_data_is_not_a_logdir(tmp_path, verb):
    for folder, files in (("empty", {}), ("notes", {"README.txt": "hello", "sub/data.csv": "1,2"})):
        d = tmp_path / folder
        d.mkdir()
        for rel, text in files.items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_text(text)
        before = tree_hashes(d)
        p = tbf(verb, d, *(["-y"] if verb == "reduce" else []))
        assert p.returncode == 2, (folder, p.stdout, p.stderr)
        assert "is not a TensorBoard logdir" in p.stderr and str(d) in p.stderr
        assert tree_hashes(d) == before  # no state folder, nothing at all written into it


def test_a_logdir_whose_runs_are_all_retired_is_still_one(logdir):
    assert tbf("retire", logdir, "--glob", "*", "--quiet-period", "0", "-y").returncode == 0
    assert not (logdir / "train").exists() and not (logdir / "validation").exists()
    for verb in ("scan", "plan"):
        assert tbf(verb, logdir).returncode == 0
    assert tbf("restore", logdir, "--all", "-y").returncode == 0 and (logdir / "train").is_dir()


# --- 6. fast help, the verb's usage, scan --files, ISO times, verbose plans ---------------------

def _fastest(cmds, **kw) -> list:
    """The least CPU time (user + system) of each command over 5 turns: what its start itself
    costs. Wall time on a shared machine follows the load: CI's run at a load of 12 on 2 cores
    measured 4x a bare interpreter's wall time for a start that costs under 3x its CPU."""
    best = [float("inf")] * len(cmds)
    for _ in range(5):
        for i, cmd in enumerate(cmds):
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
            _pid, status, usage = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
            assert p.returncode == 0, cmd
            best[i] = min(best[i], usage.ru_utime + usage.ru_stime)
    return best


def test_help_and_version_start_fast_without_heavy_imports():
    # compiled once as an installed package is (pip writes the .pyc files at install time)
    e = {k: v for k, v in cli_env().items() if k != "PYTHONDONTWRITEBYTECODE"}
    for args in (["--help"], ["--version"], ["reduce", "--help"]):
        subprocess.run(TB_FOOTPRINT + args, capture_output=True, env=e, check=True)
    bare, help_, version = _fastest([[sys.executable, "-c", "import argparse"], TB_FOOTPRINT + ["--help"],
                                     TB_FOOTPRINT + ["--version"]], env=e)
    assert help_ <= 3 * bare and version <= 3 * bare, (help_, version, bare)
    probe = ("import sys\nfrom tb_footprint_plugin.cli import main\n"
             "for a in (['--help'], ['--version'], ['reduce', '--help']):\n"
             "    main(a)\n"
             "heavy = [m for m in ('numpy', 'tensorboard', 'tensorflow', 'tb_footprint_plugin.verify',\n"
             "         'tb_footprint_plugin.api', 'tb_footprint_plugin.engine', 'tqdm') if m in sys.modules]\n"
             "print(heavy)")
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=e, check=True)
    assert p.stdout.strip().splitlines()[-1] == "[]", p.stdout


def test_a_bad_option_after_a_verb_prints_that_verbs_usage(logdir):
    for verb in ("reduce", "retire", "scan"):
        p = tbf(verb, logdir, "--no-such-option")
        assert p.returncode == 2
        assert p.stderr.startswith(f"usage: tb-footprint {verb} "), p.stderr
        assert "unrecognized arguments: --no-such-option" in p.stderr


def test_scan_files_works_without_json(logdir):
    p = tbf("scan", logdir, "--files")
    assert p.returncode == 0, p.stderr
    assert "events.out.tfevents" in p.stdout and "xplane.pb" in p.stdout, p.stdout


def test_history_csv_writes_iso_8601_times(logdir):
    assert tbf("reduce", logdir, "--verify", "python", "-y").returncode == 0
    rows = list(csv.DictReader(io.StringIO(tbf("history", logdir, "--csv").stdout)))
    assert rows
    for r in rows:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", r["time"]), r["time"]


def test_plan_verbose_prints_each_fidelity_lines_details(tmp_path):
    logs = tmp_path / "logs"
    assert tbf("demo", logs, "--scale", "0.2").returncode == 0
    plain = tbf("plan", logs)
    verbose = tbf("plan", logs, "--verbose")
    assert plain.returncode == 0 and verbose.returncode == 0
    from tb_footprint_plugin import api

    details = [str(d).strip() for rp in api.plan(str(logs)).runs for d in getattr(rp, "fidelity_details", []) or []
               if str(d).strip()]
    if not details:
        pytest.fail("the planner gives no fidelity details to show")
    shown = [d.splitlines()[0] for d in details]
    assert all(s in verbose.stdout for s in shown), verbose.stdout
    assert len(verbose.stdout.splitlines()) > len(plain.stdout.splitlines())
