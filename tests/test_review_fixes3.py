"""Review W2's byte-loss findings, each turned into a test: an empty glob selects no run (A3);
a kept restore's release never deletes a blob a reduce committed meanwhile (A1); a confirmed
purge deletes only what its preview showed (A2)."""
import shutil
from pathlib import Path

import pytest

from conftest import copy_real, tree_hashes
from tb_footprint_plugin import api, cli
from tb_footprint_plugin.engine.vault import Vault


def _two_runs(tmp_path: Path) -> Path:
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    shutil.copytree(logdir / "train", logdir / "other")
    return logdir


def _purged(logdir: Path) -> dict:
    return {m["op_id"]: bool(m.get("backup_purged")) for m in Vault(str(logdir / ".tb-footprint")).manifests()}


# --- A3: `purge --glob ""` purged every run ---------------------------------------------------
@pytest.mark.parametrize("glob", ["", "  "])
def test_purge_with_an_empty_glob_is_a_usage_error_and_purges_nothing(tmp_path, glob):
    logdir = _two_runs(tmp_path)
    api.reduce_logdir(str(logdir), dry_run=False, quiet_period=0)
    before = _purged(logdir)
    assert len(before) == 2 and not any(before.values())
    assert cli.main(["purge", str(logdir), "--glob", glob, "--yes"]) == 2
    assert cli.main(["purge", str(logdir), "--run", glob, "--yes"]) == 2
    with pytest.raises(api.SelectionError):
        api.purge(str(logdir), run_glob=glob, yes=True)
    with pytest.raises(api.SelectionError):
        api.purge(str(logdir), runs=[glob], yes=True)
    assert _purged(logdir) == before


@pytest.mark.parametrize("verb", ["reduce", "restore", "retire", "verify", "plan", "purge"])
def test_an_empty_glob_or_run_name_is_a_usage_error_for_every_verb(tmp_path, verb):
    logdir = _two_runs(tmp_path)
    before = tree_hashes(logdir)
    yes = ["--yes"] if verb in ("reduce", "restore", "retire", "purge") else []  # others have none
    assert cli.main([verb, str(logdir), "--glob", ""] + yes) == 2
    assert cli.main([verb, str(logdir), "--run", " "] + yes) == 2
    assert tree_hashes(logdir) == before


@pytest.mark.parametrize("sel", [{"run_glob": ""}, {"run_glob": "  "}, {"runs": [" "]}])
def test_the_api_refuses_a_blank_glob_or_name_for_plan_and_reduce(tmp_path, sel):
    """A notebook's ``reduce_logdir(logdir, run_glob=os.environ.get("RUNS", ""))`` must not act
    on every run: the API's plan and reduce raise the selection error the CLI turns into exit 2."""
    logdir = _two_runs(tmp_path)
    before = tree_hashes(logdir)
    with pytest.raises(api.SelectionError):
        api.plan(str(logdir), **sel)
    with pytest.raises(api.SelectionError):
        api.reduce_logdir(str(logdir), dry_run=False, quiet_period=0, **sel)
    assert tree_hashes(logdir) == before


def test_the_shared_selection_rule_counts_a_blank_glob_or_name_as_matching_nothing():
    chosen, missing = api.selecting.select(["a", "b"], None, "")
    assert missing == [""]
    chosen, missing = api.selecting.select(["a", "b"], [" "], None)
    assert missing == [" "]


