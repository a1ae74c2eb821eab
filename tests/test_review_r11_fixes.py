"""Review R11's findings on restore, purge and retire, each reproduced and fixed (the lead's part;
F3, F5 and F7 are in their own files).

- F1: a backup another transaction under way linked in (a second name of its run's live file,
  pinned by it) is never adopted as it stands by a reduction of the same bytes elsewhere: that
  transaction may never swap, and a write to its file in place would then change the committed
  backup of the other run. It is made a copy of its own first. A transaction's own link (two
  files of its run with the same bytes) is still adopted as it stands.
"""
from __future__ import annotations

import os
import stat

from tb_footprint_plugin.engine.context import Context, new_op_id
from tb_footprint_plugin.storage.files import sha256_file


def _twins(tmp_path, runs=("r1", "r2"), name="twin.xplane.pb"):
    logdir = tmp_path / "logs"
    data = os.urandom(5000)
    paths = []
    for run in runs:
        p = logdir / run / "plugins" / "profile" / "s" / name
        p.parent.mkdir(parents=True)
        p.write_bytes(data)
        paths.append(p)
    return logdir, paths, sha256_file(str(paths[0]))


def test_a_link_another_transaction_pinned_is_copied_before_it_is_adopted(tmp_path):
    logdir, (r1, r2), sha = _twins(tmp_path)
    vault = Context(str(logdir)).vault
    vault.ensure()
    a, b = new_op_id(), new_op_id()
    blob = vault.store(str(r2), sha, pin=a, sync=False)  # A links r2's live original in
    assert os.stat(blob).st_ino == os.stat(r2).st_ino
    assert vault.store(str(r1), sha, pin=b) == blob  # B, r1's same bytes: adopts the digest
    assert os.stat(blob).st_ino != os.stat(r2).st_ino  # ... as a copy of its own
    with open(r2, "r+b") as f:  # A never swaps; r2's file is written in place
        f.write(b"\x00" * 64)
    assert vault.check_blob(sha)  # B's backup still holds r1's bytes
    assert sha256_file(blob) == sha


def test_a_transactions_own_link_is_adopted_as_it_stands(tmp_path):
    logdir, (one, two), sha = _twins(tmp_path, runs=("r1/a", "r1/b"))
    vault = Context(str(logdir)).vault
    vault.ensure()
    op = new_op_id()
    blob = vault.store(str(one), sha, pin=op, sync=False)
    assert vault.store(str(two), sha, pin=op, sync=False) == blob
    assert os.stat(blob).st_ino == os.stat(one).st_ino  # no copy: both originals go at its swap


# --- F2 and F4: retire's state in the vault is untrusted input ----------------------------------
def _two_runs(tmp_path):
    from tb_footprint_plugin import synth

    logdir = tmp_path / "logdir"
    for run in ("runA", "runB"):
        with synth.EventWriter(str(logdir / run)) as w:
            for step in range(5):
                w.scalar("loss", step, 1.0 / (step + 1))
    old = 1_700_000_000
    for p in logdir.rglob("*"):
        os.utime(p, (old, old))
    return logdir


def _files(root):
    return {p.relative_to(root).as_posix(): sha256_file(str(p)) for p in sorted(root.rglob("*")) if p.is_file()
            and ".tb-footprint" not in p.parts}


def _begin(ctx, op, run, files=()):
    import time

    return {"type": "begin", "kind": "retire", "op_id": op, "run": run, "takes_along": [], "logdir": ctx.logdir,
            "vault": ctx.vault.root, "same_fs": True, "rule": None, "files": list(files), "dirs": [], "bytes": 0,
            "dir_times": [], "t": time.time()}


