"""The command line as a user meets it (issue 13): usage errors, questions on a terminal and
never without one, reruns after a restore, runs that match nothing, restore's messages.

Every test runs the real ``tb-footprint`` entry point in a subprocess; terminals are real
pseudo-terminals (``pty``)."""
import json
import os
import pty
import select
import subprocess
import sys
import time

import pytest

from conftest import copy_real, tree_hashes, user_files
from helpers_cli import cli_env, run_cli as cli
from tb_footprint_plugin.cli import build_parser



def cli_on_terminal(*args, answer: str, timeout: float = 600):
    """``tb-footprint ARGS`` with a pseudo-terminal as stdin/stdout/stderr; ``answer`` is typed once a
    question ending in '[y/N] ' shows. Returns (exit code, everything the terminal showed)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "tb_footprint_plugin.cli", *map(str, args)], env=cli_env(),
                         stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    seen, answered, deadline = b"", False, time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 0.2)
            if r:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
            if not answered and b"[y/N] " in seen:
                os.write(master, answer.encode() + b"\n")
                answered = True
            if p.poll() is not None and not r:
                break
        rc = p.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()
    return rc, seen.decode("utf-8", "replace").replace("\r\n", "\n")


@pytest.fixture
def logdir(tmp_path):
    return copy_real("tf/keras_profiled", tmp_path / "logdir")


# --- usage errors -------------------------------------------------------------------------

def test_usage_errors_exit_2_and_name_the_accepted_format(tmp_path):
    p = cli("reduce", tmp_path / "missing")
    assert p.returncode == 2 and "is not a directory" in p.stderr
    p = cli("plan", tmp_path, "--policy", "no-such-policy")
    assert p.returncode == 2 and "unknown policy 'no-such-policy'" in p.stderr
    p = cli("plan", tmp_path, "--min-size", "abc")
    assert p.returncode == 2 and "not a size: 'abc'" in p.stderr and "100MB" in p.stderr
    assert "parse_size" not in p.stderr
    p = cli("reduce", tmp_path, "--older-than", "soon")
    assert p.returncode == 2 and "not a duration: 'soon'" in p.stderr and "14d" in p.stderr


def test_verify_values_are_checked_before_anything_runs(logdir):
    before = tree_hashes(logdir)
    p = cli("reduce", logdir, "--verify", "pyton")
    assert p.returncode == 2 and "unknown reader backend pyton" in p.stderr and "python, rust" in p.stderr
    assert tree_hashes(logdir) == before  # no backup, no transform, no vault, no ledger
    assert not (logdir / ".tb-footprint").exists()
    assert "python,rust" in cli("reduce", "-h").stdout


def test_every_argument_has_help_and_every_verb_a_description_and_example():
    parser = build_parser()
    verbs = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    assert set(verbs.choices) >= {"scan", "plan", "reduce", "verify", "restore", "purge", "status", "history", "demo"}
    for name, sp in verbs.choices.items():
        assert sp.description, name
        assert f"tb-footprint {name}" in (sp.epilog or ""), name
        for a in sp._actions:
            assert a.help, f"{name} {a.option_strings or a.dest} has no help"


# --- run selection ------------------------------------------------------------------------

@pytest.mark.parametrize("verb", ["plan", "reduce"])
def test_selection_matching_nothing_is_an_error_naming_it(logdir, verb):
    before = tree_hashes(logdir)
    p = cli(verb, logdir, "--run", "does_not_exist", "--run", "train")
    assert p.returncode == 2 and "'does_not_exist'" in p.stderr and "'train'" not in p.stderr.split("(runs")[0]
    p = cli(verb, logdir, "--runs", "zzz*")
    assert p.returncode == 2 and "'zzz*'" in p.stderr and "train" in p.stderr  # names the runs there are
    assert tree_hashes(logdir) == before


# --- reduce asks on a terminal, never without one -------------------------------------------

def test_bare_reduce_on_a_terminal_shows_the_plan_and_asks(logdir):
    before = user_files(logdir)
    rc, out = cli_on_terminal("reduce", logdir, "--verify", "python", answer="n")
    assert rc == 0, out
    assert "1 run(s) to reduce" in out and "train:" in out and "Reduce 1 run(s)? [y/N]" in out
    assert "nothing changed." in out
    assert user_files(logdir) == before
    rc, out = cli_on_terminal("reduce", logdir, "--verify", "python", answer="y")
    assert rc == 0, out
    assert "✓ train: verified" in out and user_files(logdir) != before


def test_sharded_reduce_of_several_logdirs_asks_about_its_own_runs_only(logdir, tmp_path):
    """The question of ``reduce A B --shard 0/2`` lists the runs that shard takes, each under its
    logdir; declined, neither logdir changes."""
    other = copy_real("tf/keras_profiled", tmp_path / "other")
    before = (user_files(logdir), user_files(other))
    rc, out = cli_on_terminal("reduce", logdir, other, "--shard", "0/2", "--verify", "python", answer="n")
    assert rc == 0, out
    assert "1 run(s) to reduce" in out and "Reduce 1 run(s)? [y/N]" in out, out
    assert sum(f"{d}: train:" in out for d in (logdir, other)) == 1, out
    assert "nothing changed." in out
    assert (user_files(logdir), user_files(other)) == before


def test_run_selection_over_several_logdirs_matches_in_any_of_them(logdir, tmp_path):
    """``reduce A B --run NAME``: a name of one logdir's run is no error for the other; a name
    that is a run of neither is one, before anything changes."""
    other = copy_real("tf/keras_profiled", tmp_path / "other")
    (other / "train").rename(other / "solo")
    before = (user_files(logdir), user_files(other))
    bad = cli("reduce", logdir, other, "--run", "nope", "--verify", "python")
    assert bad.returncode == 2 and "'nope'" in bad.stderr, bad.stderr
    assert (user_files(logdir), user_files(other)) == before
    p = cli("reduce", logdir, other, "--run", "solo", "--verify", "python", "--json", "--yes")
    assert p.returncode == 0, p.stderr
    first, second = json.loads(p.stdout)
    assert first["outcomes"] == [] and [o["run"] for o in second["outcomes"]] == ["solo"]
    assert user_files(logdir) == before[0] and user_files(other) != before[1]


def test_reduce_yes_on_a_terminal_does_not_ask(logdir):
    rc, out = cli_on_terminal("reduce", logdir, "--verify", "python", "--yes", answer="n")
    assert rc == 0, out
    assert "[y/N]" not in out and "✓ train: verified" in out


def test_reduce_without_a_terminal_needs_yes_shows_the_plan_and_exits_2(logdir):
    """Issue 29: a notebook's ``!tb-footprint reduce logs`` (no terminal) shows the plan, changes
    nothing and exits 2 naming --yes; with --yes it acts without asking."""
    before = tree_hashes(logdir)
    p = cli("reduce", logdir, "--verify", "python")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "1 run(s) to reduce" in p.stdout and "train:" in p.stdout and "--yes" in p.stderr
    assert "[y/N]" not in p.stdout + p.stderr
    assert tree_hashes(logdir) == before and not (logdir / ".tb-footprint").exists()
    p = cli("reduce", logdir, "--verify", "python", "-y")
    assert p.returncode == 0, p.stderr
    assert "[y/N]" not in p.stdout + p.stderr and "✓ train: verified" in p.stdout


# --- reduce after restore, ledger skips said as such ----------------------------------------

def test_reduce_after_restore_reduces_again_and_ledger_skips_are_printed(logdir):
    p = cli("reduce", logdir, "--verify", "python", "--yes")
    assert p.returncode == 0 and "✓ train: verified" in p.stdout, p.stdout + p.stderr
    reduced = user_files(logdir)
    p = cli("reduce", logdir, "--verify", "python", "--yes")  # nothing changed: the ledger's entry holds
    assert p.returncode == 0
    assert "· train: skipped [already_in_ledger]" in p.stdout, p.stdout
    assert user_files(logdir) == reduced
    assert cli("restore", logdir, "train", "--yes").returncode == 0
    assert user_files(logdir) != reduced
    p = cli("reduce", logdir, "--verify", "python", "--json", "--yes")  # the run changed: the entry is stale
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    train = next(o for o in rep["outcomes"] if o["run"] == "train")
    assert train["status"] == "verified" and rep["saved_bytes"] > 0
    assert user_files(logdir) == reduced


def test_new_files_make_a_ledger_entry_stale(logdir):
    assert cli("reduce", logdir, "--verify", "python", "--yes").returncode == 0
    (logdir / "train" / "notes.txt").write_text("x" * 100)
    old = time.time() - 7200  # out of the quiet period
    os.utime(logdir / "train" / "notes.txt", (old, old))
    p = cli("reduce", logdir, "--verify", "python", "--yes")
    assert "already_in_ledger" not in p.stdout.split("train:")[1].splitlines()[0], p.stdout


# --- restore ------------------------------------------------------------------------------

def test_restore_of_a_restored_run_says_so(logdir):
    assert cli("reduce", logdir, "--verify", "python", "--yes").returncode == 0
    assert cli("restore", logdir, "train", "--yes").returncode == 0
    p = cli("restore", logdir, "train", "--yes")
    assert p.returncode == 0, p.stderr
    assert "already restored" in p.stdout and "[already_restored]" in p.stdout


def test_restore_without_a_run_needs_all_or_a_terminal(logdir):
    original = user_files(logdir)
    assert cli("reduce", logdir, "--verify", "python", "--yes").returncode == 0
    reduced = user_files(logdir)
    p = cli("restore", logdir)
    assert p.returncode == 2 and "--all" in p.stderr
    assert user_files(logdir) == reduced
    rc, out = cli_on_terminal("restore", logdir, answer="n")
    assert rc == 0 and "Restore 1 run(s)? [y/N]" in out and "train" in out, out
    assert user_files(logdir) == reduced
    rc, out = cli_on_terminal("restore", logdir, answer="y")
    assert rc == 0 and "✓ train: restored" in out, out
    assert user_files(logdir) == original
    assert cli("reduce", logdir, "--verify", "python", "--yes").returncode == 0
    p = cli("restore", logdir, "--all", "--yes")
    assert p.returncode == 0 and "✓ train: restored" in p.stdout
    assert user_files(logdir) == original


# --- what the disk sees: removed from the logdir vs freed after purge ------------------------

def data_bytes(root):
    """Bytes of distinct inodes under ``root`` (hard links once), the tool's bookkeeping files
    (manifests, journal, change log, ledger, caches) left out: what `du` sees of the data."""
    seen, total = set(), 0
    for d, _dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        for n in files:
            if rel.startswith(".tb-footprint") and "blobs" not in rel.split(os.sep):
                continue
            st = os.lstat(os.path.join(d, n))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def test_removed_and_freed_after_purge_are_two_numbers_and_restore_leaves_no_fuller_disk(logdir):
    before = data_bytes(logdir)
    # the hard-link vault (the compressed default frees the disk at once: test_vault_compressed.py)
    p = cli("reduce", logdir, "--verify", "python", "--json", "--yes", "--vault-format", "hardlink")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    removed, after_purge = rep["removed_from_logdir_bytes"], rep["freed_on_disk_after_purge_bytes"]
    assert removed == rep["saved_bytes"] > 0 and after_purge > 0
    # the backups are hard links: the disk did not drop yet, the purge frees what it says
    assert data_bytes(logdir) >= before
    listing = json.loads(cli("purge", logdir, "--json", "-n").stdout)
    assert listing["freed_bytes"] == after_purge
    p = cli("reduce", logdir, "--verify", "python", "--run", "train", "--yes")
    assert p.returncode == 0
    text = cli("restore", logdir, "train", "--yes")
    assert text.returncode == 0, text.stderr
    assert "vault's now redundant copy freed" in text.stdout
    assert data_bytes(logdir) <= before  # the restore wrote a copy and dropped the vault's link
    st = json.loads(cli("status", logdir, "--json").stdout)
    assert st["vault_bytes"] == 0
    hist = json.loads(cli("history", logdir, "--json").stdout)
    red = next(e for e in hist if e["kind"] == "reduce" and e["run"] == "train")
    assert red["backup"] == "released" and red["removed_from_logdir_bytes"] == removed


def test_restore_keeps_a_blob_another_operation_still_claims(tmp_path):
    """Two logdirs sharing one vault with identical originals: restoring one must not drop the
    blob the other's kept backup needs."""
    a = copy_real("tf/keras_profiled", tmp_path / "a")
    b = copy_real("tf/keras_profiled", tmp_path / "b")
    vault = tmp_path / "vault"
    original_b = user_files(b)
    for d in (a, b):
        assert cli("reduce", d, "--verify", "python", "--backup-dir", vault, "--yes").returncode == 0
    assert cli("restore", a, "train", "--backup-dir", vault, "--yes").returncode == 0
    # b's backups are still there (packed: their emptied shard folders under blobs/ are gone)
    from tb_footprint_plugin.engine.vault import Vault

    v = Vault(str(vault))
    shas = {f["sha256"] for m in v.manifests() for f in m.get("files", [])}
    assert shas and all(v.check_blob(s) for s in shas)
    p = cli("restore", b, "train", "--backup-dir", vault, "--yes")
    assert p.returncode == 0, p.stdout + p.stderr
    assert user_files(b) == original_b
    assert "vault's now redundant copy freed" in p.stdout  # the last claim gone: now it is dropped


