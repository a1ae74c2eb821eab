"""Fail-safe reduction on real writer output: plan, reduce, verify, restore, purge, ledger."""
import gzip
import hashlib
import json
import os
import threading

import pytest

from conftest import copy_real, tree_hashes, user_files
from tb_footprint_plugin import api
from tb_footprint_plugin.scan import categories as cat
from tb_footprint_plugin.cli import main as cli_main
from tb_footprint_plugin.scan.scanner import scan

BACKENDS = ("python", "rust")


@pytest.mark.parametrize("name", ["tf/keras_profiled", "tf/summary_mix", "jax/profiled",
                                  "viewed/jax_profiled", "torch/profiled", "torch/profiled_gz"])
def test_archive_cuts_profiled_runs_verifies_and_restores(tmp_path, name):
    logdir = copy_real(name, tmp_path / "logdir")
    before = user_files(logdir)
    fp = scan(str(logdir))
    profiled = {r.name: (r.total_bytes, sum(c.bytes for c in r.categories.values()
                                            if c.name in cat.PROFILE_CATEGORIES))
                for r in fp.runs if r.sessions}
    report = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=BACKENDS)
    assert report.ok, [o.to_dict() for o in report.outcomes]
    after = scan(str(logdir))
    for run, (size, profile_bytes) in profiled.items():
        o = next(o for o in report.outcomes if o.run == run)
        assert o.status == "verified" and o.verification["ok"]
        if any("tfevents" in f for f in o.removed_files + o.created_files):
            assert "rust" in o.verification["backends"] and "python" in o.verification["backends"]
        else:  # only profile data changed: its event files proven the same bytes (docs/FAILSAFE.md)
            assert o.verification["mode"] == "unchanged" and o.verification["backends"] == []
            lines = [c["detail"] for c in o.verification["checks"] if c["name"] in ("event files", "run present")]
            if o.verification["unchanged"]:
                assert "unchanged (sha256)" in lines[0], o.verification["checks"]
            else:  # a run of profile data only: no event file before or after
                assert lines == ["run present: profile data only, no event file before or after (the plan says "
                                 "what stays of it)"], lines
        now = after.run(run).total_bytes if after.run(run) else 0
        # archive removes every profile byte; content rules may shrink event files further
        assert now <= size - profile_bytes, (run, now, size, profile_bytes)
        assert o.saved_bytes >= profile_bytes
        assert not (after.run(run) and after.run(run).sessions)
    # no profile directory is left for xprof to list as an empty run
    assert not [p for p in user_files(logdir) if "plugins/profile" in p]
    # event files keep their names (their content may be rewritten by the content rules)
    assert {k for k in user_files(logdir) if "tfevents" in k} == {k for k in before if "tfevents" in k}
    outs = api.restore(str(logdir))
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    assert user_files(logdir) == before


def test_plan_writes_nothing(tmp_path):
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    before = tree_hashes(logdir)
    for policy in ("lossless", "keep-latest", "archive"):
        p = api.plan(str(logdir), policy)
        assert p.removable_bytes > 0
        rep = api.reduce_logdir(str(logdir), policy=policy)  # dry_run is the default
        assert rep.dry_run and rep.removable_bytes == p.removable_bytes
        assert rep.expected_after_bytes == p.total_bytes - p.removable_bytes
    assert tree_hashes(logdir) == before  # not even a scan cache or a state dir


def test_plan_fidelity_lines(tmp_path):
    logdir = copy_real("tf/summary_mix", tmp_path / "logdir")
    rp = api.plan(str(logdir), "archive").run(".")
    text = "\n".join(rp.fidelity)
    assert "scalars: unchanged (12080 records in 8 tags" in text
    assert "profile: 1 session(s) removed" in text
    assert "images: 20 of 500 records kept (the default dashboard's view)" in text  # the loss first
    kinds = {a.kind for a in rp.actions}
    assert kinds == {"delete", "remove_dir", "rewrite"}


def test_lossless_keeps_every_profile_tool(tmp_path):
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    fp = scan(str(logdir))
    xplanes = {f.path for r in fp.runs for f in r.files if f.path.endswith(".xplane.pb")}
    rep = api.reduce_logdir(str(logdir), policy="lossless", dry_run=False, verify_backends=("python",))
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    after = scan(str(logdir))
    cats = after.run(".").categories
    assert cat.PROFILE_CACHE not in cats and cat.PROFILE_SECONDARY not in cats
    assert {f.path for r in after.runs for f in r.files if f.path.endswith(".xplane.pb")} == xplanes
    assert len(after.run(".").sessions) == 2
    _profile_plugin_serves_every_session(logdir)


