"""Review W's F2: a line of the operation log longer than ``oplog.MAX_LINE`` was taken for a torn
tail and never read past — that manifest and every later record of its segment vanished with
nothing named. Now it is indexed as damage of the op it starts with and reading goes on past it;
and a state too large for one line is written in parts (``oplog.SPLIT_AT``), read whole only
when every part is there."""
import json
import os

import pytest

from tb_footprint_plugin.engine import oplog
from tb_footprint_plugin.engine.vault import EveryBlob, Vault

OP = "20260101T000000-aaaaaa"
OTHER = "20260101T000001-bbbbbb"


def _manifest(op_id: str, n: int) -> dict:
    return {"op_id": op_id, "kind": "reduce", "run": "r", "logdir": "/nowhere", "outcome": "verified",
            "started_at": 1.0, "files": [{"path": f"r/f{i:06d}", "size": 10, "sha256": f"{i:064x}",
                                          "mtime_ns": 1_000_000_000, "mode": 0o644} for i in range(n)]}


@pytest.fixture
def vault(tmp_path):
    root = tmp_path / ".tb-footprint"
    v = Vault(str(root))
    v.ensure()
    yield v
    oplog._MINE.pop((os.path.abspath(str(root)), os.getpid()), None)
    oplog._INDEXES.clear()


def test_a_line_over_max_line_is_damage_of_its_op_and_what_follows_is_read(vault, monkeypatch):
    monkeypatch.setattr(oplog, "MAX_LINE", 4096)
    oplog.append(vault.root, OP, {"type": "manifest", "manifest": _manifest(OP, 1)}, twice=True)
    seg = oplog.log_path(vault.root, OP)
    with open(seg, "ab") as f:  # a line far longer than any record, naming its op first
        f.write(b'{"op":"' + OTHER.encode() + b'","type":"manifest","x":"' + b"y" * 3 * (1 << 20) + b'"}\n')
    oplog.append(vault.root, OTHER, {"type": "note"})
    oplog._INDEXES.clear()
    idx = oplog.index(vault.root)
    long = [(op, ln) for lines in idx.damaged.values() for _n, _o, ln, op, _w in lines]
    assert long and long[0][0] == OTHER and long[0][1] > 3 * (1 << 20), idx.damaged
    assert [e[6] for e in idx.entries(OTHER)] == ["note"]  # read past it
    assert oplog.hiding_damage(vault.root)
    assert isinstance(vault.referenced_blobs(), EveryBlob)
    assert any(os.path.basename(seg) in d.file for d in oplog.damaged_lines(vault.root))


def test_a_state_too_large_for_one_line_is_written_in_parts_and_read_whole(vault, monkeypatch):
    monkeypatch.setattr(oplog, "SPLIT_AT", 8000)
    m = _manifest(OP, 400)
    # the plan's actions are logged too: a list one level down is cut into parts as well
    m["plan"] = {"bytes_before": 1, "actions": [{"path": f"r/f{i:06d}", "action": "delete"} for i in range(400)]}
    vault.write_manifest(m)
    seg = oplog.log_path(vault.root, OP)
    lines = open(seg, "rb").read().splitlines()
    assert len(lines) > 6 and max(len(x) for x in lines) < 8000 + 2000
    got = vault.read_manifest(OP)
    assert [f["sha256"] for f in got["files"]] == [f["sha256"] for f in m["files"]]
    assert got["plan"] == m["plan"]
    # a change after it is logged as a change; the state stays whole
    vault.write_manifest(dict(m, outcome="restored"))
    assert vault.read_manifest(OP)["outcome"] == "restored" and len(vault.read_manifest(OP)["files"]) == 400


def test_a_state_whose_parts_were_cut_short_is_not_taken(vault, monkeypatch):
    monkeypatch.setattr(oplog, "SPLIT_AT", 8000)
    small = _manifest(OP, 2)
    vault.write_manifest(small)
    vault.write_manifest(_manifest(OP, 400))  # too large: logged in parts
    seg = oplog.log_path(vault.root, OP)
    data = open(seg, "rb").read().splitlines(keepends=True)
    parts = [i for i, x in enumerate(data) if b'"manifest_part"' in x]
    open(seg, "wb").write(b"".join(data[:parts[2]]))  # killed midway through its parts
    oplog._INDEXES.clear()
    got = vault.read_manifest(OP)
    assert len(got["files"]) == 2  # the state before that write, never a cut list of files
    recs = [json.loads(x) for x in data if x.strip()]
    assert recs and all(r["op"] == OP for r in recs)


def test_a_state_record_of_the_wrong_types_is_named_damage_of_its_op(vault):
    oplog.append(vault.root, OP, {"type": "manifest", "manifest": _manifest(OP, 1)}, twice=True)
    oplog.append(vault.root, OP, {"type": "manifest_change", "set": [1, 2], "unset": "files"})
    oplog._INDEXES.clear()
    damaged = oplog.index(vault.root).damaged_of(OP)
    assert damaged and "wrong shape" in damaged[0][4], damaged
    assert any("wrong shape" in d.detail for d in oplog.damaged_lines(vault.root))
