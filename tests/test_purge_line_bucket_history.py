"""Review R21 PD18, the read side (with bucket_catalogue.patch): a bucket's purge line in history --
its JSON and CSV too -- is the disk's (history.purge_line over the purge's mark), and a mark written
before still reads, its missing fields null. Fails without the patch (tool_version/reason None)."""
from __future__ import annotations

import csv
import getpass
import io
import json
import shutil
import socket

import pytest

from helpers_cli import run_cli
from tb_footprint_plugin.version import __version__
from test_purge_line_every_store import SAID, _purge_line, _reduce_and_purge, _run

pytestmark = pytest.mark.usefixtures("disarm_faults")


def test_a_purge_line_says_who_purged_with_which_version_and_why_on_a_disk_and_a_bucket(tmp_path, s3_bucket):
    disk = tmp_path / "disk"
    _run(disk / "a")
    src = tmp_path / "src"
    shutil.copytree(disk, src)
    url = s3_bucket.upload(src, "pd18")
    lines = {}
    for where in (str(disk), url):
        op_id = _reduce_and_purge(where)
        e = _purge_line(where)
        assert e["op_id"] == op_id
        lines[where] = e
    d, b = lines[str(disk)], lines[url]
    for e in (d, b):
        assert set(SAID) <= set(e), sorted(set(SAID) - set(e))
        assert (e["user"], e["host"], e["tool_version"]) == (getpass.getuser(), socket.gethostname(), __version__), e
        assert e["reason"].startswith(f"backup of {e['op_id']} deleted from "), e["reason"]
        assert e["before"] == e["freed"] > 0 and e["after"] == 0, e
    assert d["reason"] == f"backup of {d['op_id']} deleted from {disk / '.tb-footprint'}", d["reason"]
    assert b["reason"].endswith("/pd18/.tb-footprint") and b["reason"].split(" deleted from ")[1].startswith("s3://"), \
        b["reason"]
    # the same shape: every field but the operation's own id, the words' vault and the figures alike
    same = [k for k in SAID if k not in ("op_id", "reason", "before", "freed")]
    assert {k: b[k] for k in same} == {k: d[k] for k in same}

    # the CLI's --json and --csv say it alike on both stores
    for where in (str(disk), url):
        [j] = [e for e in json.loads(run_cli("history", where, "--json").stdout) if e.get("kind") == "purge"]
        [c] = [r for r in csv.DictReader(io.StringIO(run_cli("history", where, "--csv").stdout)) if r["kind"] == "purge"]
        for k in ("user", "host", "tool_version", "reason"):
            assert j[k] == c[k] == lines[where][k], (where, k, j[k], c[k])

    # a manifest its purge marked before the mark said more (user and host only; untrusted: a host
    # that is no text) still reads: the fields it lacks are null
    [key] = [n for n in s3_bucket.fs.find(s3_bucket.key("pd18/.tb-footprint")) if n.endswith(f"{b['op_id']}.json")]
    doc = json.loads(s3_bucket.fs.cat_file(key))
    assert doc["purged_with"]["reason"] == b["reason"], doc["purged_with"]
    doc["purged_with"] = {"user": "alice", "host": 7}
    s3_bucket.fs.pipe_file(key, json.dumps(doc).encode())
    s3_bucket.fs.invalidate_cache()
    old = _purge_line(url)
    assert (old["user"], old["host"], old["tool_version"], old["reason"]) == ("alice", None, None, None), old
    assert set(SAID) <= set(old) and old["freed"] == b["freed"]
