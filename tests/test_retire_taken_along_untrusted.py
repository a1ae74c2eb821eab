"""A retirement's ``takes_along`` is read as far as it can be true: only names inside its run
(review R3 M-1). Since 5f5c87c a retirement refuses a nested run outside the run, but a manifest
written before (or copied, or planted) may still list one; read as taken along, a restore of that
other run brought the retired one back, and the Retired list showed it gone."""
import os

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine import retire as retire_module
from tb_footprint_plugin.engine.front import open_engine


def _retire_b_taking_c_as_older_code_did(logdir: str, monkeypatch) -> None:
    for run in ("b", "c"):
        with synth.EventWriter(os.path.join(logdir, run)) as w:
            w.scalar("loss", 1, 1.0)
    with monkeypatch.context() as m:  # the check 5f5c87c added, absent as it was before
        m.setattr(retire_module, "refused_names", lambda run, along: None)
        o = open_engine(logdir, quiet_period=0).retire_run("b", takes_along=["c"], rule={"run_glob": "b"},
                                                           quiet_period=0)
    assert str(o.status) == "verified", o.reason
    assert not os.path.exists(os.path.join(logdir, "b")) and os.path.isdir(os.path.join(logdir, "c"))


def test_a_run_outside_the_retired_one_is_not_read_as_taken_along(tmp_path, monkeypatch):
    logdir = str(tmp_path / "logs")
    os.makedirs(logdir)
    _retire_b_taking_c_as_older_code_did(logdir, monkeypatch)

    assert [(r["run"], r["takes_along"]) for r in api.retired(logdir)] == [("b", [])]
    summary = [o for o in api.summarize_operations(api.operations(logdir)) if o.get("kind") == "retire"]
    assert [o["takes_along"] for o in summary] == [[]]

    # a restore of c acts on c alone (nothing to restore: c never left), and b stays retired
    with pytest.raises(api.TransactionError) as e:
        api.restore(logdir, run="c")
    assert e.value.code == api.Failure.NOT_FOUND
    assert not os.path.exists(os.path.join(logdir, "b"))

    # b itself comes back whole, c untouched
    outs = api.restore(logdir, run="b")
    assert [(o.run, str(o.status)) for o in outs] == [("b", "restored")], [(o.run, o.status, o.reason) for o in outs]
    assert os.path.isdir(os.path.join(logdir, "b")) and os.path.isdir(os.path.join(logdir, "c"))
    assert api.retired(logdir) == []