def _profile_plugin_serves_every_session(logdir):
    """The real xprof plugin lists each session's tools and returns data for one of them."""
    xprof = pytest.importorskip("xprof.profile_plugin")
    import argparse

    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client
    from werkzeug.wrappers import Response

    ctx = base_plugin.TBContext(logdir=str(logdir), flags=argparse.Namespace(
        logdir=str(logdir), master_tpu_unsecure_channel="", hide_capture_profile_button=False),
        multiplexer=None, data_provider=None)
    try:
        plugin = xprof.ProfilePlugin(ctx)
    except Exception as e:  # pragma: no cover - depends on the optional C++ converter
        pytest.skip(f"xprof plugin cannot start here: {e}")
    apps = plugin.get_plugin_apps()
    def call(route, query=""):
        return Client(apps[route], Response).get(route + query)

    def body(resp):
        data = resp.get_data()
        return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data

    runs = json.loads(body(call("/runs")))
    assert len(runs) == 2, runs
    for run in runs:
        tools = json.loads(body(call("/run_tools", f"?run={run}")))
        assert tools, run
        r = call("/data", f"?run={run}&tag=overview_page&host=vm")
        assert r.status_code == 200 and len(body(r)) > 100, (run, r.status_code, body(r)[:200])


def test_keep_latest_removes_old_sessions_as_directories(tmp_path):
    logdir = copy_real("jax/profiled", tmp_path / "logdir")
    rep = api.reduce_logdir(str(logdir), policy="keep-latest", dry_run=False, verify_backends=("python",))
    assert rep.ok
    sessions = os.listdir(logdir / "plugins" / "profile")
    assert sessions == ["2026_11_30_00_21_36"]
    kept = os.listdir(logdir / "plugins" / "profile" / sessions[0])
    assert kept == ["vm.xplane.pb"]  # lossless part: secondary traces gone, xplane kept
    api.restore(str(logdir), ".")
    assert sorted(os.listdir(logdir / "plugins" / "profile")) == ["2026_11_30_00_21_35", "2026_11_30_00_21_36"]


