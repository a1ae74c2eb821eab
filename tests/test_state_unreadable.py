"""Review R16 F16: this user's own state folder at mode 000 made ``restore`` say "nothing to restore"
(its backups exist, unreadable) and ``history`` "no changes recorded"; a backup this user may not
read was called "damaged". Now each is a permission failure (``permission_denied``) naming the
folder or file, and never "nothing to restore" or "damaged".

Root reads everything whatever its mode, so the verbs run here in a child without the capabilities
that let it (``setpriv --bounding-set -dac_override,-dac_read_search``), as ``test_livewriters``
does for an unreadable event file.
"""
from __future__ import annotations

import glob
import math
import os
from pathlib import Path

import pytest

from conftest import user_files
from helpers_nocap import child_json, cli, still_reads


pytestmark = pytest.mark.usefixtures("disarm_faults")

CHILD = r'''
import json, sys
from tb_footprint_plugin import api

logdir, what = sys.argv[1], sys.argv[2]
try:
    if what == "restore":
        out = {"outcomes": [o.to_dict() for o in api.restore(logdir, run="a")]}
    elif what == "history":
        out = {"history": api.history(logdir)}
    elif what == "plan":
        out = {"notes": api.plan(logdir, "archive", quiet_period=0).notes}
    elif what == "verify":
        out = {"verify": api.verify(logdir)}
    else:
        raise SystemExit(what)
except Exception as e:
    out = {"error": str(e), "code": str(getattr(e, "code", "") or "")}
print(json.dumps(out, default=str))
'''


def _child(logdir: Path, what: str) -> dict:
    return child_json(CHILD, logdir, what)



@pytest.fixture
def reduced(tmp_path):
    """A logdir whose run ``a`` was reduced, its backups kept as plain blobs (hard links)."""
    from tb_footprint_plugin import api, synth

    ld = tmp_path / "logdir"
    with synth.EventWriter(str(ld / "a")) as w:
        for s in range(40):
            w.scalar("loss", s, math.exp(-s / 15.0))
    synth.write_profile_session(str(ld / "a"), synth.session_name_for(synth.DEFAULT_TIMESTAMP), n_events=400,
                                with_caches=True, seed=1)
    for dirpath, dirnames, filenames in os.walk(ld):
        for n in filenames + dirnames:
            os.utime(os.path.join(dirpath, n), (1_600_000_000, 1_600_000_000))
    rep = api.reduce_logdir(str(ld), policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",),
                            vault_format="hardlink")
    assert [o.status for o in rep.outcomes] == ["verified"], rep.outcomes
    state = ld / ".tb-footprint"
    if still_reads(state, 0o700):  # the child must not be able to read it: else the test proves nothing
        pytest.skip("setpriv could not drop the capability to read any folder here")
    return ld


def test_an_unreadable_state_folder_is_a_permission_failure_naming_it(reduced):
    state = reduced / ".tb-footprint"
    before = user_files(reduced)
    os.chmod(state, 0)
    try:
        for what in ("restore", "history"):
            out = _child(reduced, what)
            assert out.get("code") == "permission_denied", (what, out)
            assert str(state) in out["error"] and "nothing to restore" not in out["error"], (what, out)
        # the plan cannot see the unfinished operations: it says why (the reduce then refuses)
        notes = _child(reduced, "plan")["notes"]
        assert any(n.startswith("[permission_denied]") and str(state) in n for n in notes), notes
        p = cli("restore", reduced, "a", "--yes")
        assert p.returncode != 0 and "[permission_denied]" in p.stderr and str(state) in p.stderr, p.stderr
        assert "nothing to restore" not in p.stdout + p.stderr
        p = cli("history", reduced)
        assert p.returncode != 0 and "no changes recorded" not in p.stdout and str(state) in p.stderr, p
    finally:
        os.chmod(state, 0o700)
    assert user_files(reduced) == before  # nothing changed


def test_an_unreadable_history_file_is_named_not_an_empty_log(reduced):
    log = reduced / ".tb-footprint" / "history.jsonl"
    os.chmod(log, 0)
    try:
        out = _child(reduced, "history")
    finally:
        os.chmod(log, 0o600)
    assert out.get("code") == "permission_denied" and str(log) in out["error"], out


def test_an_unreadable_backup_is_not_called_damaged(reduced):
    blob = sorted(glob.glob(str(reduced / ".tb-footprint" / "blobs" / "*" / "*")))[0]
    before = user_files(reduced)
    os.chmod(blob, 0)
    try:
        (o,) = _child(reduced, "restore")["outcomes"]
        checked = _child(reduced, "verify")["verify"]
    finally:
        os.chmod(blob, 0o600)
    assert o["status"] == "failed" and o["code"] == "permission_denied", o
    assert blob in o["reason"] and "damaged" not in o["reason"], o
    assert user_files(reduced) == before  # nothing was put back half-way
    (r,) = [r for r in checked if r["run"] == "a"]
    assert r["damaged_backups"] == [] and r["code"] == "permission_denied", r
    assert any(blob in u for u in r["unreadable_backups"]) and not r["ok"], r
