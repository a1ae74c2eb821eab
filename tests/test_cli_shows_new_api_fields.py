"""The CLI's text says what the API says since helper D's changes (report_D, "What remains"):

- ``verify`` printed "backups DAMAGED: " with an empty list when a backup was only unreadable;
  now it prints the unreadable ones as such (code, each file, what fixes it), exit 1;
- ``status`` did not print ``locked_runs`` (runs another live process is changing);
- ``plan`` printed a skip without its code (``permission_denied`` for a folder it cannot read).

Root reads everything whatever its mode, so the unreadable cases run the CLI in a child without the
capabilities that let it (``setpriv --bounding-set -dac_override,-dac_read_search``), as
``test_state_unreadable`` does; each first checks the child really cannot read, and skips otherwise.
"""
from __future__ import annotations

import glob
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from helpers_nocap import ENV, REPO, still_reads
from helpers_nocap import cli as _cli
from helpers_runs import age_tree, write_loss_run
from tb_footprint_plugin import cli


pytestmark = pytest.mark.usefixtures("disarm_faults")


def _write_run(run_dir: Path, seed: int) -> None:
    write_loss_run(run_dir, seed)
    age_tree(run_dir.parent, 1_600_000_000)


def _needs_unreadable(path: Path, mode: int) -> None:
    """Skip unless the child really cannot read ``path`` at mode 000 (else the test proves nothing)."""
    if still_reads(path, mode):
        pytest.skip("setpriv could not drop the capability to read any file here")


def test_verify_says_an_unreadable_backup_is_unreadable_never_an_empty_damaged_line(tmp_path):
    from tb_footprint_plugin import api

    ld = tmp_path / "logdir"
    _write_run(ld / "a", 1)
    rep = api.reduce_logdir(str(ld), policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",),
                            vault_format="hardlink")
    assert [o.status for o in rep.outcomes] == ["verified"], rep.outcomes
    blob = Path(sorted(glob.glob(str(ld / ".tb-footprint" / "blobs" / "*" / "*")))[0])
    _needs_unreadable(blob, 0o600)
    os.chmod(blob, 0)
    try:
        p = _cli("verify", ld)
    finally:
        os.chmod(blob, 0o600)
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr[-2000:])
    (head,) = [ln for ln in p.stdout.splitlines() if ln.startswith("✗ a ")]
    assert "DAMAGED" not in p.stdout, p.stdout
    assert "backups UNREADABLE [permission_denied]" in head and str(blob) in head, head
    assert "chmod u+r" in head, head  # what fixes it
    # and a damaged backup is still called damaged, alone
    assert cli._backups_said({"backups_ok": False, "damaged_backups": ["a/x"], "unreadable_backups": []}) \
        == "backups DAMAGED: a/x"
    assert cli._backups_said({"backups_ok": True, "damaged_backups": [], "unreadable_backups": []}) \
        == "backups intact"


HOLD = r'''
import sys, time
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.run_lock import run_lock
lock = run_lock(Context(sys.argv[1]), "a").acquire()
print("held", flush=True)
time.sleep(600)
'''


def test_status_prints_the_runs_another_live_process_is_changing(tmp_path, capsys):
    from tb_footprint_plugin import synth

    ld = tmp_path / "logdir"
    with synth.EventWriter(str(ld / "a")) as w:
        w.scalar("loss", 1, 1.0)
    assert cli.main(["status", str(ld)]) == 0
    assert "locked" not in capsys.readouterr().out
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(ld)], env=ENV, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        assert cli.main(["status", str(ld)]) == 0
        out = capsys.readouterr().out
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    (line,) = [ln for ln in out.splitlines() if ln.strip().startswith("locked")]
    assert line.startswith(f"  locked [locked]: a — being changed by pid {child.pid} on host "
                           f"{socket.gethostname()}"), line
    assert "lease until" in line, line


def test_plan_prints_the_code_of_a_folder_it_cannot_read(tmp_path):
    ld = tmp_path / "logdir"
    _write_run(ld / "a", 1)
    _write_run(ld / "b", 2)
    _needs_unreadable(ld / "b", 0o755)
    os.chmod(ld / "b", 0)
    try:
        p = _cli("plan", ld, "--quiet-period", "0")
    finally:
        os.chmod(ld / "b", 0o755)
    lines = p.stdout.splitlines()
    (b,) = [ln for ln in lines if ln.startswith("b: ")]
    assert "[skipped [permission_denied]: " in b and str(ld / "b") in b, p.stdout
    (a,) = [ln for ln in lines if ln.startswith("a: ")]
    assert "skipped" not in a, a


def _section(text: str, heading: str) -> str:
    """The text of the docs section whose heading line contains ``heading`` (up to the next heading)."""
    lines = text.splitlines()
    (i,) = [n for n, ln in enumerate(lines) if ln.startswith("#") and heading in ln]
    rest = lines[i + 1:]
    end = next((n for n, ln in enumerate(rest) if ln.startswith("#") and not ln.startswith("# ")), len(rest))
    return "\n".join(rest[:end])


def test_json_schema_documents_the_fields_the_api_gained(tmp_path):
    """docs/json-schema.md names each field the API added (report_D): status ``locked_runs``, verify
    ``unreadable_backups``, history ``code``, the scan's ``unreadable`` and a plan's unread-folder skip;
    and the API does emit those it documents (so the doc names real keys)."""
    from tb_footprint_plugin import api, synth

    doc = (REPO / "docs" / "json-schema.md").read_text(encoding="utf-8")
    assert '"unreadable": [' in _section(doc, "scan --json` schema"), "scan: unreadable"
    assert '"locked_runs": [' in _section(doc, "`status --json`"), "status: locked_runs"
    for key in ("run", "host", "pid", "shard", "until", "code", "detail"):
        assert f'"{key}"' in _section(doc, "`status --json`"), key
    assert '"unreadable_backups"' in _section(doc, "`verify --json`"), "verify: unreadable_backups"
    assert "`code`" in _section(doc, "`history --json`"), "history: code"
    plan = _section(doc, "`plan --json`")
    assert "permission_denied" in plan and '"code"' in plan, "plan: the skip's code"
    assert "no_credentials" in _section(doc, "A verb that failed")
    ld = tmp_path / "logdir"
    with synth.EventWriter(str(ld / "a")) as w:
        w.scalar("loss", 1, 1.0)
    assert "locked_runs" in api.status(str(ld))
    assert "unreadable" in api.scan(str(ld)).to_dict()
