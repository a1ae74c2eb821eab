"""#26, ``purge --forget-missing`` (invariant 5): only the user whose logdir it is can end a missing manifest's line.

Two real Unix users (tests/test_trust_users.py's fixtures: ``useradd``, commands run with ``setpriv``). Alice's
logdir holds runs x and w with the same bytes (the same seed), each reduced into her state folder; w's manifest goes
missing (its piece of the operation log, both copies). Bob's ``tb-footprint purge ALICES_LOGDIR --forget-missing
W_OP --yes`` fails and writes nothing (his state folder in her logdir is his own: no line of hers is his to end):
alice's change log is byte for byte as it was, her status still names w's operation. A change log Alice may not
write refuses, naming it. Then Alice's own ``--yes`` ends it."""
import json
import os
import sys

from test_trust_users import users, world, tmp_path  # noqa: F401 (fixtures)
from test_trust_users import reduced

STATE = ".tb-footprint"


def _cli(user, *argv):
    return user._as([sys.executable, "-m", "tb_footprint_plugin.cli", *[str(a) for a in argv]])


def _missing(user, logdir) -> list:
    st = user.tool("status", logdir)
    return [p for p in st["problems"] if p["code"] == "manifest_missing"]


def test_only_the_logdirs_user_ends_a_missing_manifests_line(users, tmp_path):
    alice, bob = users
    logdir = tmp_path / "alice-logs"
    logdir.mkdir()
    os.chown(logdir, alice.uid, alice.gid)
    os.chmod(logdir, 0o755)  # alice's own logdir, readable by others
    for run in ("x", "w"):  # the same seed (len(run)): identical bytes, one backup of each content
        alice.tool("make", logdir, run)
    assert reduced(alice.tool("reduce", logdir, "x"))["status"] == "verified"
    seg = logdir / STATE / "oplog" / "segments"
    had = set(os.listdir(seg))
    o = reduced(alice.tool("reduce", logdir, "w"))
    assert o["status"] == "verified", o
    op_w = o["op_id"]
    for name in sorted(set(os.listdir(seg)) - had):  # w's manifest goes missing (both copies)
        os.remove(seg / name)
        twin = logdir / STATE / "oplog" / "twins" / name
        if twin.exists():
            os.remove(twin)
    assert [p for p in _missing(alice, logdir) if op_w in p["detail"]]
    history = logdir / STATE / "history.jsonl"
    before = history.read_bytes()

    r = _cli(bob, "purge", logdir, "--forget-missing", op_w, "--yes", "--json")
    print("bob:", r.returncode, r.stdout[-1500:], r.stderr[-1500:])
    # his state folder in her logdir is his own (none): no line of hers is his to end
    assert r.returncode == 2 and json.loads(r.stdout)["error"]["code"] == "not_found", (r.stdout, r.stderr)
    assert history.read_bytes() == before  # nothing of alice's written
    assert [p for p in _missing(alice, logdir) if op_w in p["detail"]]

    # a change log she may not write: refused, naming it, nothing written (these users read anything: their
    # capability to read and search is what lets them run the test's interpreter)
    assert alice.sh(f"chmod 400 '{history}'").returncode == 0
    r = _cli(alice, "purge", logdir, "--forget-missing", op_w, "--yes", "--json")
    assert alice.sh(f"chmod 600 '{history}'").returncode == 0
    print("alice, unwritable log:", r.returncode, r.stdout[-1500:], r.stderr[-1500:])
    err = json.loads(r.stdout)["error"]
    assert r.returncode == 1 and err["code"] == "refused" and str(history) in err["message"], (r.stdout, r.stderr)
    assert history.read_bytes() == before

    r = _cli(alice, "purge", logdir, "--forget-missing", op_w, "--yes", "--json")
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert json.loads(r.stdout)["ended"]
    assert not _missing(alice, logdir)
