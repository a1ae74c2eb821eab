"""The ``wait`` failpoint action: a step held open until a gate file exists, so a test can act in
another process at that instant (the tab's Cancel against a real TensorBoard)."""
from __future__ import annotations

import threading
import time

import pytest

from tb_footprint_plugin.engine import faults


def test_wait_holds_the_step_until_the_gate_file_exists(tmp_path, monkeypatch):
    gate = tmp_path / "gate"
    monkeypatch.setenv("TB_FOOTPRINT_FAILPOINTS", "restore.journal=wait")
    monkeypatch.setenv("TB_FOOTPRINT_FAILPOINT_GATE", str(gate))
    done = threading.Event()

    def step():
        faults.hit("restore.journal")
        done.set()

    t = threading.Thread(target=step)
    t.start()
    assert not done.wait(0.5), "the step went on before its gate opened"
    gate.write_text("")
    assert done.wait(5), "the step did not go on once its gate opened"
    t.join()
    # an open gate lets every later hit through at once
    t0 = time.monotonic()
    faults.hit("restore.journal")
    assert time.monotonic() - t0 < faults.GATE_WAIT / 4  # not held again (a closed gate holds GATE_WAIT)


def test_wait_without_a_gate_is_refused(monkeypatch):
    monkeypatch.setenv("TB_FOOTPRINT_FAILPOINTS", "restore.journal=wait")
    monkeypatch.delenv("TB_FOOTPRINT_FAILPOINT_GATE", raising=False)
    with pytest.raises(faults.UnknownFailpoint, match="TB_FOOTPRINT_FAILPOINT_GATE"):
        faults.hit("restore.journal")


def test_wait_without_a_gate_is_refused_as_the_variable_is_read(monkeypatch):
    """Checked when the variable is parsed (``check_env``, the CLI's start), not first when the
    step is reached in the middle of the transaction it would hold (review R19 N3)."""
    monkeypatch.setenv("TB_FOOTPRINT_FAILPOINTS", "reduce.swap=wait")
    monkeypatch.delenv("TB_FOOTPRINT_FAILPOINT_GATE", raising=False)
    with pytest.raises(faults.UnknownFailpoint, match="TB_FOOTPRINT_FAILPOINT_GATE"):
        faults.check_env()
