"""The Activity view at many operations (issue #28, r23 task B): ``api.history_page(newest=N)``
reads the manifests of the N entries it shows, not every manifest of the vault. On a disk the
change log's newest lines are read a block at a time (``ChangeLog.newest``) and their manifests
are looked up by op id (``catalogue.own_manifests_of``); an op id from a line is untrusted and
names no file unless it is of the op-id format.
"""
from __future__ import annotations

import json
import os

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine.vault import Vault

PY = ("python",)
RUNS = 24


def _logdir(root, n: int = RUNS) -> str:
    """``n`` small runs, each with a profile session the archive policy removes."""
    ld = root / "logs"
    for i in range(n):
        run = ld / f"exp/run{i:03d}"
        with synth.EventWriter(str(run), timestamp=1_700_000_000) as w:
            for s in range(5):
                w.scalar("loss", s, 1.0 / (s + 1 + i))
        synth.write_profile_session(str(run), synth.session_name_for(1_700_000_600), "host", n_events=5, seed=i)
    return str(ld)


@pytest.fixture(scope="module")
def many_ops(tmp_path_factory):
    """A logdir of ``RUNS`` reductions, two of them restored, one purged: every backup state."""
    ld = _logdir(tmp_path_factory.mktemp("many"))
    rep = api.reduce_logdir(ld, policy="archive", dry_run=False, quiet_period=0, verify_backends=PY)
    assert rep.ok and sum(o.status == "verified" for o in rep.outcomes) == RUNS, [o.to_dict() for o in rep.outcomes]
    ops = sorted(rep.outcomes, key=lambda o: o.run)
    for o in ops[-2:]:
        api.restore(ld, op=o.op_id)
    assert [o["op_id"] for o in api.purge(ld, op=ops[-3].op_id, yes=True).ops] == [ops[-3].op_id]
    return ld


def _counting(monkeypatch):
    """Every manifest the vaults read, one op id per read (``Vault.read_manifest``: the one read
    of a manifest, whether a whole vault's is listed or one is looked up)."""
    read = []
    real = Vault.read_manifest

    def counted(self, op_id):
        read.append(op_id)
        return real(self, op_id)

    monkeypatch.setattr(Vault, "read_manifest", counted)
    return read


def test_a_page_of_the_history_reads_the_manifests_it_shows(many_ops, monkeypatch):
    whole = api.history(many_ops)
    assert len(whole) >= RUNS + 3 and {e.get("backup") for e in whole} >= {"kept", "released", "purged"}, whole
    read = _counting(monkeypatch)
    for n in (0, 1, 5, 7, len(whole), len(whole) + 4):
        read.clear()
        page = api.history_page(many_ops, newest=n)
        assert page == {"entries": whole[max(0, len(whole) - n):] if n else [], "total": len(whole)}, n
        shown = {e["op_id"] for e in page["entries"]}
        # each shown operation's manifest read once (every vault's was read per page before)
        assert sorted(read) == sorted(shown), (n, len(read), len(shown))
    read.clear()
    assert api.history(many_ops, newest=5) == whole[-5:] and len(read) <= 5, read


def test_an_op_id_from_a_line_names_no_file_out_of_the_vault(many_ops, tmp_path, monkeypatch):
    """A planted line whose op id is a path: no file it names is opened, no manifest read for
    it, and it shows as a line with no manifest behind it (``backup: unknown``)."""
    state = os.path.join(many_ops, ".tb-footprint")
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"op_id": "x", "logdir": many_ops}))
    hostile = ["../../../../" + str(outside)[1:-5], str(outside)[:-5], "..", "a/../b", "", "x" * 300]
    path = os.path.join(state, "history.jsonl")
    with open(path, "rb") as f:
        kept = f.read()
    try:
        with open(path, "ab") as f:
            for i, op in enumerate(hostile):
                f.write((json.dumps({"op_id": op, "kind": "reduce", "run": "exp/run000", "before": 2, "after": 1,
                                     "verified": True, "outcome": "verified", "backup_kept": True,
                                     "time": 4e9 + i}) + "\n").encode())
        opened, real_open = [], open

        def watched(file, *a, **kw):
            opened.append(str(file))
            return real_open(file, *a, **kw)

        read = _counting(monkeypatch)
        monkeypatch.setattr("builtins.open", watched)
        page = api.history_page(many_ops, newest=len(hostile))
    finally:
        monkeypatch.undo()
        with open(path, "wb") as f:
            f.write(kept)
    assert [e["op_id"] for e in page["entries"]] == hostile
    assert all(e["backup"] == "unknown" for e in page["entries"]), page["entries"]
    assert read == [] and not [p for p in opened if "outside" in p], opened

