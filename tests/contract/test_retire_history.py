"""A retirement's history line and its restore's, one builder on every store (issue #26,
``retire_rules.retire_line`` / ``unretire_line``): a disk appends them to its change log, a bucket
builds its entries from the manifests with them. The same fields and words on a folder and on the
three bucket servers: the retirement's reason names the nested runs it took along, the restore is
named by its own op id (the one its outcome gives) with ``of_op`` the retirement restored; a
retirement rolled back on recovery has its ``rolled_back`` line on every store, once."""
from contract_stores import KINDS, buckets, logdir_on, scalar_runs_on  # noqa: F401 - fixtures
from pathlib import Path

import pytest

from helpers_crash import Killed, kill
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome, Recovery
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.front import open_engine
from tb_footprint_plugin.engine.retire_rules import RECOVERED_REASON
from tb_footprint_plugin.version import __version__

pytestmark = pytest.mark.usefixtures("disarm_faults")


#: the fields of a retirement's line on every store (a bucket's entries add ``shard``)
LINE = {"time", "op_id", "kind", "run", "policy", "before", "after", "verified", "outcome", "reason", "backup_kept",
        "user", "host", "tool_version", "code"}


@pytest.fixture
def logdir(scalar_runs_on):
    return scalar_runs_on  # runs a, a/inner, b


def _fields(e: dict) -> set:
    return set(e) - {"shard"}


@pytest.mark.parametrize("store", KINDS)
def test_a_retirement_and_its_restore_have_the_same_lines_on_every_store(store, logdir):
    url = logdir(store)
    o = open_engine(url, quiet_period=0).retire_run("a", takes_along=["a/inner"], rule={"run_glob": "a"},
                                                    quiet_period=0)
    assert o.status == Outcome.VERIFIED, o.to_dict()
    (line,) = [e for e in api.history(url) if e["kind"] == "retire"]
    assert _fields(line) == LINE, line
    assert (line["op_id"], line["run"], line["outcome"], line["verified"], line["backup_kept"]) == \
        (o.op_id, "a", "verified", True, True), line
    assert line["reason"] == "retired with 1 nested run(s)", line
    assert (line["before"], line["after"], line["policy"]) == (o.bytes_before, 0, None), line
    assert line["tool_version"] == __version__, line

    (back,) = api.restore(url, run="a")
    assert back.status == Outcome.RESTORED, back.to_dict()
    # the restore is an operation of its own, named as its line names it
    assert back.op_id and back.op_id != o.op_id, back.to_dict()
    (again,) = [e for e in api.history(url) if e["kind"] == "restore"]
    assert _fields(again) == LINE | {"of_op"}, again
    assert (again["op_id"], again["of_op"], again["run"]) == (back.op_id, o.op_id, "a"), again
    assert again["reason"] == f"restored retirement {o.op_id}", again
    assert (again["before"], again["after"], again["verified"], again["outcome"]) == \
        (0, o.bytes_before, True, "restored"), again
    # every store lets the vault's copies go at a whole restore (#26: a bucket kept them until a purge)
    assert again["backup_kept"] is False, again


@pytest.mark.parametrize("store", KINDS)
def test_a_retirement_taking_nothing_along_gives_no_reason(store, logdir):
    url = logdir(store)
    o = open_engine(url, quiet_period=0).retire_run("b", takes_along=[], rule={"run_glob": "b"}, quiet_period=0)
    assert o.status == Outcome.VERIFIED, o.to_dict()
    (line,) = [e for e in api.history(url) if e["kind"] == "retire"]
    assert (line["op_id"], line["reason"]) == (o.op_id, None), line


@pytest.mark.parametrize("store", KINDS)
def test_a_retirement_rolled_back_on_recovery_has_one_line_on_every_store(store, logdir):
    """Killed with every file in the vault, nothing deleted: the next start puts the run back and
    its line says so (a bucket's recovery wrote none), once."""
    url = logdir(store)
    faults.arm("retire.move", kill)
    with pytest.raises(Killed):
        open_engine(url, quiet_period=0).retire_run("b", takes_along=[], rule={"run_glob": "b"}, quiet_period=0)
    faults.disarm_all()
    outs = api.recover_logdir(url)
    assert [o.action for o in outs] == [Recovery.ROLLED_BACK], [vars(o) for o in outs]
    (line,) = [e for e in api.history(url) if e["kind"] == "retire"]
    assert _fields(line) == LINE, line
    assert (line["op_id"], line["run"], line["outcome"], line["verified"], line["backup_kept"]) == \
        (outs[0].op_id, "b", "rolled_back", False, False), line
    assert line["reason"] == RECOVERED_REASON and line["before"] == line["after"] > 0, line
    assert api.recover_logdir(url) == [] and len([e for e in api.history(url) if e["kind"] == "retire"]) == 1