# --- A1: the start's release of a kept restore deleted a blob a reduce committed meanwhile -----
def test_release_of_a_kept_restore_keeps_a_blob_a_reduce_committed_meanwhile(tmp_path, monkeypatch):
    """Run train is reduced, then restored while a claim keeps its blobs; train2 holds the same
    profile bytes. While the next start's release looks at the blobs (after its first read of
    the claims) a reduce of train2 runs to the end. Its backup must survive the release."""
    from tb_footprint_plugin.engine import restore as restore_mod
    from tb_footprint_plugin.engine import upkeep as settle  # the start's release lives there

    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    shutil.copytree(logdir / "train", logdir / "train2")
    before2 = tree_hashes(logdir / "train2")
    rep = api.reduce_logdir(str(logdir), dry_run=False, runs=["train"], quiet_period=0)
    (op,) = [o.op_id for o in rep.outcomes if o.op_id]
    vault = Vault(str(logdir / ".tb-footprint"))
    shas = {f["sha256"] for f in vault.read_manifest(op)["files"]}
    real_jb = restore_mod.journal_blobs
    with monkeypatch.context() as m:
        m.setattr(restore_mod, "journal_blobs", lambda ctx, *a, **k: real_jb(ctx, *a, **k) | shas)
        (out,) = api.restore(str(logdir), "train")
    assert all(vault.has_blob(s) for s in shas), "the claim kept the blobs at the restore"

    state = {"armed": False, "reduced": None}
    real_release, real_has = settle.release_restored_backup, Vault.has_blob

    def release(*a, **k):
        state["armed"] = True
        return real_release(*a, **k)

    def has_blob(self, sha):
        if state["armed"]:
            state["armed"] = False  # the reduce runs once, inside the release's window
            state["reduced"] = api.reduce_logdir(str(logdir), dry_run=False, runs=["train2"], quiet_period=0)
        return real_has(self, sha)

    monkeypatch.setattr(settle, "release_restored_backup", release)
    monkeypatch.setattr(Vault, "has_blob", has_blob)
    api.recover_logdir(str(logdir))
    monkeypatch.undo()
    assert state["reduced"] is not None and any(o.op_id for o in state["reduced"].outcomes)
    (op2,) = [m["op_id"] for m in vault.manifests() if m.get("run") == "train2"]
    m2 = vault.read_manifest(op2)
    assert not m2.get("backup_purged")
    missing = [f["path"] for f in m2["files"] if not vault.has_blob(f["sha256"])]
    assert missing == [], f"train2's backup lost: {missing}"
    outs = api.restore(str(logdir), "train2")
    assert [o.code for o in outs if o.code] == [], outs
    assert tree_hashes(logdir / "train2") == before2


# --- A2: a confirmed purge ran again from scratch and deleted backups the preview never showed -
def _reduce(logdir: Path, run: str) -> str:
    rep = api.reduce_logdir(str(logdir), dry_run=False, runs=[run], quiet_period=0)
    (op,) = [o.op_id for o in rep.outcomes if o.op_id]
    return op


def _purge_answered_yes_after_reducing(logdir, run, monkeypatch):
    """``tb-footprint purge LOGDIR`` on a terminal, answered yes once a reduce of ``run`` committed
    while its question was on screen: (exit code, that reduce's op id)."""
    seen = {}

    def ask(question):
        seen["op"] = _reduce(logdir, run)
        return True

    monkeypatch.setattr(cli, "_ask", ask)
    monkeypatch.setattr(cli.sys.stdin, "isatty", lambda: True)
    rc = cli.main(["purge", str(logdir)])
    return rc, seen["op"]


def test_cli_purge_answered_yes_deletes_nothing_when_what_it_would_delete_changed(tmp_path, monkeypatch, capsys):
    """The preview lists train's backup; while the question is on screen a reduce of `other`
    (the same bytes) commits. The answer must not purge `other`'s backup, never shown."""
    logdir = _two_runs(tmp_path)
    op_train = _reduce(logdir, "train")
    rc, op_other = _purge_answered_yes_after_reducing(logdir, "other", monkeypatch)
    err = capsys.readouterr().err
    assert rc == 1 and "nothing deleted" in err and "changed since the preview" in err, err
    assert _purged(logdir) == {op_train: False, op_other: False}


def test_cli_purge_answered_yes_purges_only_the_operations_it_showed(tmp_path, monkeypatch):
    """Same, with a run of other bytes: the shown purge goes ahead, the new one is untouched."""
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    copy_real("jax/profiled", tmp_path / "jax")
    shutil.copytree(tmp_path / "jax", logdir / "other")  # a run of other bytes
    op_train = _reduce(logdir, "train")
    before_other = tree_hashes(logdir / "other")
    rc, op_other = _purge_answered_yes_after_reducing(logdir, "other", monkeypatch)
    assert rc == 0
    assert _purged(logdir) == {op_train: True, op_other: False}
    api.restore(str(logdir), "other")
    assert tree_hashes(logdir / "other") == before_other


