"""``status`` judges an unfinished operation's journal by recovery's own rule (review R16 F6):
a journal recover will not replay is said up front as a finding naming the journal file, with the
code recover refuses it with, and ``recover`` is not offered for it.

Before: a journal whose lines do not parse was printed as "unfinished None operation <id> on run
None", and a planted journal whose paths lead out (``../victim/…``) as "its run is changed …;
settling puts the originals back" + "run `tb-footprint recover`", which then refused it."""
import json
import os

import pytest

from conftest import copy_real
from helpers_crash import Killed, kill
from tb_footprint_plugin import api, cli
from tb_footprint_plugin.codes import Finding, Recovery
from tb_footprint_plugin.engine import faults

pytestmark = pytest.mark.usefixtures("disarm_faults")
RUN = "tf/summary_mix"


def _killed_reduce(tmp_path, point="reduce.swap"):
    """A logdir whose reduce of RUN was killed at ``point``; its journal's path."""
    logdir = str(copy_real("tf", tmp_path / "L" / "tf").parent)
    faults.arm(point, kill)
    with pytest.raises(Killed):
        api.reduce_logdir(logdir, policy="archive", dry_run=False, quiet_period=0, runs=[RUN])
    faults.disarm_all()
    (journal,) = [os.path.join(d, n) for d, _, ns in os.walk(os.path.join(logdir, ".tb-footprint"))
                  for n in ns if n.endswith(".jsonl") and os.path.basename(d) == "journal"]
    return logdir, journal


def _status_text(logdir, capsys):
    capsys.readouterr()
    assert cli.main(["status", logdir]) == 0
    return capsys.readouterr().out


def _said_alike(logdir, journal, code, capsys):
    """status and recover say the same: refused with ``code``, naming the journal; no recover advice."""
    st = api.status(logdir)
    op_id = os.path.basename(journal)[:-len(".jsonl")]
    assert not [o for o in st["unfinished"] if o["op_id"] == op_id], st["unfinished"]
    (p,) = [p for p in st["problems"] if p.get("op_id") == op_id]
    assert p["code"] == code and p["path"] == journal, p
    assert st["settle_command"] is None
    text = _status_text(logdir, capsys)
    assert f"[{code}]" in text and journal in text, text
    assert "None" not in text, text
    if code != Finding.DAMAGED_FILE:  # named only as what will not replay it
        assert "tb-footprint recover" in text, text
    assert "run `tb-footprint recover" not in text, text
    before = open(journal, "rb").read()
    outs = [o for o in api.recover_logdir(logdir) if o.op_id == op_id]
    assert [(o.action, o.code) for o in outs] == [(Recovery.REFUSED, code)], [vars(o) for o in outs]
    assert open(journal, "rb").read() == before


def test_a_journal_that_does_not_parse_is_named_with_its_code(tmp_path, capsys):
    logdir, journal = _killed_reduce(tmp_path)
    with open(journal, "wb") as f:
        f.write(b"garbage\n{not json\n")
    _said_alike(logdir, journal, Finding.DAMAGED_FILE, capsys)
    # recover's own sentence (recovery_rules.damaged_line), the same in status
    assert "line 1 is damaged" in _status_text(logdir, capsys)


def test_a_planted_journal_leading_out_is_refused_up_front(tmp_path, capsys):
    logdir, journal = _killed_reduce(tmp_path)
    records = [json.loads(line) for line in open(journal)]
    for r in records:
        if r["type"] == "backup":
            r["path"] = "../victim/" + os.path.basename(r["path"])
    with open(journal, "w") as f:
        f.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    _said_alike(logdir, journal, Finding.PATH_OUTSIDE, capsys)


def test_a_journal_recover_replays_is_still_an_unfinished_operation(tmp_path):
    logdir, journal = _killed_reduce(tmp_path)
    st = api.status(logdir)
    op_id = os.path.basename(journal)[:-len(".jsonl")]
    assert [o["op_id"] for o in st["unfinished"]] == [op_id] and "refused" not in st["unfinished"][0]
    assert not [p for p in st["problems"] if p.get("op_id") == op_id]
    assert st["settle_command"]


def _snap(logdir):
    out = {}
    for d, _, ns in os.walk(logdir):
        if ".tb-footprint" in d:
            continue
        for n in ns:
            p = os.path.join(d, n)
            out[p] = (open(p, "rb").read(), os.lstat(p).st_mtime_ns)
    return out


@pytest.mark.parametrize("point, action", [("reduce.verify", Recovery.ROLLED_BACK),
                                           ("reduce.swap", Recovery.COMPLETED)])
def test_status_says_what_recover_will_do(tmp_path, point, action):
    """A reduce killed before its swap: status said 'untouched ... settling only removes the
    attempt's staging files' while recover said 'originals put back byte for byte'. status now
    carries recover's own forecast (``recover_will``), and it is what recover does."""
    logdir = str(copy_real("tf", tmp_path / "L" / "tf").parent)
    before = _snap(logdir)
    faults.arm(point, kill)
    with pytest.raises(Killed):
        api.reduce_logdir(logdir, policy="archive", dry_run=False, quiet_period=0, runs=[RUN])
    faults.disarm_all()
    (op,) = api.status(logdir)["unfinished"]
    will = op["recover_will"]
    assert will["action"] == action, will
    # the journal's own outcome (the vault's upkeep may add its own about the same operation)
    (out,) = [o for o in api.recover_logdir(logdir) if o.op_id == op["op_id"] and o.kind == "reduce"]
    assert out.action == action, vars(out)
    if action == Recovery.ROLLED_BACK:  # 'never changed' is true: every file as it was
        assert "never changed" in will["detail"] and "put back" not in will["detail"]
        assert _snap(logdir) == before


@pytest.mark.parametrize("plant", ["garbage", "outside"])
def test_the_plan_names_a_refused_journal_and_does_not_send_to_recover(tmp_path, plant):
    """The plan's skip of a run an unfinished operation holds said "run `tb-footprint recover` to
    settle it" for a journal recover then refused: now the journal is named with its code, and
    the run (named by the journal) stays left alone."""
    logdir, journal = _killed_reduce(tmp_path, "reduce.verify")  # the run untouched: planned again
    if plant == "garbage":
        with open(journal, "wb") as f:
            f.write(b"garbage\n")
        code = Finding.DAMAGED_FILE
    else:
        records = [json.loads(line) for line in open(journal)]
        for r in records:
            if r["type"] == "backup":
                r["path"] = "../victim/" + os.path.basename(r["path"])
        with open(journal, "w") as f:
            f.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
        code = Finding.PATH_OUTSIDE
    p = api.plan(logdir, policy="archive", runs=[RUN], quiet_period=0)
    assert not [n for n in p.notes if "to settle" in n], p.notes
    assert [n for n in p.notes if n.startswith(f"[{code}] {journal}")], p.notes
    if plant == "outside":
        (rp,) = [r for r in p.runs if r.run == RUN]
        assert rp.skipped.startswith(journal) and "to settle" not in rp.skipped, rp.skipped
