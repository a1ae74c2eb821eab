"""Issue #27 item 4: "disk in use now", "freed now" and "freed after purge" say the same wherever
they are shown — the plan (API, dry run, CLI text and JSON), ``status`` (API, CLI text and JSON)
and ``tb-footprint history`` — each from the one count the reduce's report and the tab use."""
import json
import re

from helpers_cli import run_cli as cli
from test_disk_usage import close, du, two_runs
from tb_footprint_plugin import api
from tb_footprint_plugin.fmt import human_bytes

PY = ("python",)


def reduced(tmp_path, runs=("a",)):
    """Two aged runs, ``runs`` of them reduced with the default (compressed) vault: a vault on
    the logdir's disk that frees bytes now and more after purge."""
    logdir = two_runs(tmp_path)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, runs=list(runs), quiet_period=0,
                            verify_backends=PY)
    assert rep.ok and any(o.status == "verified" for o in rep.outcomes), [o.to_dict() for o in rep.outcomes]
    return logdir


def test_the_plan_and_the_dry_run_say_the_disk_in_use_now_as_du_counts_it(tmp_path):
    logdir = reduced(tmp_path)  # a vault holds backups already: the figure is logdir + vault
    now = du(logdir)  # the vault is inside the logdir: du of it is logdir + vault, links once
    p = api.plan(str(logdir), "archive", quiet_period=0)
    assert p.disk_in_use_bytes is not None and close(p.disk_in_use_bytes, now), (p.disk_in_use_bytes, now)
    assert close(p.to_dict()["disk_in_use_bytes"], now)
    dry = api.reduce_logdir(str(logdir), policy="archive", dry_run=True, quiet_period=0)
    assert close(dry.plan.disk_in_use_bytes, now) and close(dry.to_dict()["plan"]["disk_in_use_bytes"], now)
    assert close(du(logdir), now)  # the figure is still true after the dry run: it changed nothing
    js = cli("plan", logdir, "--policy", "archive", "--quiet-period", "0", "--json")
    assert js.returncode == 0, js.stdout + js.stderr
    assert close(json.loads(js.stdout)["disk_in_use_bytes"], now)
    for args in (("plan", logdir, "--policy", "archive"), ("reduce", logdir, "--dry-run")):
        out = cli(*args, "--quiet-period", "0")
        assert out.returncode == 0, out.stdout + out.stderr
        said = re.search(r"^disk in use now \(logdir \+ vault\): (.+)$", out.stdout, re.M)
        assert said, out.stdout
        assert said.group(1).strip() == human_bytes(p.disk_in_use_bytes), (said.group(1), p.disk_in_use_bytes)


def test_status_says_freed_now_beside_freed_after_purge_as_the_tab_does(tmp_path):
    logdir = reduced(tmp_path)
    st, tab = api.status(str(logdir)), api.disk_numbers(str(logdir))
    assert st["freed_now_bytes"] > 0, st  # compressed backups: the disk gained now
    for k in ("disk_in_use_bytes", "freed_now_bytes", "freed_after_purge_bytes"):
        assert st[k] == tab[k], (k, st[k], tab[k])
    assert close(st["disk_in_use_bytes"], du(logdir))
    js = json.loads(cli("status", logdir, "--json").stdout)
    assert js["freed_now_bytes"] == tab["freed_now_bytes"], (js["freed_now_bytes"], tab)
    text = cli("status", logdir).stdout
    line = next(x for x in text.splitlines() if "disk in use now (logdir + vault):" in x)
    assert f"freed now {human_bytes(tab['freed_now_bytes'])} " in line, line
    assert f"{human_bytes(tab['freed_after_purge_bytes'])} more freed after `tb-footprint purge`" in line, line


def test_history_text_shows_each_reduces_freed_figures_and_the_disk_in_use_once(tmp_path):
    logdir = reduced(tmp_path, runs=("a", "b"))
    entries = api.history(str(logdir))
    red = [e for e in entries if e.get("kind") == "reduce" and e.get("outcome") == "verified"]
    assert len(red) == 2 and all(e.get("freed_now_bytes") is not None for e in red), entries
    tab = api.disk_numbers(str(logdir))
    out = cli("history", logdir)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    said = [x for x in lines if x.startswith("disk in use now (logdir + vault):")]
    assert len(said) == 1 and lines[0] == said[0], out.stdout  # once, as the header
    assert f"freed now {human_bytes(tab['freed_now_bytes'])} " in said[0], said[0]
    assert f"{human_bytes(tab['freed_after_purge_bytes'])} more freed after" in said[0], said[0]
    head = next(x for x in lines if x.startswith("TIME"))
    assert "FREED NOW" in head and "AFTER PURGE" in head, head
    now_col, purge_col = head.index("FREED NOW"), head.index("AFTER PURGE")
    for e in red:
        row = next(x for x in lines if e["op_id"] in x)
        # right-aligned under their headers: the cell ends where its header ends
        assert row[:now_col + len("FREED NOW")].rstrip().endswith(human_bytes(e["freed_now_bytes"])), (row, e)
        assert row[:purge_col + len("AFTER PURGE")].rstrip().endswith(
            human_bytes(e["freed_after_purge_bytes"])), (row, e)
