"""A purge names the other users whose files it destroys for good (review R10 F8's rest).

With ``--include-others-runs`` a user may take a teammate's run into their own vault (the
outcome says whose vault holds it). A later purge of that vault destroys the teammate's only
copy: the preview, the question and ``--json`` now name whose files go (each row's ``others``,
from the uids the manifest recorded), for a reduction's backups and a retired run alike; a run
restored since loses nothing, and nobody is named.

Run as root (CI does), files chowned to a uid nobody has: the tool's user is root, so they are
another user's."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO
from helpers_runs import write_loss_run
from tb_footprint_plugin import api

STRANGER = 54321  # a uid with no name here: said "uid 54321"
OLD = 1_600_000_000


@pytest.fixture(autouse=True)
def as_root():
    assert os.geteuid() == 0, "these tests chown files to another uid: run them as root (CI does)"


def _team(tmp_path):
    logdir = tmp_path / "team"
    write_loss_run(logdir / "theirs", seed=11)
    write_loss_run(logdir / "mine", seed=12)
    write_loss_run(logdir / "old", seed=13)
    for d, _dirs, files in os.walk(logdir):
        for n in files:
            os.utime(os.path.join(d, n), (OLD, OLD))
    for d, dirs, files in os.walk(logdir / "theirs"):
        for n in dirs + files:
            os.chown(os.path.join(d, n), STRANGER, -1)
    os.chown(logdir / "theirs", STRANGER, -1)
    os.chown(logdir / "old", STRANGER, -1)
    return logdir


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tb_footprint_plugin.cli", *args], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=REPO), timeout=600, stdin=subprocess.DEVNULL)


def test_the_purge_names_whose_files_it_destroys(tmp_path):
    logdir = _team(tmp_path)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",),
                            include_others_runs=True, runs=["theirs", "mine"])
    assert sorted(o.status for o in rep.outcomes) == ["verified", "verified"], [o.to_dict() for o in rep.outcomes]
    rep = api.retire(str(logdir), api.retire_rule(runs=["old"], include_others_runs=True), dry_run=False,
                     quiet_period=0)
    assert [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]
    stranger = [{"uid": STRANGER, "user": f"uid {STRANGER}"}]

    preview = api.purge(str(logdir))
    rows = {o["run"]: o for o in preview.to_dict()["ops"]}
    assert set(rows) == {"theirs", "mine", "old"}, rows
    assert rows["theirs"]["others"] == stranger and rows["theirs"]["originals"] > 0, rows["theirs"]
    assert rows["mine"]["others"] == [] and rows["mine"]["originals"] > 0, rows["mine"]
    # a retired run's whole tree goes: its folder is the stranger's, so is what it held
    assert rows["old"]["kind"] == "retire" and rows["old"]["others"] == stranger, rows["old"]

    r = _cli("purge", str(logdir))  # the preview, then the question (no terminal: nothing deleted)
    assert f"(files of uid {STRANGER}: their only copy)" in r.stdout, r.stdout
    assert (f"2 of these hold the only copies of other users' files (uid {STRANGER}): once purged, nobody can "
            "restore them") in r.stdout, r.stdout
    r = _cli("purge", str(logdir), "--json", "--dry-run")
    assert {o["run"]: o["others"] for o in json.loads(r.stdout)["ops"]} == \
        {"theirs": stranger, "mine": [], "old": stranger}, r.stdout

    # restored: its originals are back in the logdir, nobody loses anything
    assert [b.status for b in api.restore(str(logdir), run="theirs")] == ["restored"]
    rows = {o["run"]: o for o in api.purge(str(logdir)).to_dict()["ops"]}
    assert rows["theirs"]["others"] == [] and rows["theirs"]["originals"] == 0, rows["theirs"]

    done = api.purge(str(logdir), yes=True).to_dict()
    assert {o["run"]: o["others"] for o in done["ops"]} == {"theirs": [], "mine": [], "old": stranger}, done


def test_a_manifest_uid_that_is_no_user_names_nobody():
    from tb_footprint_plugin.engine.purge_rules import others_of

    me = os.geteuid()
    assert others_of([{"uid": me}, {"uid": "1001"}, {"uid": True}, {"uid": -1}, {"uid": 1.5}, {}]) == []
    assert others_of([{"uid": 7}, {"uid": STRANGER}, {"uid": 7}]) == \
        [{"uid": 7, "user": others_of([{"uid": 7}])[0]["user"]}, {"uid": STRANGER, "user": f"uid {STRANGER}"}]
