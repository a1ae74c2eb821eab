"""Review R21 PD18: a purge's line in ``history`` says who purged, with which version, and why, on a
bucket as on a disk. A disk's line had ``user``, ``host``, ``tool_version``, ``reason`` and
``before``; a bucket's had none of them (then ``user`` and ``host`` only, 7cbfbee): in a shared
bucket the change log could not tell who deleted the backups, nor with which version. Both come
from one function (``history.purge_line`` over ``history.purge_mark``): a disk's purge appends it,
a bucket's purge records the mark in each manifest it marks (``purged_with``), from which its line
is read (``purge_line`` over that mark); a mark written before reads, its missing fields null."""
from __future__ import annotations

import csv
import getpass
import io
import json
import shutil
import socket

import pytest

from helpers_cli import run_cli
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine.history import purge_line
from tb_footprint_plugin.version import __version__

pytestmark = pytest.mark.usefixtures("disarm_faults")

#: what a purge's line says on every store
SAID = ("op_id", "kind", "run", "policy", "before", "after", "freed", "verified", "outcome", "backup_kept",
        "reason", "user", "host", "tool_version")


def _run(run_dir) -> None:
    with synth.EventWriter(str(run_dir)) as w:
        for s in range(20):
            w.scalar("loss", s, 1.0 / (s + 1))
    synth.write_profile_session(str(run_dir), synth.session_name_for(synth.DEFAULT_TIMESTAMP), n_events=300)


def _reduce_and_purge(where: str) -> str:
    rep = api.reduce_logdir(where, runs=["a"], policy="archive", dry_run=False, quiet_period=0)
    [o] = rep.outcomes
    assert str(o.status) == "verified", o.reason
    pur = api.purge(where, yes=True)
    assert [row["op_id"] for row in pur.ops] == [o.op_id], pur.ops
    return o.op_id


def _purge_line(where: str) -> dict:
    [e] = [e for e in api.history(where) if e.get("kind") == "purge"]
    return e


def test_a_purge_line_says_who_purged_with_which_version_and_why_on_a_disk_and_a_bucket(tmp_path, s3_bucket):
    disk = tmp_path / "disk"
    _run(disk / "a")
    src = tmp_path / "src"
    shutil.copytree(disk, src)
    url = s3_bucket.upload(src, "pd18")
    lines, marks = {}, {}
    for where in (str(disk), url):
        op_id = _reduce_and_purge(where)
        if where == url:  # a bucket's line is read from the mark its purge wrote in the manifest
            [key] = [n for n in s3_bucket.fs.find(s3_bucket.key("pd18/.tb-footprint")) if n.endswith(f"{op_id}.json")]
            marks[where] = json.loads(s3_bucket.fs.cat_file(key))["purged_with"]
            lines[where] = purge_line(op_id, "a", 1, marks[where])
        else:
            lines[where] = _purge_line(where)
        assert lines[where]["op_id"] == op_id
    d, b = lines[str(disk)], lines[url]
    for e in (d, b):
        assert set(SAID) <= set(e), sorted(set(SAID) - set(e))
        assert (e["user"], e["host"], e["tool_version"]) == (getpass.getuser(), socket.gethostname(), __version__), e
        assert e["reason"].startswith(f"backup of {e['op_id']} deleted from "), e["reason"]
        assert e["before"] == e["freed"] > 0 and e["after"] == 0, e
    assert d["reason"] == f"backup of {d['op_id']} deleted from {disk / '.tb-footprint'}", d["reason"]
    assert b["reason"].split(" deleted from ")[1] == f"s3://{s3_bucket.key('pd18/.tb-footprint')}", b["reason"]
    # the same shape: every field but the operation's own id, the words' vault and the figures alike
    same = [k for k in SAID if k not in ("op_id", "reason", "before", "freed")]
    assert {k: b[k] for k in same} == {k: d[k] for k in same}
    # the disk's line as its CLI says it, --json and --csv alike
    [j] = [e for e in json.loads(run_cli("history", disk, "--json").stdout) if e.get("kind") == "purge"]
    [c] = [r for r in csv.DictReader(io.StringIO(run_cli("history", disk, "--csv").stdout)) if r["kind"] == "purge"]
    for k in ("user", "host", "tool_version", "reason"):
        assert j[k] == c[k] == d[k], (k, j[k], c[k])


def test_a_purge_mark_written_before_reads_its_missing_fields_as_null():
    """A bucket manifest marked by an older purge (user and host only), or planted (a host that is
    no text): the line still reads, what it lacks null."""
    e = purge_line("20260101T000000-abcdef", "a", 5, {"user": "alice", "host": 7})
    assert (e["user"], e["host"], e["tool_version"], e["reason"]) == ("alice", None, None, None), e
    assert set(SAID) <= set(e) and e["freed"] == e["before"] == 5
    for planted in (None, "x", ["user"]):
        assert purge_line("20260101T000000-abcdef", "a", 5, planted)["user"] is None
