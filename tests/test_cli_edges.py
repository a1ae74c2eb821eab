"""The command line's small edges (review R16, leftovers): the CLI's "no space" code is the
library's one rule; a missing logdir is named as what is missing; ``--jobs`` / ``--timeout`` of
zero or less are usage errors; a closed pipe ends quietly; ``--`` lets a run name begin with '-';
every verb's ``--help`` and the README say its exit codes."""
import errno
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, copy_real, user_files
from helpers_cli import cli_env, run_cli as cli


# --- one "no space" rule --------------------------------------------------------------------

def test_no_space_code_is_the_librarys_one_rule(monkeypatch):
    """``cli._error_code`` asks ``api.is_no_space`` (``engine.context``'s rule) and has no copy."""
    from tb_footprint_plugin import api, cli as cli_mod

    assert "is_no_space" in api.__all__
    for n in (errno.ENOSPC, errno.EDQUOT):
        assert cli_mod._error_code(OSError(n, os.strerror(n))) == "no_space"
    assert cli_mod._error_code(OSError(errno.EIO, "i/o")) == "error"
    seen = []
    monkeypatch.setattr(api, "is_no_space", lambda e: seen.append(e) or e.errno == errno.EIO)
    eio, full = OSError(errno.EIO, "i/o"), OSError(errno.ENOSPC, "full")
    assert cli_mod._error_code(eio) == "no_space" and seen == [eio]
    assert cli_mod._error_code(full) == "error"  # the CLI follows the library's answer, whatever it is


@pytest.fixture
def logdir(tmp_path):
    return copy_real("tf/keras_profiled", tmp_path / "logdir")


