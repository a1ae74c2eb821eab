"""An original a restore left in the vault because another file stood at its path
(``not_restored``) is listed where kept bytes are listed — ``status``'s ``kept_blobs`` (the tab's
Operations page, ``tb-footprint status``) — with the command that brings it back, on every store
(review R6 F5). Before, once the retirement was marked restored nothing listed it: ``retired``
was empty and ``kept_blobs`` named only bytes found in a file's place (``displaced``). The CLI's
``restore`` then exits 1: the original asked for is not back. An untrusted manifest's
``not_restored`` naming no string, or no file of the retirement, lists nothing."""
from contract_stores import KINDS, buckets, logdir_on, scalar_runs_on  # noqa: F401 - fixtures

import os
import shlex
import subprocess

import pytest

from tb_footprint_plugin import api, cli
from tb_footprint_plugin.codes import Finding, Outcome
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.restore import kept_blobs
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")

STANDING = b"another file, written at the path before the restore reached it\n"
ORIGINAL = b"lr: 0.1\n" * 40


def _retired_then_restored_with_one_left(url: str):
    st = open_store(url)
    st.put("b/notes.txt", ORIGINAL)
    assert api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).ok
    faults.arm("unretire.journal", lambda: st.put("b/notes.txt", STANDING))
    return st


@pytest.mark.parametrize("store", KINDS)
def test_status_lists_the_original_left_and_how_to_bring_it_back(store, scalar_runs_on):
    url = scalar_runs_on(store, runs=("a", "b"), steps=2)
    st = _retired_then_restored_with_one_left(url)
    [o] = api.restore(url, run="b")
    faults.disarm_all()
    assert (o.status, o.code) == (Outcome.RESTORED, Finding.NOT_RESTORED), o.to_dict()
    (m,) = [m for m in api.operations(url) if m["kind"] == "retire"]
    rows = [k for k in api.status(url)["kept_blobs"] if k["code"] == Finding.NOT_RESTORED]
    assert [(k["path"], k["run"], k["of_op"], k["present"]) for k in rows] == \
        [("b/notes.txt", "b", m["op_id"], True)], rows
    [row] = rows
    assert row["size"] == len(ORIGINAL) and "b/notes.txt's original" in row["holds"], row
    assert row["bring_back"] and api.kept_blobs(url) == api.status(url)["kept_blobs"]
    if store == "posix":  # the command works: the original's bytes beside the file standing there
        subprocess.run(shlex.split(row["bring_back"]), check=True)
        kept = os.path.join(url, "b", "notes.txt.kept")
        with open(kept, "rb") as f:
            assert f.read() == ORIGINAL
        assert os.stat(kept).st_mtime_ns == os.stat(row["blob"]).st_mtime_ns
        assert st.read_all("b/notes.txt") == STANDING
    else:
        assert row["blob"].startswith(url.split("://")[0] + "://") and "/.tb-footprint/" in row["blob"], row
        assert row["bring_back"].endswith(" " + url.rstrip("/") + "/b/notes.txt.kept"), row


def test_status_prints_it_and_restore_exits_1(scalar_runs_on, capsys):
    url = scalar_runs_on("posix", runs=("a", "b"), steps=2)
    _retired_then_restored_with_one_left(url)
    rc = cli.main(["restore", url, "b", "--yes"])
    faults.disarm_all()
    out = capsys.readouterr().out
    assert rc == 1 and "b/notes.txt" in out, out
    assert cli.main(["status", url]) == 0
    out = capsys.readouterr().out
    assert "kept in the vault [not_restored]" in out and "b/notes.txt's original" in out, out
    assert "bring it back: cp --preserve=timestamps " in out and "notes.txt.kept" in out, out


def test_an_untrusted_not_restored_lists_nothing_it_cannot_name(scalar_runs_on):
    url = scalar_runs_on("posix", runs=("a", "b"), steps=2)
    _retired_then_restored_with_one_left(url)
    api.restore(url, run="b")
    faults.disarm_all()
    (m,) = [m for m in api.operations(url) if m["kind"] == "retire"]
    ctx = Context(url)
    assert [k["path"] for k in kept_blobs(ctx, [m])] == ["b/notes.txt"]
    for held in ([["b/notes.txt"], 7, "../../etc/passwd", "b/never-there.txt"], "b/notes.txt", None):
        assert kept_blobs(ctx, [dict(m, not_restored=held)]) == [], held
    # a tree path leading out of the logdir is never a place to copy to
    tree = [dict(f, path="../outside.txt") if f["path"] == "b/notes.txt" else f for f in m["tree"]]
    assert kept_blobs(ctx, [dict(m, tree=tree, not_restored=["../outside.txt"])]) == []
    assert kept_blobs(ctx, [dict(m, restored_by=None)]) == []


@pytest.mark.parametrize("store", KINDS)
def test_two_event_files_left_in_one_folder_are_brought_back_to_names_of_their_own(store, scalar_runs_on):
    """Review R6: a bucket's bring-back named every kept event file of an operation
    ``kept-<op>.tfrecord`` in its folder, so the second command overwrote the first's copy."""
    url = scalar_runs_on(store, runs=("a", "b"), steps=2)
    st = open_store(url)
    names = ("b/events.out.tfevents.1.host.1", "b/events.out.tfevents.2.host.2")
    for i, name in enumerate(names):
        st.put(name, ORIGINAL + bytes([i]))
    assert api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).ok

    def stand():
        for name in names:
            st.put(name, STANDING)

    faults.arm("unretire.journal", stand)
    [o] = api.restore(url, run="b")
    faults.disarm_all()
    assert (o.status, o.code) == (Outcome.RESTORED, Finding.NOT_RESTORED), o.to_dict()
    rows = [k for k in api.status(url)["kept_blobs"] if k["code"] == Finding.NOT_RESTORED]
    assert sorted(k["path"] for k in rows) == sorted(names), rows
    dests = [shlex.split(k["bring_back"])[-1] for k in rows]
    assert len(set(dests)) == 2 and not [d for d in dests if "tfevents" in os.path.basename(d)], dests
