"""#26, a manifest gone for good: ``tb-footprint purge LOGDIR --forget-missing OP_ID`` (``api.forget_missing``).

Runs x and w hold identical bytes (one backup of each content); w's manifest goes missing (its piece of the
operation log, both copies, as tests/test_missing_manifest_keeps_shared_blobs.py does). While the change log names
w's verified reduce with no manifest, every purge keeps every blob (status: ``manifest_missing``), forever if the
manifest never comes back. The verb says what ending w's line means (the operation, its kind and run; w cannot be
restored whatever is chosen; the next purge may forget blobs no manifest names; put the manifest back instead),
then, with ``--yes``, appends the one line that ends it: status no longer says ``manifest_missing`` and a purge of x
frees its blobs. It is refused for an operation whose manifest is there, one no line names, one already ended."""
import os

import pytest

from tb_footprint_plugin import api, cli
from tb_footprint_plugin.codes import Failure, Finding
from tb_footprint_plugin.engine.context import TransactionError
from tb_footprint_plugin.engine.purge_run import KEPT_BY

from test_missing_manifest_keeps_shared_blobs import STATE, _missing, _reduce, _runs, reduce_losing_manifest


def _twins_w_missing(tmp_path):
    """Logdir with x and w reduced, w's manifest gone: (logdir, x's op, w's op)."""
    logdir = _runs(tmp_path)
    op_x = _reduce(logdir, "x")
    op_w = reduce_losing_manifest(logdir, "w")
    assert [f["detail"] for f in _missing(logdir)] and op_w in _missing(logdir)[0]["detail"]
    return logdir, op_x, op_w


def _history_bytes(logdir) -> bytes:
    return (logdir / STATE / "history.jsonl").read_bytes()


def _cli(capsys, *argv) -> tuple:
    capsys.readouterr()
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_the_preview_says_what_ending_a_missing_manifests_line_means_and_changes_nothing(tmp_path, capsys):
    logdir, _op_x, op_w = _twins_w_missing(tmp_path)
    before = _history_bytes(logdir)
    rc, out, err = _cli(capsys, "purge", str(logdir), "--forget-missing", op_w, "--dry-run")
    assert rc == 0, (out, err)
    assert f"operation {op_w} (reduce) of run w" in out, out
    assert "its manifest is missing" in out and Finding.MANIFEST_MISSING in out, out
    assert "run w cannot be restored by this tool whatever is chosen" in out, out
    assert "ending its line lets the next purge forget blobs no manifest names" in out, out
    assert "put the manifest back instead if you can" in out, out
    assert f"nothing changed: add --yes to end the line of {op_w}" in out, out
    # without a terminal and without --yes: the one consent rule, nothing written
    rc, out, err = _cli(capsys, "purge", str(logdir), "--forget-missing", op_w)
    assert rc == 2 and "no terminal to ask on" in err, (out, err)
    doc = api.forget_missing(str(logdir), op_w)
    assert doc["dry_run"] and not doc["ended"] and doc["run"] == "w" and doc["kind"] == "reduce", doc
    assert _history_bytes(logdir) == before
    assert _missing(logdir)  # still said
    rep = api.purge(str(logdir), run="x", yes=False).to_dict()
    assert rep["ops"][0][KEPT_BY] == Finding.MANIFEST_MISSING, rep


def test_yes_ends_the_line_status_is_silent_and_a_purge_of_x_frees(tmp_path, capsys):
    logdir, _op_x, op_w = _twins_w_missing(tmp_path)
    blobs_before = sum(len(fs) for _d, _s, fs in os.walk(logdir / STATE))
    rc, out, err = _cli(capsys, "purge", str(logdir), "--forget-missing", op_w, "--yes")
    assert rc == 0, (out, err)
    assert f"its line is ended: one purge line of {op_w} appended to" in out, out
    assert "nothing was deleted" in out, out
    assert sum(len(fs) for _d, _s, fs in os.walk(logdir / STATE)) >= blobs_before  # the verb deletes nothing
    assert not _missing(logdir)  # before: manifest_missing for good
    (line,) = [e for e in api.history(str(logdir)) if e.get("kind") == "purge"]
    assert line["op_id"] == op_w and line["run"] == "w" and line["freed"] == 0, line
    assert "--forget-missing" in line["reason"], line
    rep = api.purge(str(logdir), run="x", yes=True).to_dict()
    (row,) = rep["ops"]
    assert row["run"] == "x" and row["bytes"] > 0 and KEPT_BY not in row, rep  # before: 0 B, every blob kept
    assert rep["freed_bytes"] == row["bytes"] and not rep["every_blob_kept"], rep
    # ended once: a second time is refused (its line no longer says its backup is kept)
    with pytest.raises(TransactionError) as e:
        api.forget_missing(str(logdir), op_w, yes=True)
    assert e.value.code == Failure.REFUSED, e.value


def test_refused_unless_the_manifest_is_missing(tmp_path, capsys):
    logdir, op_x, op_w = _twins_w_missing(tmp_path)
    before = _history_bytes(logdir)
    for yes in (False, True):  # x's manifest is there: its line is never ended this way
        with pytest.raises(TransactionError) as e:
            api.forget_missing(str(logdir), op_x, yes=yes)
        assert e.value.code == Failure.REFUSED and "its manifest is there" in str(e.value), e.value
    rc, out, err = _cli(capsys, "purge", str(logdir), "--forget-missing", op_x, "--yes")
    assert rc == 1 and f"error [{Failure.REFUSED}]" in err and "its manifest is there" in err, (out, err)
    # no line names it at all: not found (a usage error, as a mistyped --op)
    rc, out, err = _cli(capsys, "purge", str(logdir), "--forget-missing", "20200101T000000-abcdef", "--yes")
    assert rc == 2 and f"error [{Failure.NOT_FOUND}]" in err, (out, err)
    # it purges nothing: a run selector with it is a usage error
    rc, out, err = _cli(capsys, "purge", str(logdir), "--forget-missing", op_w, "--run", "x", "--yes")
    assert rc == 2 and "--forget-missing" in err, (out, err)
    assert _history_bytes(logdir) == before
    assert [f["detail"] for f in _missing(logdir)]
