"""An original a restore left in the vault of a bucket logdir whose backups are blobs in a local
``--backup-dir`` folder (``not_restored``: another object stood at the key) is listed where kept
bytes are listed, with a command that brings it back out of that folder: ``tb-footprint vault
bring-back`` (the folder is content-addressed, compressed or packed: no file a plain copy could
take), which writes it beside the key, create-only and checked, as the row says. Before, such a
row was left out ("no command copies out of that folder"): the original was named nowhere once
the run was back."""
from contract_stores import buckets, logdir_on, scalar_runs_on  # noqa: F401 - fixtures

import shlex

import pytest

from tb_footprint_plugin import api, cli
from tb_footprint_plugin.codes import Finding, Outcome, StoreError
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")

STANDING = b"another file, written at the path before the restore reached it\n"
ORIGINAL = b"lr: 0.1\n" * 40


@pytest.mark.parametrize("store", ("s3", "gs", "az"))
def test_the_row_brings_the_original_back_out_of_the_folder(store, scalar_runs_on, tmp_path, capsys):
    url = scalar_runs_on(store, runs=("a", "b"), steps=2)
    folder = str(tmp_path / "blob vault")  # a space: the command quotes it
    st = open_store(url)
    st.put("b/notes.txt", ORIGINAL)
    assert api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0, backup_dir=folder).ok
    faults.arm("unretire.journal", lambda: st.put("b/notes.txt", STANDING))
    [o] = api.restore(url, run="b", backup_dir=folder)
    faults.disarm_all()
    assert (o.status, o.code) == (Outcome.RESTORED, Finding.NOT_RESTORED), o.to_dict()
    (m,) = [m for m in api.operations(url, backup_dir=folder) if m["kind"] == "retire"]
    rows = [k for k in api.status(url, backup_dir=folder)["kept_blobs"] if k["code"] == Finding.NOT_RESTORED]
    assert [(k["path"], k["of_op"], k["size"], k["present"]) for k in rows] == \
        [("b/notes.txt", m["op_id"], len(ORIGINAL), True)], rows
    [row] = rows
    assert row["sha256"] and "b/notes.txt's original" in row["holds"], row
    assert api.kept_blobs(url, backup_dir=folder) == rows
    argv = shlex.split(row["bring_back"])
    assert argv[:3] == ["tb-footprint", "vault", "bring-back"], row
    assert cli.main(argv[1:]) == 0, capsys.readouterr()
    assert "b/notes.txt.kept" in capsys.readouterr().out
    assert st.read_all("b/notes.txt.kept") == ORIGINAL and st.read_all("b/notes.txt") == STANDING
    # again: the copy made is never overwritten (create-only), and the vault still keeps the original
    assert cli.main(argv[1:]) == 1
    assert f"[{StoreError.ALREADY_EXISTS}]" in capsys.readouterr().err
    assert st.read_all("b/notes.txt.kept") == ORIGINAL
    [kept] = api.purge(url, backup_dir=folder).kept
    assert (kept["op_id"], kept["code"]) == (m["op_id"], Finding.NOT_RESTORED)


def test_bring_back_refuses_a_path_no_restore_left(scalar_runs_on, tmp_path, capsys):
    url = scalar_runs_on("s3", runs=("a", "b"), steps=2)
    folder = str(tmp_path / "blobs")
    st = open_store(url)
    st.put("b/notes.txt", ORIGINAL)
    assert api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0, backup_dir=folder).ok
    (m,) = [m for m in api.operations(url, backup_dir=folder) if m["kind"] == "retire"]
    # retired, not restored: nothing was left by a restore, nothing is written beside the run
    rc = cli.main(["vault", "bring-back", url, "--backup-dir", folder, "--op", m["op_id"], "--path", "b/notes.txt"])
    assert rc == 2 and "not_found" in capsys.readouterr().err
    assert st.stat("b/notes.txt.kept") is None
    rc = cli.main(["vault", "bring-back", url, "--backup-dir", folder, "--op", "20260101T000000-abcdef",
                   "--path", "b/notes.txt"])
    assert rc == 2 and "no operation" in capsys.readouterr().err