def _history(logdir) -> list:
    p = cli("history", logdir, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


# --- F9: usage errors that say what is wrong ---------------------------------------------------

@pytest.mark.parametrize("verb", ["scan", "plan", "verify", "restore", "retire", "purge"])
def test_a_missing_logdir_is_named_alone(verb):
    """RUN is never required: a verb without its logdir says the logdir is missing, not 'logdir, RUN'."""
    p = cli(verb)
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode == 2 and last.endswith("the following arguments are required: logdir"), p.stderr


def test_a_file_url_logdir_is_its_local_path(logdir):
    """``file:///path`` (TensorBoard's own spelling of a local logdir, percent-encoding and
    ``localhost`` included) is the folder at that path: the same scan as the plain path (before,
    "logdir <cwd>/file:/path is not a directory"); another host is a usage error that says why."""
    plain = cli("scan", logdir, "--json")
    assert plain.returncode == 0, plain.stderr
    for url in ("file://" + str(logdir), "file://localhost" + str(logdir)):
        p = cli("scan", url, "--json")
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["total_bytes"] == json.loads(plain.stdout)["total_bytes"] > 0
    spaced = logdir.parent / "a logdir"
    os.rename(logdir, spaced)
    p = cli("scan", "file://" + str(spaced).replace(" ", "%20"), "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["total_bytes"] > 0, p.stderr
    p = cli("scan", "file://elsewhere" + str(spaced))
    assert p.returncode == 2 and "names a path on this machine" in p.stderr, p.stderr


def test_reduce_without_a_logdir_says_so():
    p = cli("reduce")
    assert p.returncode == 2 and "tb-footprint reduce: error: no logdir given" in p.stderr, p.stderr


@pytest.mark.parametrize("option", [["--jobs", "0"], ["--jobs", "-2"], ["--timeout", "0"], ["--timeout", "-5"],
                                    ["--timeout=-1m"], ["--timeout", "0s"]])
def test_jobs_and_timeout_of_zero_or_less_are_usage_errors(logdir, option):
    before = user_files(logdir)
    p = cli("reduce", logdir, "-n", *option)
    name = option[0].split("=")[0]
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert f"argument {name}: " in p.stderr and "usage: tb-footprint reduce" in p.stderr, p.stderr
    assert user_files(logdir) == before and not (logdir / ".tb-footprint").exists()
    if option == ["--timeout", "0"]:  # the smallest values above zero are taken
        p = cli("reduce", logdir, "-n", "--jobs", "1", "--timeout", "1s")
        assert p.returncode == 0, p.stderr


# --- F9: a closed pipe ---------------------------------------------------------------------------

def _closed_stdout(*args) -> subprocess.CompletedProcess:
    """The CLI with a stdout whose reader is gone before it writes (``| head`` that has read enough)."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", *map(str, args)], env=cli_env(),
                              stdin=subprocess.DEVNULL, stdout=w, stderr=subprocess.PIPE, text=True, timeout=600)
    finally:
        os.close(w)


@pytest.mark.parametrize("extra", [[], ["--json"], ["--files"]])
def test_a_closed_pipe_ends_a_scan_quietly_with_141(logdir, extra):
    p = _closed_stdout("scan", logdir, *extra)
    assert p.returncode == 141, p.stderr
    assert "Broken pipe" not in p.stderr and "Traceback" not in p.stderr and "Exception" not in p.stderr, p.stderr


def test_a_closed_pipe_never_cuts_a_reduce_short(tmp_path):
    """Each run's outcome line meets the closed pipe: the reduce still does and verifies every
    run (none reported failed for a line nobody reads) and exits 141."""
    logdir = tmp_path / "L"
    for name in ("a", "b"):
        copy_real("tf/keras_profiled", logdir / name)
    p = _closed_stdout("reduce", logdir, "--yes", "--verify", "python")
    assert p.returncode == 141, p.stderr
    assert "Broken pipe" not in p.stderr and "Traceback" not in p.stderr, p.stderr
    done = {e["run"] for e in _history(logdir) if e["kind"] == "reduce" and e["outcome"] == "verified"}
    assert done == {"a/train", "b/train"}, _history(logdir)


def _stream_closed_at_start(fd: int, *args) -> subprocess.CompletedProcess:
    """The CLI started with file descriptor ``fd`` (1: stdout, 2: stderr) closed, as ``>&-`` under
    cron or a service leaves it (Python then makes that stream None)."""
    keep = {1: subprocess.PIPE, 2: subprocess.PIPE}
    return subprocess.run(_closed(fd, [sys.executable, "-m", "tb_footprint_plugin.cli", *map(str, args)]),
                          env=cli_env(), stdin=subprocess.DEVNULL, stdout=keep[1], stderr=keep[2], text=True,
                          timeout=600)


def _closed(fd: int, argv: list) -> list:
    """``argv`` run with descriptor ``fd`` closed, by a shell that closes it and execs: never a
    ``preexec_fn``, whose Python code runs in a fork of this pytest worker. A worker that imported
    gRPC in an earlier test (TensorBoard's in-process readers) carries gRPC's fork handlers and
    poller into that fork, which aborted there ("epoll_wait error: Bad file descriptor", SIGABRT)
    before the exec: the fresh-clone CI of 8bf81d0 failed two of these tests so, the CLI never run."""
    return ["sh", "-c", f'exec "$@" {fd}>&-', "sh", *argv]


@pytest.mark.parametrize("fd", [1, 2], ids=["stdout", "stderr"])
def test_a_stream_closed_at_start_changes_nothing_of_a_verbs_result(tmp_path, fd):
    """Review R17 F1: with stdout (or stderr) closed at start, every verb exited 1 with a traceback
    (the pipe guard wrapped None), and a reduce reported its verified runs failed. Now what is
    printed goes nowhere, as Python's ``print`` to a None stream does, and the exit code is the
    verb's own."""
    logdir = tmp_path / "L"
    copy_real("tf/keras_profiled", logdir / "a")
    p = _stream_closed_at_start(fd, "scan", logdir)
    assert p.returncode == 0, (p.stdout, p.stderr)
    p = _stream_closed_at_start(fd, "reduce", logdir, "--yes", "--verify", "python")
    assert p.returncode == 0, (p.stdout, p.stderr)
    done = {e["run"] for e in _history(logdir) if e["kind"] == "reduce" and e["outcome"] == "verified"}
    assert done == {"a/train"}, _history(logdir)


_FDS_SEEN = """
import json, os, sys
seen = []
real_open = os.open
def recording_open(path, *a, **k):
    fd = real_open(path, *a, **k)
    if path != os.devnull:  # what holds a closed standard descriptor is not the verb's file
        seen.append(fd)
    return fd
os.open = recording_open
from tb_footprint_plugin import cli
rc = cli.main(sys.argv[2:])
with open(sys.argv[1], "w") as f:  # after the verb: this file may take any number
    json.dump({"rc": rc, "lowest": min(seen)}, f)
"""


@pytest.mark.parametrize("fd", [0, 1, 2], ids=["stdin", "stdout", "stderr"])
def test_no_file_of_a_verb_takes_a_standard_streams_number_closed_at_start(tmp_path, fd):
    """CI of dc346ea: ``scan`` started with stderr closed aborted (SIGABRT, nothing printed). The
    verb's own files took descriptor 2 (the scan cache's temp, the logdir's folder: seen with
    strace), so anything writing to "stderr" below Python wrote into them. Now /dev/null holds a
    closed standard descriptor first, and no file a scan or a reduce opens gets number 0, 1 or 2."""
    logdir = tmp_path / "L"
    copy_real("tf/keras_profiled", logdir / "a")
    for verb in (["scan", str(logdir)], ["reduce", str(logdir), "--yes", "--verify", "python"]):
        out, err = tmp_path / f"seen-{verb[0]}.json", tmp_path / f"stderr-{verb[0]}.txt"
        with open(err, "w") as keep:  # what the child said, should it end without its JSON (seen once in CI)
            p = subprocess.run(_closed(fd, [sys.executable, "-c", _FDS_SEEN, str(out), *verb]), env=cli_env(),
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL if fd == 2 else keep, timeout=600)
        assert out.exists(), (verb, p.returncode, err.read_text()[-4000:])
        seen = json.loads(out.read_text())
        assert seen["rc"] == 0, (verb, seen)
        assert seen["lowest"] > 2, (verb, seen)
    done = {e["run"] for e in _history(logdir) if e["kind"] == "reduce" and e["outcome"] == "verified"}
    assert done == {"a/train"}, _history(logdir)


# --- F7: `--` before a run name that begins with '-' -----------------------------------------

def test_double_dash_gives_a_run_name_beginning_with_a_dash(logdir):
    (logdir / "train").rename(logdir / "-x")
    before = user_files(logdir)
    p = cli("scan", logdir, "--json", "--", "-x")
    assert p.returncode == 0, p.stderr
    assert [r["name"] for r in json.loads(p.stdout)["runs"]] == ["-x"]
    p = cli("plan", logdir, "--", "-x")
    assert p.returncode == 0 and "-x:" in p.stdout, p.stderr
    p = cli("reduce", logdir, "--yes", "--verify", "python", "--", "-x")
    assert p.returncode == 0 and "✓ -x: verified" in p.stdout, (p.stdout, p.stderr)
    assert user_files(logdir) != before
    p = cli("verify", logdir, "--verify", "python", "--", "-x")
    assert p.returncode == 0 and "✓ -x (op" in p.stdout, (p.stdout, p.stderr)
    # without `--` the name is an option nobody knows: exit 2, and the error says how to give it
    p = cli("restore", logdir, "-x", "--yes")
    assert p.returncode == 2 and "tb-footprint restore LOGDIR -- -x" in p.stderr, p.stderr
    p = cli("restore", logdir, "--yes", "--", "-x")
    assert p.returncode == 0 and "✓ -x: restored" in p.stdout, (p.stdout, p.stderr)
    assert user_files(logdir) == before


def test_options_may_follow_run_names(logdir):
    p = cli("plan", logdir, "--policy", "lossless", "train", "-v", "--policy", "archive")
    assert p.returncode == 0 and "policy archive" in p.stdout and "train:" in p.stdout, p.stderr


def test_the_command_that_goes_on_puts_yes_before_double_dash(logdir, monkeypatch, capsys):
    """After Ctrl-C the message gives the command to go on; the --yes it adds goes before `--`
    (after it, --yes would be a run name)."""
    import argparse

    from tb_footprint_plugin import cli as cli_mod

    import signal

    monkeypatch.setattr(sys, "argv", ["tb-footprint", "restore", str(logdir), "--", "-x"])
    args = argparse.Namespace(backup_dir=None, json=False)
    before = signal.getsignal(signal.SIGINT)
    assert cli_mod._interrupted(args, "restore", [str(logdir)], None, []) == 130
    assert f"`tb-footprint restore {logdir} --yes -- -x`" in capsys.readouterr().err
    # Ctrl-C is ignored while it settles, then its handler is back: a process that called it (a
    # notebook, this test's worker) and the children it starts later stay interruptible
    assert signal.getsignal(signal.SIGINT) == before


# --- F6: exit codes, said by every verb's --help and by the README --------------------------

def _normal(text: str) -> str:
    return " ".join(text.split())


def test_every_verbs_help_ends_with_its_exit_codes():
    from tb_footprint_plugin import cli as cli_mod

    cli_mod.build_parser()
    assert set(cli_mod._VERBS) == set(cli_mod.EXIT_ONE)
    for verb, parser in cli_mod._VERBS.items():
        text = parser.format_help()
        codes = text[text.index("exit codes:"):]
        lines = {m.group(1): _normal(m.group(2)) for m in re.finditer(r"^\s+(\d+)  (.*(?:\n {7}\S.*)*)", codes, re.M)}
        assert sorted(lines, key=int) == ["0", "1", "2", "130", "141", "143"], (verb, codes)
        assert lines["1"] == _normal(cli_mod.EXIT_ONE[verb]), verb
        changing = verb in ("reduce", "restore", "purge", "retire")
        assert ("answered no" in lines["0"]) == changing and ("no --yes" in lines["2"]) == changing, (verb, lines)


def test_readme_says_the_exit_codes_the_cli_says():
    from tb_footprint_plugin.cli import EXIT_ONE

    text = (REPO / "README.md").read_text(encoding="utf-8")
    codes = dict(re.findall(r"^\| (\d+) \| (.*) \|$", text, re.M))
    assert sorted(codes, key=int) == ["0", "1", "2", "130", "141", "143"], codes
    assert "answered no" in codes["0"] and "--yes" in codes["2"] and "--jobs" in codes["2"]
    per_verb = dict(re.findall(r"^\| `([a-z]+)` \| (.*) \|$", text, re.M))
    assert {v: per_verb.get(v) for v in EXIT_ONE} == EXIT_ONE