def test_purge_is_in_the_change_log_and_history_marks_the_backup_gone(logdir):
    assert cli("reduce", logdir, "--verify", "python", "--yes").returncode == 0
    assert cli("purge", logdir, "--older-than", "0s", "--yes").returncode == 0
    hist = json.loads(cli("history", logdir, "--json").stdout)
    red = next(e for e in hist if e["kind"] == "reduce" and e["run"] == "train")
    purge = next(e for e in hist if e["kind"] == "purge")
    assert red["backup"] == "purged" and purge["op_id"] == red["op_id"] and purge["freed"] > 0
    text = cli("history", logdir).stdout.splitlines()
    assert text[0].startswith("disk in use now (logdir + vault):") and not text[1]  # the header line, once
    text = text[2:]
    assert text[0].split() == ["TIME", "KIND", "OUTCOME", "RUN", "BEFORE", "AFTER", "FREED", "NOW", "AFTER", "PURGE",
                               "BACKUP", "OP"]
    row = next(line for line in text if " reduce " in line and " train " in line)
    assert " gone " in row
    assert any(" purge " in line and "freed" in line for line in text)
    # columns line up: every row's op id starts where the header's OP does
    col = text[0].index("OP")
    assert all(line[col:col + 8].strip() for line in text[1:]), text