def test_purge_op_ids_limits_the_engine_to_those_operations(tmp_path):
    logdir = _two_runs(tmp_path)
    ops = [_reduce(logdir, "train"), _reduce(logdir, "other")]
    rep = api.purge(str(logdir), yes=True, op_ids=[ops[0]])
    assert [o["op_id"] for o in rep.ops] == [ops[0]]
    assert _purged(logdir) == {ops[0]: True, ops[1]: False}
    assert api.purge(str(logdir), yes=True, op_ids=[]).ops == []
    assert _purged(logdir) == {ops[0]: True, ops[1]: False}


def test_tab_purge_deletes_only_the_operations_its_preview_listed(tmp_path):
    """The tab's confirmed purge carries the previewed op ids: a reduce of `mid` committed after
    the preview is not purged, and a preview that no longer holds is refused (409)."""
    from test_plugin_routes import App, _age, _write_run

    root = tmp_path / "logs"
    for name, seed in (("big", 1), ("mid", 2)):
        _write_run(str(root / name), seed=seed, sessions=1)
    _age(str(root))
    app = App(root)
    try:
        r = app.post("/reduce", {"runs": ["big"], "policy": "archive"})
        assert app.wait_job(r.get_json()["job"]["id"])["state"] == "done"
        pv = app.post("/purge", {"confirm": False}).get_json()["preview"]
        shown = [o["op_id"] for o in pv["ops"]]
        assert len(shown) == 1
        (mid,) = [o.op_id for o in api.reduce_logdir(str(root), dry_run=False, runs=["mid"], policy="archive",
                                                     quiet_period=0).outcomes if o.op_id]
        stale = app.post("/purge", {"confirm": True, "originals_lost": pv["originals_lost"], "op_ids": shown + ["x"]})
        assert stale.status_code == 409, stale.get_json()
        assert app.post("/purge", {"confirm": True, "op_ids": "nope"}).status_code == 400
        r = app.post("/purge", {"confirm": True, "originals_lost": pv["originals_lost"], "op_ids": shown})
        if r.status_code == 409:  # mid backed up bytes big's backup shares: fewer lost; the tab looks again
            lost = r.get_json()["originals_lost"]
            assert lost < pv["originals_lost"]
            r = app.post("/purge", {"confirm": True, "originals_lost": lost, "op_ids": shown})
        assert r.status_code == 202, r.get_json()
        job = app.wait_job(r.get_json()["job"]["id"])
        assert job["state"] == "done" and [o["op_id"] for o in job["result"]["ops"]] == shown
        assert _purged(root) == {shown[0]: True, mid: False}
    finally:
        app.close()


# --- W2 suspicion (b): a parked plan-time Rust load taken over on (inode, size, mtime) only ----
def test_a_parked_load_is_not_taken_over_after_a_same_size_rewrite_that_restores_the_mtime(tmp_path):
    """`cp -p` over an event file between the plan's load and the reduce: same inode, size and
    mtime, other bytes. The reduce must load the original itself, not crawl the plan's load."""
    import os

    from tb_footprint_plugin.verify.original import OriginalRun

    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    run_dir = logdir / "train"
    (ev,) = [p for p in run_dir.iterdir() if p.name.startswith("events.out.tfevents")]
    run = OriginalRun(str(run_dir))
    try:
        assert run.load_now(timeout_s=120) is not None
        assert run.loaded_as_now(), "unchanged files: the parked load may be taken over"
        st = os.stat(ev)
        data = bytearray(ev.read_bytes())
        data[-5] ^= 0xFF  # a record's payload/CRC: same size, other bytes
        with open(ev, "r+b") as f:  # in place: same inode
            f.write(data)
        os.utime(ev, ns=(st.st_atime_ns, st.st_mtime_ns))  # the mtime restored, as `cp -p` does
        st2 = os.stat(ev)
        assert (st2.st_ino, st2.st_size, st2.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)
        assert not run.loaded_as_now()
    finally:
        run.close()
