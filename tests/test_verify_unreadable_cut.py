"""A reduction whose backups this user may not read, whose re-check (``tb-footprint verify``) is cut
short by a cancel, is coded by what happened: ``permission_denied`` (its backups stay unreadable
whatever the cut), never ``interrupted`` as if nothing had been found (r18 report E: the CLI then
printed "UNREADABLE [interrupted]"). It is still not checked (``checked`` False, never ok), and the
CLI's "N reduction(s) not checked" counts it.

Root reads everything whatever its mode, so the re-check runs in a child without the capabilities
that let it (``setpriv``, as ``test_state_unreadable`` does).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers_nocap import child_json, still_reads
from helpers_runs import write_loss_run
from tb_footprint_plugin import api


pytestmark = pytest.mark.usefixtures("disarm_faults")

#: the child: ``api.verify`` (or the CLI's) with a cancel at ``where``: inside the readers'
#: comparison, or as the second backup is re-hashed
CHILD = r'''
import contextlib, io, json, os, signal, sys
from tb_footprint_plugin import api, cli
from tb_footprint_plugin.engine import checks, vault

logdir, where, how = sys.argv[1:4]
cancel = api.CancelToken()
stop = (lambda: os.kill(os.getpid(), signal.SIGINT)) if how == "cli" else cancel.cancel
if where == "readers":
    real = checks.compare_views
    def inside(*a, **kw):
        stop()
        return real(*a, **kw)
    checks.compare_views = inside
else:
    real_check, seen = vault.Vault.check_blob, []
    def second(self, sha):
        seen.append(sha)
        if len(seen) == 2:
            stop()
        return real_check(self, sha)
    vault.Vault.check_blob = second
if how == "cli":
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(["verify", logdir, "--verify", "python", "--json"])
    print(json.dumps({"rc": rc, "rows": json.loads(out.getvalue()), "err": err.getvalue()}, default=str))
else:
    print(json.dumps({"rows": api.verify(logdir, verify_backends=("python",), cancel=cancel)}, default=str))
'''


def _child(logdir: Path, where: str, how: str) -> dict:
    return child_json(CHILD, logdir, where, how)


@pytest.fixture
def reduced(tmp_path):
    """A logdir whose run ``a`` was reduced with several backups kept as plain blobs; the first
    backup its manifest names made unreadable (mode 000) for the test."""
    ld = tmp_path / "logdir"
    write_loss_run(ld / "a", 1)
    rep = api.reduce_logdir(str(ld), policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",),
                            vault_format="hardlink")
    assert [o.status for o in rep.outcomes] == ["verified"], rep.outcomes
    (op,) = api.restorable(str(ld))
    assert op["files"] >= 2, op
    from tb_footprint_plugin.engine.catalogue import find_manifest
    from tb_footprint_plugin.engine.context import Context
    from tb_footprint_plugin.engine.vault import Vault

    m = find_manifest(Context(str(ld)), op["op_id"])
    blob = Vault(m["vault"]).blob_path(m["files"][0]["sha256"])
    os.chmod(blob, 0)
    if still_reads(blob):
        os.chmod(blob, 0o600)
        pytest.skip("setpriv could not drop the capability to read any file here")
    yield ld, blob
    os.chmod(blob, 0o600)


def _unreadable_not_checked(row: dict, blob: str) -> None:
    assert (row["ok"], row["checked"], row["code"]) == (False, False, "permission_denied"), row
    assert any(blob in u for u in row["unreadable_backups"]) and row["damaged_backups"] == [], row


@pytest.mark.parametrize("where", ["readers", "backups"])
def test_a_cut_recheck_of_unreadable_backups_is_coded_permission_denied(reduced, where):
    ld, blob = reduced
    (row,) = _child(ld, where, "api")["rows"]
    _unreadable_not_checked(row, blob)


def test_the_cli_counts_an_unreadable_run_it_did_not_finish_as_not_checked(reduced):
    ld, blob = reduced
    out = _child(ld, "readers", "cli")
    assert out["rc"] == 130, out
    (row,) = out["rows"]
    _unreadable_not_checked(row, blob)
    assert "1 reduction(s) not checked" in out["err"], out["err"]
