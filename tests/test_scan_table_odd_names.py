"""Review R16 F7: the scan table printed run names raw: a newline or a tab split a row, a byte not
UTF-8 showed as U+FFFD, a 255-byte name pushed every row 255 columns wide. Each name is now one
escaped cell of at most 60 characters (``--json`` keeps it whole)."""
import json
import os

from conftest import copy_real
from helpers_cli import run_cli as tbf


def test_odd_names_stay_one_row_each(tmp_path):
    logdir = tmp_path / "L"
    src = copy_real("tf/keras_profiled", tmp_path / "src") / "train"
    names = [b"new\nline", b"bad\xffutf8", b"tab\there", b"L" * 200]
    for n in names:
        os.makedirs(os.fsencode(str(logdir)) + b"/" + n)
        ev = next(p for p in src.iterdir() if p.name.startswith("events.out.tfevents"))
        with open(ev, "rb") as a, open(os.fsencode(str(logdir)) + b"/" + n + b"/" + os.fsencode(ev.name), "wb") as b:
            b.write(a.read())
    p = tbf("scan", logdir)
    assert p.returncode == 0, p.stderr
    rows = p.stdout.splitlines()
    assert any("new\\nline" in ln for ln in rows) and any("bad\\xffutf8" in ln for ln in rows), p.stdout
    assert any("tab\\there" in ln for ln in rows), p.stdout
    assert max(len(ln) for ln in p.stdout.splitlines()) < 140, p.stdout
    j = json.loads(tbf("scan", logdir, "--json").stdout)
    assert any(r.get("name", r.get("run")) == "L" * 200 for r in j["runs"]), j["runs"][:1]
