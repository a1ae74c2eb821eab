"""What a retirement is, one rule on every store (issue #26 item 2, ``engine.retire_rules``): the
names it refuses whatever the run holds, a nested run the plan did not name, and what
``api.retired`` lists (restorable retirements, newest first, the row's fields), the same on a
folder and on the three bucket servers."""
import itertools
import json
from contract_stores import KINDS, buckets, logdir_on  # noqa: F401 - fixtures
from pathlib import Path

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine.context import TransactionError
from tb_footprint_plugin.engine.front import open_engine
from tb_footprint_plugin.storage.stores import open_store

_n = itertools.count()


def _logdir(root: Path) -> Path:
    """``a`` (with a nested run ``a/inner``), ``b`` and ``c``: scalars and text."""
    for run in ("a", "a/inner", "b", "c"):
        with synth.EventWriter(str(root / run)) as w:
            for s in range(3):
                w.scalar("loss", s, 1.0 / (s + 1))
                w.text("notes", s, f"{run} step {s}")
    return root


@pytest.fixture
def logdir(tmp_path, logdir_on):
    def make(store):
        return logdir_on(store, _logdir(tmp_path / f"src{next(_n)}"))
    return make


def _retire(url: str, run: str, along=()):
    return open_engine(url, quiet_period=0).retire_run(run, takes_along=list(along), rule={"run_glob": run},
                                                       quiet_period=0)


@pytest.mark.parametrize("store", KINDS)
def test_a_run_taken_along_must_be_inside_the_run(store, logdir):
    """Taken along, ``c``'s name would be in ``b``'s manifest, and a restore of ``c`` would bring
    back ``b``: refused on every store, before anything moves (a disk took it)."""
    url = logdir(store)
    o = _retire(url, "b", ["c"])
    assert (o.status, o.code) == (Outcome.FAILED, Failure.REFUSED), o.to_dict()
    assert "'c' is not a run inside 'b'" in o.reason
    assert api.retired(url) == []
    o = _retire(url, "../b")
    assert (o.status, o.code) == (Outcome.FAILED, Failure.REFUSED), o.to_dict()


@pytest.mark.parametrize("store", KINDS)
def test_a_nested_run_the_plan_did_not_name_is_refused(store, logdir):
    url = logdir(store)
    o = _retire(url, "a")
    assert (o.status, o.code) == (Outcome.FAILED, Failure.REFUSED), o.to_dict()
    assert "nested run(s) the plan did not name: a/inner" in o.reason
    assert api.retired(url) == []


@pytest.mark.parametrize("store", KINDS)
def test_retired_lists_the_same_rows_on_every_store(store, logdir):
    """Newest first; ``retired_at`` is when the retirement finished (a bucket said when it
    started); ``files`` counts the run's files, nested run's too; a restored one is no longer
    listed."""
    url = logdir(store)
    assert _retire(url, "a", ["a/inner"]).status == Outcome.VERIFIED
    assert _retire(url, "b").status == Outcome.VERIFIED
    rows = api.retired(url)
    assert [(r["run"], r["takes_along"], r["files"]) for r in rows] == [("b", [], 1), ("a", ["a/inner"], 2)], rows
    finished = {m["op_id"]: m["finished_at"] for m in api.operations(url) if m.get("kind") == "retire"}
    assert {r["op_id"]: r["retired_at"] for r in rows} == finished
    assert all(set(r) == {"op_id", "run", "takes_along", "bytes", "files", "retired_at", "user", "tree_sha256",
                          "rule"} and r["bytes"] > 0 and r["rule"] == {"run_glob": r["run"]} for r in rows), rows

    (back,) = api.restore(url, run="a/inner")  # the parent that took it along comes back
    assert (back.status, back.run) == (Outcome.RESTORED, "a"), back.to_dict()
    assert [r["run"] for r in api.retired(url)] == ["b"]


@pytest.mark.parametrize("store", [k for k in KINDS if k != "posix"])  # a bucket's manifest objects
def test_a_retirement_whose_manifest_says_it_did_not_verify_is_not_listed(store, logdir):
    """Manifests are untrusted input: one of kind ``retire`` whose outcome is not ``verified``
    never took the run out of the logdir (a disk writes such a manifest for a failed retirement,
    and its ``retired`` has always left it out), so ``retired`` does not list it and a restore
    does not act on it (a bucket listed it, which its restore then did not act on)."""
    url = logdir(store)
    o = _retire(url, "b")
    assert o.status == Outcome.VERIFIED
    st = open_store(url)
    (key,) = [e.key for e in st.list(".tb-footprint/manifests") if e.key.endswith(f"/{o.op_id}.json")]
    doc = json.loads(st.read_all(key))
    doc["outcome"] = "failed"
    st.put(key, json.dumps(doc).encode())
    assert api.retired(url) == []
    with pytest.raises(TransactionError) as e:
        api.restore(url, run="b")
    assert e.value.code == Failure.NOT_FOUND


@pytest.mark.parametrize("store", KINDS)
def test_unretire_never_acts_on_a_retirement_that_says_it_did_not_verify(store, logdir):
    """The restore of a retirement refuses one whose manifest says it never verified, whatever
    the vault holds, with the same words on every store (a bucket's put the run back)."""
    url = logdir(store)
    o = _retire(url, "b")
    assert o.status == Outcome.VERIFIED
    (m,) = [dict(m, outcome="failed") for m in api.operations(url) if m.get("kind") == "retire"]
    eng = open_engine(url, quiet_period=0)
    if store == "posix":
        from tb_footprint_plugin.engine.retire import unretire
        back = unretire(eng.ctx, m)
    else:
        from tb_footprint_plugin.engine.bucket_retire import unretire
        back = unretire(eng.ostore, eng.vault, m)
    assert (back.status, back.code) == (Outcome.FAILED, Failure.RESTORE_BLOCKED), back.to_dict()
    assert back.reason == (f"retirement {o.op_id} holds nothing to put back (purged or never committed); "
                           "nothing to restore")
    assert [r["run"] for r in api.retired(url)] == ["b"]  # nothing was changed