def test_lossless_gzips_torch_traces_content_identical(tmp_path):
    logdir = copy_real("torch/profiled", tmp_path / "logdir")
    originals = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in logdir.glob("*.pt.trace.json")}
    trace_bytes = sum(p.stat().st_size for p in logdir.glob("*.pt.trace.json"))
    rep = api.reduce_logdir(str(logdir), policy="lossless", dry_run=False, verify_backends=("python",))
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    assert not list(logdir.glob("*.pt.trace.json"))
    assert not [n for n in os.listdir(logdir) if n.startswith(".footprint-")]  # no temp names left
    for name, sha in originals.items():
        with gzip.open(logdir / (name + ".gz"), "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == sha
    o = next(o for o in rep.outcomes if o.run == ".")
    assert o.saved_bytes > 0.8 * trace_bytes
    details = " ".join(c["detail"] for c in o.verification["checks"])
    assert "decompressed content identical" in details


def test_ledger_history_status_and_purge(tmp_path, capsys):
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    assert cli_main(["reduce", str(logdir), "--verify", "python", "--json", "--yes"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["saved_bytes"] > 0
    with open(rep["ledger"]) as f:
        ledger = json.load(f)
    assert ledger["runs"]["train"]["state"] == "done"
    assert ledger["runs"]["train"]["verified"] is True
    assert ledger["runs"]["validation"]["state"] == "skipped"
    # a rerun resumes: nothing left to do, nothing failed
    assert cli_main(["reduce", str(logdir), "--verify", "python", "--json", "--yes"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert [o["status"] for o in again["outcomes"]] == ["skipped", "skipped"]
    assert cli_main(["history", str(logdir), "--csv"]) == 0
    csv_out = capsys.readouterr().out
    assert csv_out.splitlines()[0].startswith("time,op_id,kind,run")
    assert ",reduce,train," in csv_out
    st = api.status(str(logdir))
    assert st["unfinished_operations"] == [] and st["vault_bytes"] > 0
    listed = api.purge(str(logdir))
    assert listed.dry_run and listed.freed_bytes > 0
    assert api.status(str(logdir))["vault_bytes"] == st["vault_bytes"]  # listing deletes nothing
    done = api.purge(str(logdir), yes=True)
    assert done.freed_bytes == listed.freed_bytes
    assert api.status(str(logdir))["vault_bytes"] == 0
    with pytest.raises(Exception, match="nothing to restore"):
        api.restore(str(logdir), "train")


def test_active_run_is_left_alone(tmp_path):
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir", age_s=0)
    (logdir / "train" / "events.out.tfevents.1795998030.vm.25428.0.v2").touch()
    before = user_files(logdir)
    rep = api.reduce_logdir(str(logdir), dry_run=False)
    o = next(o for o in rep.outcomes if o.run == "train")
    assert o.status == "skipped" and "active" in o.reason
    assert user_files(logdir) == before


def test_two_reducers_at_once(tmp_path):
    from tb_footprint_plugin.engine.journal import RunLock
    from tb_footprint_plugin.storage.paths import state_dir

    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    before = user_files(logdir)
    with RunLock(os.path.join(state_dir(str(logdir)), "locks"), "train"):
        rep = api.reduce_logdir(str(logdir), dry_run=False, verify_backends=("python",))
    o = next(o for o in rep.outcomes if o.run == "train")
    assert o.status == "skipped" and "another process" in o.reason
    assert user_files(logdir) == before
    # and truly concurrent: two threads, one run: exactly one reduces it
    results = []
    threads = [threading.Thread(target=lambda: results.append(api.reduce_logdir(
        str(logdir), dry_run=False, runs=["train"], verify_backends=("python",)))) for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    statuses = sorted(r.outcomes[0].status for r in results)
    assert statuses in (["skipped", "verified"], ["failed", "verified"]), [r.outcomes[0].to_dict() for r in results]


def test_symlinked_run_out_of_logdir_is_refused(tmp_path):
    outside = copy_real("tf/keras_profiled", tmp_path / "outside")
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    os.symlink(outside / "train", logdir / "train")
    before = tree_hashes(outside)
    rep = api.reduce_logdir(str(logdir), dry_run=False)
    assert rep.outcomes == [] or all(o.status != "verified" for o in rep.outcomes)
    assert tree_hashes(outside) == before


def test_backup_dir_elsewhere_copies_and_restores(tmp_path):
    logdir = copy_real("jax/profiled", tmp_path / "logdir")
    vault = tmp_path / "vault"
    before = user_files(logdir)
    rep = api.reduce_logdir(str(logdir), backup_dir=str(vault), dry_run=False, verify_backends=("python",))
    assert rep.ok
    from tb_footprint_plugin.engine.vault import Vault
    assert Vault(str(vault)).manifests()  # the manifests are in the vault given, not the logdir's
    assert not (logdir / "plugins").exists()
    # restore finds the vault from the logdir's own record of it, without --backup-dir
    outs = api.restore(str(logdir))
    assert [o.status for o in outs] == ["restored"]
    assert user_files(logdir) == before


def test_custom_rules_from_flags_and_file(tmp_path, capsys):
    logdir = copy_real("viewed/jax_profiled", tmp_path / "logdir")
    assert cli_main(["plan", str(logdir), "--policy", "lossless", "--keep", "profile_secondary", "--json"]) == 0
    actions = json.loads(capsys.readouterr().out)["runs"][0]["actions"]
    assert {a["category"] for a in actions if a["kind"] == "delete"} == {cat.PROFILE_CACHE}
    assert cli_main(["plan", str(logdir), "--delete", "hparams"]) == 2  # a usage error (issue 13)
    assert "can never be selected" in capsys.readouterr().err
    pol = tmp_path / "policy.toml"
    pol.write_text('name = "caches-only"\nbase = "lossless"\n[rules]\nprofile_secondary = "keep"\n')
    rep = api.reduce_logdir(str(logdir), policy=str(pol), dry_run=False, verify_backends=("python",))
    assert rep.ok
    assert rep.plan.policy["name"] == "caches-only"
    assert cat.PROFILE_SECONDARY in scan(str(logdir)).run(".").categories
    assert cat.PROFILE_CACHE not in scan(str(logdir)).run(".").categories


def test_read_only_files_come_back_read_only(tmp_path):
    logdir = copy_real("jax/profiled", tmp_path / "logdir")
    for p in (logdir / "plugins" / "profile").rglob("*"):
        if p.is_file():
            os.chmod(p, 0o444)
    before = {p: p.stat().st_mode for p in (logdir / "plugins").rglob("*")}
    hashes = user_files(logdir)
    assert api.reduce_logdir(str(logdir), dry_run=False, verify_backends=("python",)).ok
    assert not (logdir / "plugins").exists()
    assert [o.status for o in api.restore(str(logdir))] == ["restored"]
    assert user_files(logdir) == hashes
    assert {p: p.stat().st_mode for p in (logdir / "plugins").rglob("*")} == before


def test_corrupt_event_file_is_kept_as_is(tmp_path):
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    ev = next((logdir / "train").glob("events.out.tfevents.*"))
    data = bytearray(ev.read_bytes())
    data[5000] ^= 0xFF
    ev.write_bytes(bytes(data))
    old = ev.stat().st_mtime - 7200
    os.utime(ev, (old, old))
    fp = scan(str(logdir))
    assert any("corrupt" in w or "CRC" in w for w in fp.run("train").warnings)
    rep = api.reduce_logdir(str(logdir), dry_run=False, runs=["train"])
    o = rep.outcomes[0]
    assert o.status == "verified", o.to_dict()
    assert ev.read_bytes() == bytes(data)  # never rewritten, still there
    assert not (logdir / "train" / "plugins").exists()


def test_empty_session_folder_is_listed_and_removed_by_archive(tmp_path):
    logdir = copy_real("jax/profiled", tmp_path / "logdir")
    (logdir / "plugins" / "profile" / "2026_11_30_09_00_00").mkdir()  # xprof lists it as a session
    fp = scan(str(logdir))
    assert "2026_11_30_09_00_00" in [s.name for s in fp.run(".").sessions]
    lossless = api.plan(str(logdir), "lossless").run(".")
    assert not [a for a in lossless.actions if a.kind == "remove_dir"]  # lossless changes no listing
    assert api.reduce_logdir(str(logdir), dry_run=False, verify_backends=("python",)).ok
    assert not (logdir / "plugins").exists()
    api.restore(str(logdir))
    assert (logdir / "plugins" / "profile" / "2026_11_30_09_00_00").is_dir()
