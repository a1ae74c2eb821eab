"""``history --json`` lines lacked ``code``: each line now carries the outcome's code where its
operation recorded one (a restore that kept bytes found in a file's place), and None where it
has none; the CSV has the column too.
"""
from __future__ import annotations

import csv
import io
import math
import os

import pytest

from tb_footprint_plugin import api

pytestmark = pytest.mark.usefixtures("disarm_faults")


def test_history_lines_carry_the_outcome_code(tmp_path):
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
    (o,) = rep.outcomes
    assert o.status == "verified", o
    # new bytes where an original went: the restore keeps them in the vault, and says so with a code
    gone = sorted(o.removed_files)[0]
    os.makedirs(os.path.dirname(ld / gone), exist_ok=True)
    (ld / gone).write_bytes(b"written after the reduction")
    (r,) = api.restore(str(ld), run="a")
    assert r.status == "restored", r

    entries = api.history(str(ld))
    assert entries and all("code" in e for e in entries), entries
    red = [e for e in entries if e["kind"] == "reduce"]
    res = [e for e in entries if e["kind"] == "restore"]
    assert red and red[0]["code"] is None, red
    assert res and isinstance(res[0]["code"], str) and res[0]["code"], res
    rows = list(csv.DictReader(io.StringIO(api.history_csv(entries))))
    assert "code" in rows[0], rows[0]
    assert [row["code"] for row in rows if row["kind"] == "restore"] == [res[0]["code"]]
