"""A file standing at a path of a retired run when its restore reaches it is one rule on every
store (#26): the file is left as it is, the original stays in the vault (its only copy), every
other file comes back, the retirement is marked restored with the path named ``not_restored``,
the outcome says so coded ``not_restored``, and a purge keeps that copy. A disk's restore failed
there and kept its journal, which every start then met again; a bucket said ``mtime_not_kept``.
The file is written by a hook at the restore's journal, before its put-back reaches the path;
a restore then stopped after its first file is finished by the next start the same way
(a disk's ``finish_unretire``). On a folder and the three bucket servers."""
from contract_stores import KINDS, buckets, logdir_on, scalar_runs_on  # noqa: F401 - fixtures

import errno

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Outcome
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")

STANDING = b"another file, written at the path before the restore reached it\n"
ORIGINAL = b"lr: 0.1\n" * 40


def _user(st) -> dict:
    return {e.key: st.read_all(e.key) for e in st.list(every_key=True) if not e.key.startswith(".tb-footprint")}


def _in_vault(st, data: bytes) -> bool:
    return any(st.read_all(e.key) == data for e in st.list(every_key=True)
               if e.key.startswith(".tb-footprint") and e.size == len(data))


def _fail() -> None:
    raise OSError(errno.EIO, "the test's failure")


@pytest.mark.parametrize("store", KINDS)
@pytest.mark.parametrize("stopped", [False, True], ids=["live", "recovered"])
def test_a_file_standing_at_a_path_is_left_and_its_original_kept(store, stopped, scalar_runs_on):
    url = scalar_runs_on(store, runs=("a", "b"), steps=2)
    st = open_store(url)
    st.put("b/notes.txt", ORIGINAL)
    before = _user(st)
    assert api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).ok
    assert "b/notes.txt" not in _user(st)
    faults.arm("unretire.journal", lambda: st.put("b/notes.txt", STANDING))
    if stopped:
        faults.arm("unretire.mid_move", _fail)
    [o] = api.restore(url, run="b")
    faults.disarm_all()
    if stopped:  # the journal kept: the next start finishes the restore, by the same rule
        assert o.status == Outcome.FAILED, o.to_dict()
        [r] = api.recover_logdir(url)
        assert r.action == "completed" and "b/notes.txt" in r.detail and "purge keeps them" in r.detail, r
    else:
        assert (o.status, o.code) == (Outcome.RESTORED, Finding.NOT_RESTORED), o.to_dict()
        assert "b/notes.txt" in o.reason and "purge keeps them" in o.reason, o.to_dict()
        assert "b/notes.txt" not in o.created_files, o.to_dict()
    now = _user(st)
    assert now["b/notes.txt"] == STANDING  # left as it is
    assert {k: v for k, v in now.items() if k != "b/notes.txt"} == \
        {k: v for k, v in before.items() if k != "b/notes.txt"}  # every other file back
    assert _in_vault(st, ORIGINAL)  # the original's only copy
    assert api.retired(url) == [] and api.recover_logdir(url) == []
    (m,) = [m for m in api.operations(url) if m["kind"] == "retire"]
    assert m["restored_by"] and not m["backup_purged"], m
    rep = api.purge(url, yes=True)
    assert [(k["op_id"], k["code"]) for k in rep.kept] == [(m["op_id"], Finding.NOT_RESTORED)], rep.to_dict()
    assert _in_vault(st, ORIGINAL) and _user(st) == now
