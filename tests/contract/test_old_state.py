"""State written by an earlier version still reads (issue #26.4).

``tests/fixtures/old_state/`` holds a logdir and its vault exactly as the commit named in its
``made_with.json`` wrote them (``make.py`` regenerates them, run with *that* code): reductions under
``archive`` with the batch ledger and history, one operation restored over records a writer
appended after it (a kept backup and a ``.salvaged-NNN`` file), one run retired, one operation
purged (by a purge killed after its intent and finished by the next start), one reduction killed
mid transaction (its journal and lock left behind), one reduction into a second vault
(``vaults.json``); and the same on a moto S3 bucket (dumped object by object). The code under test
must settle the killed operation, list everything, give back every original byte for byte (with
mode and mtime where a disk keeps them) and purge a restored operation.

A copy cannot keep a folder's absolute path or inode, and the state names both (``identity.json``
binds the state to the logdir's inode; manifests, journals and the ledger name the logdir's path):
the copy is made as if the fixture had been written where it now is — the recorded path is put in
place of the old one in the state's JSON, the identity takes the copy's inode. Nothing else is
touched; every other byte is the old version's.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome, Recovery

#: the state of each landed version kept as a fixture, each read by today's code: ``old_state``
#: (made by ``old_state/make.py``), the one before it (``old_state_fdcba4e``, the first this test
#: read) and ``old_state_282b743`` (the last before one manifest schema; small, with a bucket
#: retirement and a bucket logdir whose backups are a local folder of blobs)
FIXTURES = [Path(__file__).resolve().parents[1] / "fixtures" / name
            for name in ("old_state", "old_state_fdcba4e", "old_state_282b743")]
#: the fixtures holding a bucket logdir with a local folder of blobs (``bucket_blobs/``)
BLOB_FIXTURES = [p for p in FIXTURES if (p / "bucket_blobs").is_dir()]


@pytest.fixture(params=FIXTURES, ids=lambda p: p.name)
def old(request) -> Path:
    """One fixture folder (the run's state as that commit wrote it)."""
    return request.param
STATE = ".tb-footprint"
SETTLED = (Recovery.COMPLETED, Recovery.ROLLED_BACK)


def _load(base: Path, *parts) -> dict:
    with open(base.joinpath(*parts), encoding="utf-8") as f:
        return json.load(f)


def _sha(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _is_state_json(rel: str) -> bool:
    """A state file of JSON (not a backup's bytes, which are the user's data)."""
    parts = rel.split(os.sep)
    return rel.endswith((".json", ".jsonl")) and "blobs" not in parts and "files" not in parts and "kept" not in parts


def _rebind_sealed_piece(path: str, old_root: str, new_root: str) -> None:
    """A sealed oplog piece (one zstd frame of JSON lines, from 282b743 on) with the recorded
    path put in place of the old one, as the plain JSON state gets it."""
    import zstandard

    with open(path, "rb") as f:
        text = zstandard.ZstdDecompressor().decompressobj().decompress(f.read())
    with open(path, "wb") as f:
        f.write(zstandard.ZstdCompressor(level=9).compress(text.replace(old_root.encode(), new_root.encode())))


def _local_copy(base: Path, tmp_path: Path) -> tuple:
    """The local shape copied to tmp_path/local, as if written there; returns (logdir, meta)."""
    meta = _load(base, "local", "meta.json")
    root = tmp_path / "local"
    shutil.copytree(base / "local", root, symlinks=True)
    old_root, new_root = os.path.dirname(meta["logdir"]), str(root)
    for top in (root / "logs" / STATE, root / "vault2"):
        for dirpath, _, names in os.walk(top):
            for n in names:
                p = os.path.join(dirpath, n)
                if _is_state_json(os.path.relpath(p, root)):
                    with open(p, encoding="utf-8") as f:
                        text = f.read()
                    with open(p, "w", encoding="utf-8") as f:
                        f.write(text.replace(old_root, new_root))
                elif n.endswith(".zst") and os.path.basename(dirpath) in ("segments", "twins"):
                    _rebind_sealed_piece(p, old_root, new_root)
    for rel, m in meta["paths"].items():
        if m["dir"]:  # an empty folder (git keeps none)
            os.makedirs(root / rel, exist_ok=True)
    ident_path = root / "logs" / STATE / "identity.json"
    ident = json.loads(ident_path.read_text())
    st = os.stat(root / "logs")
    ident.update(ino=st.st_ino, dev=st.st_dev)
    ident_path.write_text(json.dumps(ident))
    # modes and mtimes as the old version left them (git keeps neither); deepest first, so a
    # folder's mtime is set after its files
    for rel in sorted(meta["paths"], key=lambda r: -r.count("/")):
        m = meta["paths"][rel]
        p = root / rel
        os.chmod(p, m["mode"])
        os.utime(p, ns=(m["mtime_ns"], m["mtime_ns"]))
    return str(root / "logs"), meta


def _logdir_files(logdir) -> dict:
    out = {}
    for dirpath, dirs, names in os.walk(logdir):
        dirs[:] = [d for d in dirs if not d.startswith(STATE)]
        for n in names:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            out[os.path.relpath(p, logdir)] = {"sha256": _sha(p), "mode": st.st_mode & 0o7777,
                                               "mtime_ns": st.st_mtime_ns}
    return out


def test_fixture_is_small_and_names_its_commit(old):
    """The fixture stays small (≤ 2 MB) and says which commit wrote it."""
    # the fixture's own files: a __pycache__ of its make.py (a run that imported it) is no part of it
    total = sum(p.stat().st_size for p in old.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert total <= 2_000_000, total
    if old.name == "old_state_282b743":  # synthetic runs only: the repository keeps every version
        assert total <= 320_000, total
    made = _load(old, "made_with.json")
    assert len(made["commit"]) == 40 and int(made["commit"], 16) >= 0


def test_old_local_state_recovers_lists_restores_and_purges(old, tmp_path):
    """On a disk: the killed reduction is settled, status and history list every operation (a
    purged one as purged), the retired run, the second vault and the ledger; restore of everything
    gives back every original file byte-identical with its mode and mtime (the restored-over-late-
    records run as the old restore left it, the purged run reduced); a restored operation is purged, the others' backups stay."""
    logdir, meta = _local_copy(old, tmp_path)
    expected = _load(old, "local", "expected.json")
    journals = os.listdir(os.path.join(logdir, STATE, "journal"))
    assert len(journals) == 1
    killed = journals[0].split(".")[0]

    settled = api.recover_logdir(logdir)
    assert [(s.op_id, s.action) for s in settled if s.action in SETTLED] == [(killed, s.action) for s in settled]
    assert settled and all(s.action in SETTLED for s in settled), [vars(s) for s in settled]
    assert os.listdir(os.path.join(logdir, STATE, "journal")) == []
    assert api.recover_logdir(logdir) == []

    st = api.status(logdir)
    assert st["problems"] == [], st["problems"]
    assert st["unfinished_operations"] == []
    listed = {o["op_id"]: o for o in st["operations"]}
    assert set(meta["ops"].values()) <= set(listed), (meta["ops"], sorted(listed))
    vault2 = os.path.join(os.path.dirname(logdir), "vault2")
    assert os.path.realpath(vault2) in [os.path.realpath(v) for v in st["vaults"]]
    assert any(o.get("run") == "exp/elsewhere" for o in listed.values()), listed
    assert st["ledger"] and st["batch"], (st["ledger"], st["batch"])
    assert [r["run"] for r in api.retired(logdir)] == ["keras/validation"]

    hist = api.history(logdir)
    kinds = [(e["kind"], e.get("run")) for e in hist]
    for run in ("torch/resnet", "jax/prof", "exp/late", "exp/elsewhere"):
        assert ("reduce", run) in kinds, kinds
    assert ("restore", "exp/late") in kinds and ("retire", "keras/validation") in kinds, kinds
    # the purge killed after its intent was finished by the old version's next start
    assert ("purge", "jax/prof") in kinds, kinds
    assert listed[meta["ops"]["jax/prof"]]["backup_purged"], listed[meta["ops"]["jax/prof"]]

    outs = api.restore(logdir)
    assert outs and all(o.status == Outcome.RESTORED for o in outs), [(o.run, o.status, o.reason) for o in outs]
    restored_runs = {o.run for o in outs}
    assert {"torch/resnet", "exp/elsewhere", "keras/validation"} <= restored_runs, restored_runs
    assert "jax/prof" not in restored_runs  # purged: it stays reduced
    now = _logdir_files(logdir)
    assert sorted(now) == sorted(expected)
    for rel, want in expected.items():
        assert now[rel] == want, rel

    # a restore on a disk frees its backups itself: purging a restored operation (and then
    # everything) finds nothing left to free, refuses nothing and changes no file
    late_op = meta["ops"]["exp/late"]
    rep = api.purge(logdir, op=late_op, yes=True)
    assert (rep.ops, rep.kept, rep.refused, rep.freed_bytes) == ([], [], [], 0), rep.to_dict()
    rep = api.purge(logdir, yes=True)
    assert (rep.ops, rep.kept, rep.refused) == ([], [], []), rep.to_dict()
    ops = api.operations(logdir)
    assert ops and all(o["backup_purged"] for o in ops if o.get("kind") != "restore"), ops
    assert _logdir_files(logdir) == now


def _bucket_copy(base: Path, shape: str, s3_bucket, vault_from: str = "", vault_to: str = "") -> str:
    """The dumped objects of ``shape`` put back into a bucket of the recorded name (journals,
    manifests and the ledger name it), the local folder's recorded path replaced by its copy's
    in the state's JSON; returns the logdir URL."""
    meta = _load(base, shape, "meta.json")
    name = meta["url"].split("/")[2]
    if s3_bucket.fs.exists(name):
        s3_bucket.fs.rm(name, recursive=True)
    s3_bucket.fs.mkdir(name)
    s3_bucket.name = name
    prefix = meta["url"].split("/", 3)[3]
    src = base / shape / "logs"
    for dirpath, _, names in os.walk(src):
        for n in names:
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, src)
            data = Path(p).read_bytes()
            if vault_from and rel.startswith(STATE + os.sep) and _is_state_json(rel):
                data = data.replace(json.dumps(vault_from)[1:-1].encode(), json.dumps(vault_to)[1:-1].encode())
            s3_bucket.fs.pipe_file(f"{name}/{prefix}/{rel}", data)
    s3_bucket.fs.invalidate_cache()
    return meta["url"]


def _blob_vault_copy(base: Path, tmp_path: Path) -> str:
    """The local folder of blobs copied as a private folder of ours (git keeps no mode)."""
    vault = tmp_path / "vault"
    shutil.copytree(base / "bucket_blobs" / "vault", vault)
    for dirpath, dirs, names in os.walk(vault):
        os.chmod(dirpath, 0o700)
        for n in names:
            os.chmod(os.path.join(dirpath, n), 0o600)
    return str(vault)


@pytest.mark.parametrize("old", BLOB_FIXTURES, ids=lambda p: p.name)
def test_old_bucket_with_local_blob_folder_recovers_lists_restores_and_purges(old, s3_bucket, tmp_path):
    """A bucket logdir whose backups are a local folder of blobs (``--backup-dir /folder``): the
    batch killed after its blobs were added is settled, status and history list every operation,
    restore of everything streams every original back byte-identical (the restored-over-late-
    records run as the old restore left it), and purging then frees the folder's blobs of
    restored operations without touching the logdir."""
    meta = _load(old, "bucket_blobs", "meta.json")
    expected = _load(old, "bucket_blobs", "expected.json")
    vault = _blob_vault_copy(old, tmp_path)
    url = _bucket_copy(old, "bucket_blobs", s3_bucket, meta["vault"], vault)
    prefix = url.split("/", 3)[3]
    journals = [k for k in s3_bucket.hashes(prefix) if k.startswith(f"{STATE}/journal/")]
    assert len(journals) == 1

    settled = api.recover_logdir(url, backup_dir=vault)
    assert settled and all(s.action in SETTLED for s in settled), [vars(s) for s in settled]
    assert not [k for k in s3_bucket.hashes(prefix) if k.startswith((f"{STATE}/journal/", f"{STATE}/locks/"))]

    st = api.status(url, backup_dir=vault)
    assert st["problems"] == [], st["problems"]
    listed = {o["op_id"]: o for o in st["operations"]}
    assert set(meta["ops"].values()) <= set(listed), (meta["ops"], sorted(listed))
    ops = {o["op_id"]: o for o in api.operations(url, backup_dir=vault)}
    for op in meta["ops"].values():
        assert ops[op]["kind"] == "reduce" and ops[op]["started_at"], ops[op]
        # status answers the one manifest schema too (engine.manifest): as a disk's status does
        assert (listed[op]["kind"], listed[op]["started_at"], listed[op]["backup_purged"]) == \
            ("reduce", ops[op]["started_at"], False), listed[op]
    assert ops[meta["ops"]["exp/late"]]["restored_by"], ops[meta["ops"]["exp/late"]]
    kinds = [(e["kind"], e.get("run")) for e in api.history(url, backup_dir=vault)]
    for run in ("torch/resnet", "jax/prof", "exp/late"):
        assert ("reduce", run) in kinds, kinds

    outs = api.restore(url, backup_dir=vault)
    assert outs and all(o.status == Outcome.RESTORED for o in outs), [(o.run, o.status, o.reason) for o in outs]
    assert {"torch/resnet", "jax/prof"} <= {o.run for o in outs}
    now = {k: h for k, h in s3_bucket.hashes(prefix).items() if not k.startswith(f"{STATE}/")}
    assert sorted(now) == sorted(expected)
    for rel, want in expected.items():
        assert now[rel] == want["sha256"], rel

    rep = api.purge(url, backup_dir=vault, yes=True)
    assert rep.refused == [], rep.to_dict()
    purged = {o["op_id"] for o in rep.ops} | {k["op_id"] for k in rep.kept}
    assert meta["ops"]["torch/resnet"] in purged, rep.to_dict()
    assert {k: h for k, h in s3_bucket.hashes(prefix).items() if not k.startswith(f"{STATE}/")} == now
    ops = {o["op_id"]: o for o in api.operations(url, backup_dir=vault)}
    assert ops[meta["ops"]["torch/resnet"]]["backup_purged"], ops[meta["ops"]["torch/resnet"]]


def test_old_bucket_state_recovers_lists_restores_and_purges(old, s3_bucket):
    """On S3: the batch killed before its delete record is settled, status and history list every
    operation and the ledger, restore of everything gives back every original object
    byte-identical (the restored-over-late-records run as the old restore left it, its kept
    object listed), and a restored operation is purged."""
    meta = _load(old, "bucket", "meta.json")
    expected = _load(old, "bucket", "expected.json")
    name = meta["url"].split("/")[2]
    # the state names its bucket (journals, manifests, the ledger): the same name on this server
    if s3_bucket.fs.exists(name):
        s3_bucket.fs.rm(name, recursive=True)
    s3_bucket.fs.mkdir(name)
    s3_bucket.name = name
    url = s3_bucket.upload(old / "bucket" / "logs", "logs")
    assert url == meta["url"]
    journals = [k for k in s3_bucket.hashes("logs") if k.startswith(f"{STATE}/journal/")]
    assert len(journals) == 1

    settled = api.recover_logdir(url)
    assert settled and all(s.action in SETTLED for s in settled), [vars(s) for s in settled]
    state = s3_bucket.hashes("logs")
    assert not [k for k in state if k.startswith((f"{STATE}/journal/", f"{STATE}/locks/"))]

    st = api.status(url)
    assert st["problems"] == [], st["problems"]
    listed = {o["op_id"] for o in st["operations"]}
    assert set(meta["ops"].values()) <= listed, (meta["ops"], listed)
    # every operation in the one manifest schema (engine.manifest), whichever shape wrote it
    late = {o["op_id"]: o for o in st["operations"]}[meta["ops"]["exp/late"]]
    assert late["restored_by"] and isinstance(late["started_at"], float) and late["outcome"] == Outcome.VERIFIED
    assert any(o.get("run") == "jax/killed" for o in st["operations"]) or \
        all(s.action == Recovery.ROLLED_BACK for s in settled)
    kinds = [(e["kind"], e.get("run")) for e in api.history(url)]
    for run in ("torch/resnet", "jax/prof", "exp/late"):
        assert ("reduce", run) in kinds, kinds
    retired_op = meta["ops"].get("retire:keras/validation")
    if retired_op:  # a bucket retirement (fixtures from 282b743 on)
        assert [(r["run"], r["op_id"]) for r in api.retired(url)] == [("keras/validation", retired_op)]
        assert ("retire", "keras/validation") in kinds, kinds
        assert {o["op_id"]: o for o in st["operations"]}[retired_op]["kind"] == "retire"

    outs = api.restore(url)
    assert outs and all(o.status == Outcome.RESTORED for o in outs), [(o.run, o.status, o.reason) for o in outs]
    now = {k: h for k, h in s3_bucket.hashes("logs").items() if not k.startswith(f"{STATE}/")}
    assert sorted(now) == sorted(expected)
    for rel, want in expected.items():
        assert now[rel] == want["sha256"], rel

    late_op = meta["ops"]["exp/late"]
    rep = api.purge(url, op=late_op, yes=True)
    assert late_op in [o["op_id"] for o in rep.ops] + [k["op_id"] for k in rep.kept], rep.to_dict()
    assert rep.refused == []
    assert {k: h for k, h in s3_bucket.hashes("logs").items() if not k.startswith(f"{STATE}/")} == now
