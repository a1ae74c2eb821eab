"""Review R16 F11b: a ``journal`` symlink planted in the state folder was named only once a changing
verb set it aside; ``status`` said nothing. Now ``status`` names each symbolic link in the state
folder and its subfolders (the tool makes none there) with ``path_outside``, where it points, and
never follows it.
"""
from __future__ import annotations

import json
import math
import os

import pytest

from tb_footprint_plugin import api

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _reduced(tmp_path):
    from tb_footprint_plugin import synth

    ld = tmp_path / "logdir"
    with synth.EventWriter(str(ld / "a")) as w:
        for s in range(20):
            w.scalar("loss", s, math.exp(-s / 10.0))
    synth.write_profile_session(str(ld / "a"), synth.session_name_for(synth.DEFAULT_TIMESTAMP), n_events=200,
                                with_caches=True, seed=1)
    for dirpath, dirnames, filenames in os.walk(ld):
        for n in filenames + dirnames:
            os.utime(os.path.join(dirpath, n), (1_600_000_000, 1_600_000_000))
    rep = api.reduce_logdir(str(ld), policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == ["verified"], rep.outcomes
    return ld


def test_status_names_a_planted_journal_link_without_following_it(tmp_path):
    ld = _reduced(tmp_path)
    state = ld / ".tb-footprint"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # what a planted journal folder might hold: a journal naming a run of this logdir
    planted = elsewhere / "20260101T000000-abcdef.jsonl"
    planted.write_text(json.dumps({"type": "begin", "op_id": "20260101T000000-abcdef", "run": "a"}) + "\n")
    before = planted.read_bytes()
    (state / "journal").rmdir()
    os.symlink(elsewhere, state / "journal")
    os.symlink("/etc/passwd", state / "locks" / "a.lease")

    st = api.status(str(ld))
    found = {p.get("path"): p for p in st["problems"] if p["code"] == "path_outside"}
    assert str(state / "journal") in found, st["problems"]
    assert str(elsewhere) in found[str(state / "journal")]["detail"]
    assert str(state / "locks" / "a.lease") in found, st["problems"]
    assert st["unfinished_operations"] == []  # the link's journal is never listed, let alone replayed
    assert not st.get("settle_command")  # recover does not mend it: not offered
    assert os.path.islink(state / "journal") and planted.read_bytes() == before  # untouched, not set aside
    # said once: not also as a damaged lease
    assert not [p for p in st["problems"] if p.get("path") == str(state / "locks" / "a.lease")
                and p["code"] != "path_outside"], st["problems"]
