"""What the vault keeps for a retirement restored with an original left in it (``not_restored``:
another file stood at the path) is counted on its Operations row, on every store, as purge counts
it (purge keeps it whole: ``purge_rules.kept_by_restore``). Before, the row had no such number
and the tab said "0 B kept · restored" though the vault held that original (a disk: its
``files/<n>``; a bucket: that copy, the others released by the restore)."""
from contract_stores import KINDS, buckets, logdir_on, scalar_runs_on  # noqa: F401 - fixtures

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Outcome
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")

STANDING = b"another file, written at the path before the restore reached it\n"
ORIGINAL = b"lr: 0.1\n" * 40


def _row(url: str) -> dict:
    (row,) = [o for o in api.summarize_operations(api.operations(url)) if o["kind"] == "retire"]
    return row


@pytest.mark.parametrize("store", KINDS)
def test_the_row_counts_what_the_vault_keeps_as_purge_does(store, scalar_runs_on):
    url = scalar_runs_on(store, runs=("a", "b"), steps=2)
    st = open_store(url)
    st.put("b/notes.txt", ORIGINAL)
    assert api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).ok
    whole = _row(url)["backup_bytes"]
    assert _row(url)["kept_bytes"] == whole and whole > len(ORIGINAL)
    faults.arm("unretire.journal", lambda: st.put("b/notes.txt", STANDING))
    [o] = api.restore(url, run="b")
    faults.disarm_all()
    assert (o.status, o.code) == (Outcome.RESTORED, Finding.NOT_RESTORED), o.to_dict()
    row = _row(url)
    # every other file went back: the vault keeps the original left alone (a disk's files/<n>; a
    # bucket released the other copies, #26)
    assert row["kept_bytes"] == len(ORIGINAL), row
    assert row["left_in_vault"] == 1 and row["restored_by"], row
    [kept] = api.purge(url).kept  # the preview: kept whole, counted the same
    assert (kept["op_id"], kept["code"], kept["bytes"]) == (row["op_id"], Finding.NOT_RESTORED, row["kept_bytes"])
    # the vault's own count of the same bytes (status: blobs, retired runs)
    assert api.status(url)["vault_bytes"] >= row["kept_bytes"]


def test_a_restore_that_put_everything_back_keeps_nothing_on_a_disk(scalar_runs_on):
    url = scalar_runs_on("posix", runs=("a", "b"), steps=2)
    assert api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).ok
    [o] = api.restore(url, run="b")
    assert o.status == Outcome.RESTORED, o.to_dict()
    row = _row(url)
    assert (row["kept_bytes"], row["left_in_vault"]) == (0, 0), row
    assert api.purge(url).kept == []


def test_an_untrusted_manifest_counts_only_its_own_entries(scalar_runs_on):
    url = scalar_runs_on("posix", runs=("a", "b"), steps=2)
    assert api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).ok
    (m,) = [m for m in api.operations(url) if m["kind"] == "retire"]
    size = m["tree"][0]["size"]
    done = dict(m, restored_by="20261205T000000-abcdef", not_restored=[m["tree"][0]["path"], m["tree"][0]["path"], 7,
                                                                     "../x", "b/never-there"])
    (row,) = api.summarize_operations([done])
    assert (row["kept_bytes"], row["left_in_vault"]) == (size, 1), row
    bad_sizes = dict(done, tree=[dict(f, size=s) for f, s in zip(m["tree"], (True, -5, "9"))])
    assert api.summarize_operations([bad_sizes])[0]["kept_bytes"] == 0
    assert api.summarize_operations([dict(done, backup_purged=True)])[0]["kept_bytes"] == 0