def test_scan_tables_are_aligned_and_file_categories_have_no_record_count(logdir):
    out = cli("scan", logdir).stdout.splitlines()
    head = next(i for i, line in enumerate(out) if line.strip().startswith("CATEGORY"))
    header = out[head]
    rows = [line for line in out[head + 1:] if line.strip()]
    for name in ("SIZE", "SHARE", "FILES", "RECORDS"):
        end = header.index(name) + len(name)
        assert all(len(r) >= end and r[end - 1] != " " for r in rows), (name, rows)
    xplane = next(r for r in rows if "xplane" in r)
    assert xplane.rstrip().endswith("—")
    assert any("<0.1%" in r for r in rows)  # small shares written as the tab writes them


# --- progress on a terminal ---------------------------------------------------------------

def test_reduce_and_verify_show_a_progress_bar_on_a_terminal(logdir):
    rc, out = cli_on_terminal("reduce", logdir, "--verify", "python", "--yes", answer="n")
    assert rc == 0, out
    # tqdm's bar: bytes with a rate, runs done of the total, and 100% at the end
    assert "100%" in out and "1/1 runs" in out and "B/s" in out, out
    assert "✓ train: verified" in out
    rc, out = cli_on_terminal("verify", logdir, "--verify", "python", answer="n")
    assert rc == 0, out
    assert "verifying train" in out and "1/1" in out, out
    # without a terminal: no bar, only the lines
    p = cli("verify", logdir, "--verify", "python")
    assert p.returncode == 0 and "verifying" not in p.stdout + p.stderr and "✓ train" in p.stdout