def _plant_journal(ctx, op, record):
    import json

    path = os.path.join(ctx.journal_dir, f"{op}.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps(record) + "\n")
    os.chmod(path, 0o600)


def test_a_planted_journal_never_undoes_a_recorded_retirement(tmp_path):
    from tb_footprint_plugin import api

    logdir = _two_runs(tmp_path)
    before = _files(logdir)
    rep = api.retire(str(logdir), api.retire_rule(runs=["runA"]), dry_run=False, quiet_period=0)
    [o] = rep.outcomes
    assert o.status == "verified", o.to_dict()
    ctx = Context(str(logdir))
    # a hostile (or truncated) journal of the committed retirement, naming no file
    _plant_journal(ctx, o.op_id, _begin(ctx, o.op_id, "runA"))
    [r] = api.recover_logdir(str(logdir))
    assert r.action == "completed", vars(r)
    assert [m["run"] for m in api.retired(str(logdir))] == ["runA"]  # still retired, still listed
    outs = api.restore(str(logdir), run="runA")
    assert [x.status for x in outs] == ["restored"], [x.to_dict() for x in outs]
    assert _files(logdir) == before  # every file of it back, byte for byte


def test_a_rollback_removes_only_what_its_journal_names(tmp_path):
    from tb_footprint_plugin import api

    logdir = _two_runs(tmp_path)
    api.retire(str(logdir), api.retire_rule(runs=["runB"]), dry_run=False, quiet_period=0)  # the vault exists
    ctx = Context(str(logdir))
    op = new_op_id()
    # an uncommitted retirement's folder holding an entry its (planted) journal does not name
    files = os.path.join(ctx.vault.root, "retired", op, "files")
    os.makedirs(files)
    with open(os.path.join(files, "0"), "wb") as f:
        f.write(b"bytes that exist nowhere else")
    _plant_journal(ctx, op, _begin(ctx, op, "runA"))
    [r] = api.recover_logdir(str(logdir))
    assert r.action == "rolled_back", vars(r)
    with open(os.path.join(files, "0"), "rb") as f:
        assert f.read() == b"bytes that exist nowhere else"


def test_a_planted_retired_link_is_never_followed(tmp_path):
    from tb_footprint_plugin import api

    logdir = _two_runs(tmp_path)
    before = _files(logdir)
    api.retire(str(logdir), api.retire_rule(runs=["runB"]), dry_run=False, quiet_period=0)
    ctx = Context(str(logdir))
    outside = tmp_path / "outside"
    retired = os.path.join(ctx.vault.root, "retired")
    os.rename(retired, outside)  # runB's retirement now lies outside the vault ...
    os.symlink(outside, retired)  # ... behind a planted link
    kept = sorted(p.relative_to(outside).as_posix() for p in outside.rglob("*"))
    [o] = api.retire(str(logdir), api.retire_rule(runs=["runA"]), dry_run=False, quiet_period=0).outcomes
    assert o.status == "verified", o.to_dict()
    assert not os.path.islink(retired) and os.path.isdir(retired)  # set aside; a folder of ours instead
    assert sorted(p.relative_to(outside).as_posix() for p in outside.rglob("*")) == kept  # nothing moved there
    assert os.path.isdir(os.path.join(retired, o.op_id, "files"))  # runA's files are in the vault itself
    outs = api.restore(str(logdir), run="runA")
    assert [x.status for x in outs] == ["restored"], [x.to_dict() for x in outs]
    assert {k: v for k, v in _files(logdir).items() if k.startswith("runA/")} == \
        {k: v for k, v in before.items() if k.startswith("runA/")}
    set_aside = [n for n in os.listdir(ctx.vault.root) if n.startswith("retired") and n != "retired"]
    assert set_aside, sorted(os.listdir(ctx.vault.root))  # the planted link, renamed aside where health names it
    api.purge(str(logdir), yes=True, older_than=0)
    assert sorted(p.relative_to(outside).as_posix() for p in outside.rglob("*")) == kept  # nothing deleted there


# --- F6: folders a restore or an unretire makes are named durably in their parents --------------
def test_folders_a_restore_remakes_are_fsynced_in_their_parents(tmp_path, monkeypatch):
    from tb_footprint_plugin.engine import retire, swap

    ctx = Context(str(tmp_path / "logdir"))
    os.makedirs(ctx.logdir)
    synced = []
    real = retire.fsync_dir  # the folder fsync by path (the reduce's swap fsyncs through the walk's descriptor)

    def spy(path):
        synced.append(os.path.relpath(path, ctx.logdir))
        real(path)

    real_fsync, root = os.fsync, os.path.realpath(ctx.logdir)

    def fsync(fd):  # swap.make_dirs makes each folder in its parent's descriptor, fsynced there
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            synced.append(os.path.relpath(os.readlink(f"/proc/self/fd/{fd}"), root))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(retire, "fsync_dir", spy)
    swap.make_dirs(ctx, [{"path": "run/plugins/profile/s"}])  # three folders above it made too
    assert synced == [".", "run", "run/plugins", "run/plugins/profile"]
    synced.clear()
    retire.make_dirs(ctx, [{"path": "other"}, {"path": "other/a"}])  # the same rule (swap.make_dirs)
    assert synced == [".", "other"]
