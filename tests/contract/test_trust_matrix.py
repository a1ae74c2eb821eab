"""One trust matrix over every store (issue #26 item 5): the same hostile or damaged state, the
same assertions, on a POSIX folder, moto's S3, the GCS emulator and Azurite.

Each case starts from a logdir of two runs, ``a`` and ``b`` (scalars and a profile session
each), where ``a`` was reduced (profiles dropped) and verified. Beside the logdir lies a
*neighbour* — a sibling folder or prefix whose name starts with the logdir's own name
(``logs-n`` beside ``logs``), holding a copy of the runs and a canary — so a containment check by
string prefix would fail too. Then the state is planted or damaged and, on every store:

* nothing outside the logdir and its vault is read into it, written or deleted (the neighbour
  is byte for byte as it was, no canary byte shows up in the logdir);
* no original is lost: every verified reduction whose manifest is intact restores byte for byte,
  and a backup behind a damaged manifest stays in the vault;
* a damaged or planted file is reported with a code and named (path on a disk, URL on a bucket);
* the other run still works: ``b`` reduces and verifies.

What the local engine has and a bucket does not is kept in the local suites, not here: symlinks
where state belongs, other Unix users' state folders, hard links, modes and owners
(``tests/test_trust_users.py``, ``tests/test_adversarial.py``); ``identity.json``, ``vaults.json``
and the scan cache's damage (``tests/test_damaged_state.py``). A bucket keeps no operation log
(its history is read from its manifests), so that damage runs on POSIX only; its change log
(``.tb-footprint/history.jsonl``, the lines of rolled-back reductions) is damaged as a disk's is.
"""
import hashlib
import itertools
import json
import os
import random
import shutil
import uuid
from pathlib import Path

import pytest

from conftest import tree_hashes
from contract_stores import KINDS, buckets  # noqa: F401 - the bucket fixture
from tb_footprint_plugin import api, codes, synth
from tb_footprint_plugin.engine import trust
from tb_footprint_plugin.engine.bucket_state import lock_key
from tb_footprint_plugin.engine.journal import RunLock

STATE = ".tb-footprint"
RUNS = ("a", "b")
DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}
SESSION = "plugins/profile/2026_01_01_00_00_00"
CANARY = b"the neighbour's canary: never read, written or deleted"

#: every code a refusal or a finding may carry: the members of codes.py and the refusal codes of
#: engine/trust.py (which are not codes.py members yet: test_refusal_codes_are_codes_py_members)
CODES_PY = {m.value for e in (codes.Outcome, codes.Skip, codes.Failure, codes.Recovery, codes.Finding,
                              codes.StoreError, codes.BlobError) for m in e}
TRUST_CODES = {getattr(trust, n) for n in ("BAD_RECORD", "BAD_OP_ID", "BAD_DIGEST", "PATH_OUTSIDE",
                                          "FOREIGN_STATE", "FOREIGN_JOURNAL", "FOREIGN_VAULT", "FOREIGN_MANIFEST",
                                          "BAD_MANIFEST", "BAD_LEDGER", "BAD_LEDGER_ENTRY", "FOREIGN_LEDGER")}
KNOWN_CODES = CODES_PY | TRUST_CODES


def _write_template(root: Path) -> Path:
    rnd = random.Random(26)
    for run in RUNS:
        with synth.EventWriter(str(root / run)) as w:
            for s in range(5):
                w.scalar("loss", s, 1.0 / (s + 1))
                w.text("notes", s, f"{run} step {s}")
        sess = root / run / SESSION
        sess.mkdir(parents=True)
        (sess / "host.xplane.pb").write_bytes(rnd.randbytes(3000))
    old = 1_700_000_000
    for d, dirs, files in os.walk(root):
        for n in files + dirs:
            os.utime(os.path.join(d, n), (old, old))
    return root


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return _write_template(tmp_path_factory.mktemp("trust") / "logs")


_n = itertools.count()


class Place:
    """A fresh copy of the template on one store, its neighbour, and how to read both back."""

    def __init__(self, store: str, template: Path, tmp_path: Path, buckets):
        self.store = store
        self.posix = store == "posix"
        if self.posix:
            base = tmp_path / f"t{next(_n)}"
            self.root = base / "logs"
            self.neigh = base / "logs-n"
            shutil.copytree(template, self.root)
            shutil.copytree(template, self.neigh)
            (self.neigh / "canary.txt").write_bytes(CANARY)
            self.url = str(self.root)
        else:
            self.bucket = buckets(store)
            self.prefix = f"t{next(_n)}-{uuid.uuid4().hex[:6]}"
            self.nprefix = self.prefix + "-n"
            self.url = self.bucket.upload(template, self.prefix)
            self.bucket.upload(template, self.nprefix)
            self.bucket.fs.pipe_file(self.bucket.key(f"{self.nprefix}/canary.txt"), CANARY)

    # --- reading and writing the logdir's objects ------------------------------------------
    def _key(self, rel: str) -> str:
        return self.bucket.key(f"{self.prefix}/{rel}")

    def read(self, rel: str):
        if self.posix:
            p = self.root / rel
            return p.read_bytes() if p.is_file() else None
        self.bucket.fs.invalidate_cache()
        try:
            return self.bucket.fs.cat_file(self._key(rel))
        except FileNotFoundError:
            return None

    def write(self, rel: str, data: bytes) -> None:
        if self.posix:
            p = self.root / rel
            p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            p.write_bytes(data)
        else:
            self.bucket.fs.pipe_file(self._key(rel), data)
            self.bucket.fs.invalidate_cache()

    def delete(self, rel: str) -> None:
        if self.posix:
            (self.root / rel).unlink()
        else:
            self.bucket.fs.rm_file(self._key(rel))
            self.bucket.fs.invalidate_cache()

    def exists(self, rel: str) -> bool:
        return self.read(rel) is not None

    def every(self) -> dict:
        """rel -> sha256 of every file or object of the logdir, the tool's state included."""
        if self.posix:
            return {k: v for k, v in tree_hashes(self.root).items() if v != "dir"}
        return self.bucket.hashes(self.prefix)

    def user(self) -> dict:
        return {k: v for k, v in self.every().items() if not k.startswith(STATE + "/") and k != STATE}

    def outside(self) -> dict:
        """The neighbour, byte for byte."""
        if self.posix:
            return {k: v for k, v in tree_hashes(self.neigh).items() if v != "dir"}
        return self.bucket.hashes(self.nprefix)

    def name(self, rel: str) -> str:
        """How the product names one of the logdir's files: its path, or its URL."""
        return str(self.root / rel) if self.posix else f"{self.url}/{rel}"

    def store_path(self, rel: str) -> str:
        """How the state names a key: a bucket's store path (bucket/prefix/rel); a disk's path."""
        return str(self.root / rel) if self.posix else self._key(rel)

    def outside_path(self, rel: str) -> str:
        return str(self.neigh / rel) if self.posix else self.bucket.key(f"{self.nprefix}/{rel}")

    # --- where each kind of state lives -----------------------------------------------------
    def journal(self, op: str) -> str:
        return f"{STATE}/journal/{op}.jsonl" if self.posix else f"{STATE}/journal/{op}.json"

    def manifest(self, op: str) -> str:
        return f"{STATE}/ops/{op}.json" if self.posix else f"{STATE}/manifests/{op}.json"

    def lock(self, run: str) -> str:
        if self.posix:  # the flock file holds nothing: the lease beside it is what is read back
            return f"{STATE}/locks/" + os.path.basename(RunLock("locks", run).lease_path)
        return lock_key(run)

    def ledger(self, run: str) -> str:
        if self.posix:
            return f"{STATE}/ledger.json"
        # a bucket's: the reduce's one object of marks for its batch (``engine.ledger_objects``)
        return next(k for k in sorted(self.every()) if k.startswith(f"{STATE}/ledgers/batch/"))

    def holding(self, op: str, *names: str) -> str:
        """The first of ``names`` that exists, else the state file of the operation log that holds
        ``op``'s records (a vault that keeps every manifest in shared segments, no file per op)."""
        for n in names:
            if self.exists(n):
                return n
        if self.posix:  # the segment naming it, else (a compressed one) the newest segment
            files = sorted((q for q in (self.root / STATE / "oplog").rglob("*") if q.is_file()),
                           key=lambda q: (op.encode() in q.read_bytes(), q.stat().st_mtime_ns))
            if files:
                return str(files[-1].relative_to(self.root))
        return names[0]

    def manifest_file(self, op: str) -> str:
        """The file that holds ``op``'s manifest."""
        return self.holding(op, self.manifest(op))

    def history(self, op: str) -> str:
        return f"{STATE}/history.jsonl"

    def oplog(self, op: str) -> str:
        return self.holding(op, f"{STATE}/oplog/{op}.jsonl")


@pytest.fixture
def place(request, template, tmp_path, buckets):
    return Place(request.param, template, tmp_path, buckets)


def reduce(p: Place, run: str, **kw):
    rep = api.reduce_logdir(p.url, policy=DROP, dry_run=False, quiet_period=0, runs=[run],
                            verify_backends=("python",), **kw)
    return rep.outcomes


def reduced_a(p: Place):
    """Reduce ``a`` (with the batch ledger): (the user's files before, after, the op id)."""
    before = p.user()
    (o,) = reduce(p, "a", ledger="default")
    assert o.status == codes.Outcome.VERIFIED, (o.status, o.code, o.reason)
    assert p.user() != before
    return before, p.user(), o.op_id


def b_still_works(p: Place, before: dict):
    """The other run reduces and verifies, and its reduction restores byte for byte."""
    (o,) = reduce(p, "b")
    assert o.status == codes.Outcome.VERIFIED, (o.status, o.code, o.reason)
    outs = api.restore(p.url, op=o.op_id)
    # (beside it, a bucket's restore names damage that may hide another backup: a coded failure)
    assert [x.status for x in outs if x.status != codes.Outcome.FAILED] == [codes.Outcome.RESTORED], \
        [x.to_dict() for x in outs]
    assert all(x.code == codes.Failure.RESTORE_BLOCKED for x in outs if x.status == codes.Outcome.FAILED), \
        [x.to_dict() for x in outs]
    assert {k: v for k, v in p.user().items() if k.startswith("b/")} == \
        {k: v for k, v in before.items() if k.startswith("b/")}


def no_canary_inside(p: Place) -> None:
    canary = hashlib.sha256(CANARY).hexdigest()
    assert canary not in p.every().values(), "a byte from outside the logdir was read into it"


def coded(items) -> list:
    """The codes of reported items (dicts or outcomes), each asserted to be a known code."""
    out = []
    for it in items:
        c = it.get("code") if isinstance(it, dict) else getattr(it, "code", None)
        assert c is None or str(c) in KNOWN_CODES, (c, it)
        out.append(c)
    return out


def named_with_code(items, name: str) -> list:
    """The reports (dicts or outcomes, at any depth of a status) that name ``name`` and carry a
    known code."""
    hits = []

    def walk(it):
        if isinstance(it, (list, tuple)):
            for x in it:
                walk(x)
            return
        if not isinstance(it, dict):
            if not hasattr(it, "code"):
                return
            it = {"code": getattr(it, "code", None), "detail": getattr(it, "detail", ""),
                  "reason": getattr(it, "reason", ""), "op_id": getattr(it, "op_id", "")}
        c = it.get("code")
        if c is not None and str(c) in KNOWN_CODES and name in json.dumps(it, default=str):
            hits.append(it)
        for v in it.values():
            if isinstance(v, (dict, list, tuple)):
                walk(v)

    walk(items)
    return hits


PARAMS = [pytest.param(s, id=s) for s in KINDS]


# --- planted journals: keys outside the logdir, outside the journal's run, backups outside the vault
SHA = "ab" * 32


def _identity(p: Place) -> dict:
    return json.loads(p.read(f"{STATE}/identity.json"))


def _local_journal(p: Place, op: str, records: list) -> bytes:
    ident = _identity(p)
    begin = {"type": "begin", "kind": "reduce", "op_id": op, "run": "a", "logdir": p.url, "logdir_id": ident["id"],
             "vault": str(p.root / STATE), "policy": {"name": "drop-profiles"}, "verify_backends": ["python"],
             "plan": {"run": "a", "bytes_before": 1, "expected_after_bytes": 0, "actions": []}, "t": 1.0}
    return b"".join(json.dumps(dict(r, t=1.0)).encode() + b"\n" for r in [begin] + records)


def _bucket_journal(p: Place, op: str, files: list, step: str = "swapping") -> bytes:
    vault = p.store_path(STATE)
    doc = {"created": 1.0, "logdir": p.url, "op": op, "vault": vault, "step": step, "steps": [[step, 1.0]],
           "runs": [{"run": "a", "op": op, "lock": p.store_path(lock_key("a")), "files": files}]}
    return json.dumps(doc).encode()


def _event_rel(p: Place, run: str) -> str:
    return next(k for k in p.user() if k.startswith(run + "/") and "tfevents" in k)


def planted_journals(p: Place) -> dict:
    """op id -> (what the journal plants, its bytes)."""
    ev_a, ev_b = _event_rel(p, "a"), _event_rel(p, "b")
    out = {}
    if p.posix:
        out["20260101T000000-aaaaaa"] = ("a key outside the logdir", _local_journal(p, "20260101T000000-aaaaaa", [
            {"type": "backup", "path": "../logs-n/canary.txt", "sha256": SHA, "size": 1, "mode": 420, "mtime": 1.0,
             "action": "delete"}, {"type": "swap"}]))
        out["20260101T000000-bbbbbb"] = ("a key outside its run", _local_journal(p, "20260101T000000-bbbbbb", [
            {"type": "backup", "path": ev_b, "sha256": SHA, "size": 1, "mode": 420, "mtime": 1.0,
             "action": "delete"}, {"type": "swap"}]))
        out["20260101T000000-cccccc"] = ("a backup outside the vault", _local_journal(p, "20260101T000000-cccccc", [
            {"type": "backup", "path": ev_a, "sha256": "../../../logs-n/canary.txt", "size": 1, "mode": 420,
             "mtime": 1.0, "action": "delete"}, {"type": "swap"}]))
        out["20260101T000000-dddddd"] = ("an absolute key outside", _local_journal(p, "20260101T000000-dddddd", [
            {"type": "rmdir", "path": p.outside_path("a"), "mode": 493}, {"type": "swap"}]))
    else:
        blob = p.store_path(f"{STATE}/blobs/20260101T000000-aaaaaa/a/x")
        out["20260101T000000-aaaaaa"] = ("a key outside the logdir", _bucket_journal(p, "20260101T000000-aaaaaa", [
            {"action": "delete", "path": "../" + p.nprefix + "/canary.txt", "backup": blob, "size": 1}]))
        out["20260101T000000-bbbbbb"] = ("a key outside its run", _bucket_journal(p, "20260101T000000-bbbbbb", [
            {"action": "delete", "path": ev_b, "backup": p.store_path(f"{STATE}/blobs/20260101T000000-bbbbbb/{ev_b}"),
             "size": 1}]))
        out["20260101T000000-cccccc"] = ("a backup outside the vault", _bucket_journal(p, "20260101T000000-cccccc", [
            {"action": "delete", "path": ev_a, "backup": p.outside_path("canary.txt"), "size": len(CANARY)}]))
        out["20260101T000000-dddddd"] = ("a backup outside the vault, before the commit",
                                         _bucket_journal(p, "20260101T000000-dddddd", [
                                             {"action": "delete", "path": ev_a, "backup": p.outside_path(ev_a),
                                              "size": 1}], step="backing_up"))
    return out


def plant(p: Place, planted: dict, where) -> dict:
    """Write each planted record (op id -> (what, bytes)) at ``where(op)``, the place's journal or
    manifest key; returns ``planted``."""
    for op, (_what, data) in planted.items():
        p.write(where(op), data)
    return planted


@pytest.mark.parametrize("place", PARAMS, indirect=True)
def test_planted_journals_are_refused_and_touch_nothing(place):
    p = place
    before, after, op_a = reduced_a(p)
    outside = p.outside()
    planted = plant(p, planted_journals(p), p.journal)

    outs = api.recover_logdir(p.url)
    coded(outs)
    got = {o.op_id: o for o in outs}
    for op, (what, _data) in planted.items():
        assert op in got, (what, [(o.op_id, o.action, o.code, o.detail) for o in outs])
        assert got[op].action == codes.Recovery.REFUSED and got[op].code in KNOWN_CODES, (what, got[op])
    # left exactly as they are, for the user to look at; nothing else moved
    for op, (_what, data) in planted.items():
        assert p.read(p.journal(op)) == data
    assert p.user() == after and p.outside() == outside
    no_canary_inside(p)
    # ``b`` still reduces; ``a``, which the planted journals name, is restored, or refused with a
    # code while a journal naming it is unsettled, and restored once the user removed them
    b_still_works(p, before)
    outs = api.restore(p.url, op=op_a)
    if [o.status for o in outs] != [codes.Outcome.RESTORED]:
        assert [(o.status, o.code) for o in outs] == [(codes.Outcome.FAILED, codes.Failure.UNSETTLED)], \
            [o.to_dict() for o in outs]
        assert p.user() == {**after, **{k: v for k, v in before.items() if k.startswith("b/")}}
        for op in planted:
            p.delete(p.journal(op))
        outs = api.restore(p.url, op=op_a)
        assert [o.status for o in outs] == [codes.Outcome.RESTORED], [o.to_dict() for o in outs]
    assert p.user() == before
    assert p.outside() == outside
    no_canary_inside(p)


@pytest.mark.parametrize("place", [pytest.param(s, id=s) for s in ("s3", "posix")], indirect=True)
def test_a_refused_journal_is_named_by_its_url_or_path(place):
    """A bucket's refused journal is named by its URL, a disk's by its path."""
    p = place
    reduced_a(p)
    planted = plant(p, planted_journals(p), p.journal)
    outs = {o.op_id: o for o in api.recover_logdir(p.url)}
    for op in planted:
        assert p.name(p.journal(op)) in outs[op].detail, outs[op]


def test_refusal_codes_are_codes_py_members():
    """Every code a refusal carries is a member of codes.py (the one vocabulary programs branch on)."""
    assert TRUST_CODES <= CODES_PY, sorted(TRUST_CODES - CODES_PY)


# --- planted manifests: backups outside the vault ---------------------------------------------
def planted_manifests(p: Place) -> dict:
    """op id -> (what the manifest plants, its bytes): each names a backup outside the vault (the
    neighbour's canary) for a file of run ``a``; a restore that trusted it would copy the
    canary into the logdir, a purge would delete it."""
    canary_sha = hashlib.sha256(CANARY).hexdigest()
    out = {}
    if p.posix:
        base = {"kind": "reduce", "run": "a", "logdir": p.url, "logdir_id": _identity(p)["id"], "outcome": "verified",
                "started_at": 1.0, "finished_at": 1.0, "backup_purged": False, "created": [], "displaced": [],
                "bytes_before": 1, "bytes_after": 0}
        f = {"path": "a/from-outside", "size": len(CANARY), "mode": 420, "mtime": 1.0, "action": "delete"}
        out["20260101T000001-aaaaaa"] = ("a digest that is a path", dict(
            base, op_id="20260101T000001-aaaaaa", files=[dict(f, sha256="../../../logs-n/canary.txt")]))
        out["20260101T000001-bbbbbb"] = ("a blob outside the vault", dict(
            base, op_id="20260101T000001-bbbbbb", files=[dict(f, sha256=canary_sha,
                                                              blob="blobs/../../../logs-n/canary.txt")]))
        out["20260101T000001-cccccc"] = ("a blob by absolute path", dict(
            base, op_id="20260101T000001-cccccc", files=[dict(f, sha256=canary_sha, blob=p.outside_path("canary.txt"))]))
    else:
        base = {"logdir": p.url, "run": "a", "status": "verified", "created": 1.0, "bytes_before": 1, "bytes_after": 0,
                "host": "elsewhere", "policy": "drop-profiles", "shard": None, "user": "someone"}
        f = {"action": "delete", "path": "a/from-outside", "size": len(CANARY)}
        out["20260101T000001-aaaaaa"] = ("a backup key in the neighbour", dict(
            base, op="20260101T000001-aaaaaa", files=[dict(f, backup=p.outside_path("canary.txt"))]))
        out["20260101T000001-bbbbbb"] = ("a backup key climbing out of the vault", dict(
            base, op="20260101T000001-bbbbbb",
            files=[dict(f, backup=p.store_path(f"{STATE}/blobs") + "/../../" + p.nprefix + "/canary.txt")]))
        out["20260101T000001-cccccc"] = ("a backup in the vault's state, not its blobs", dict(
            base, op="20260101T000001-cccccc", files=[dict(f, backup=p.store_path(p.manifest("20260101T000001-aaaaaa")))]))
    return {op: (what, json.dumps(m).encode()) for op, (what, m) in out.items()}


def planted_path_manifests(p: Place, op_a: str) -> dict:
    """op id -> (what, bytes): manifests naming a real backup (``a``'s) but an original path
    outside the logdir or outside the run: a restore that trusted one would write there."""
    real = api.operation(p.url, op_a)
    f0 = dict(real["files"][0])
    out = {}
    for i, (what, path) in enumerate((("a path climbing out of the logdir", "../logs-n/written-by-restore"
                                       if p.posix else f"../{p.nprefix}/written-by-restore"),
                                      ("an absolute path outside", p.outside_path("written-by-restore")),
                                      ("a path in another run", "b/written-by-restore"))):
        op = f"20260101T000004-{i:06d}"
        m = {k: v for k, v in real.items() if not k.startswith("_")}
        m.update(op_id=op, op=op, files=[dict(f0, path=path)], restored_by=None)
        m.pop("status", None) if p.posix else m.update(status="verified")
        out[op] = (what, json.dumps(m, default=str).encode())
    return out


@pytest.mark.parametrize("place", PARAMS, indirect=True)
def test_planted_manifests_never_lead_a_restore_to_write_outside(place):
    p = place
    before, after, op_a = reduced_a(p)
    outside = p.outside()
    planted = plant(p, planted_path_manifests(p, op_a), p.manifest)
    for op in planted:  # each asked for by its op id: refused or failed, with a code
        try:
            outs = api.restore(p.url, op=op)
            told = [{"code": o.code, "detail": o.reason, "status": o.status} for o in outs]
        except Exception as e:  # noqa: BLE001 - a refusal with a code is what is asked for
            told = [{"code": getattr(e, "code", None), "detail": str(e), "status": None}]
        assert all(t["status"] != codes.Outcome.RESTORED for t in told), (planted[op][0], told)
        coded(told)
        # named with a code: by status (a disk: the manifest's path) or the refusal (a bucket: its op id)
        assert named_with_code([api.status(p.url), told], op), (planted[op][0], told)
        assert p.outside() == outside, planted[op][0]
        assert not any(k.endswith("written-by-restore") for k in p.user()), planted[op][0]
    # the real reduction still restores byte for byte; nothing was written outside
    outs = api.restore(p.url, op=op_a)
    assert [o.run for o in outs if o.status == codes.Outcome.RESTORED] == ["a"], [o.to_dict() for o in outs]
    assert p.user() == before and p.outside() == outside


@pytest.mark.parametrize("place", PARAMS, indirect=True)
def test_planted_manifests_never_lead_a_restore_or_purge_out_of_the_vault(place):
    p = place
    before, after, op_a = reduced_a(p)
    outside = p.outside()
    planted = plant(p, planted_manifests(p), p.manifest)

    # restore everything: the real reduction comes back; nothing is read from outside the vault
    outs = api.restore(p.url)
    coded(outs)
    # (by run: a local restore's outcome carries the restore's own op id, a bucket's the reduction's)
    assert [o.run for o in outs if o.status == codes.Outcome.RESTORED] == ["a"], [o.to_dict() for o in outs]
    assert p.user() == before, "a planted manifest put something into the logdir"
    no_canary_inside(p)
    assert p.outside() == outside
    # a purge of everything deletes no byte outside the vault, and names planted manifests with a
    # code in its report's refused list (a bucket: each of them, and it purges the rest)
    rep = api.purge(p.url, yes=True)
    said = list(rep.refused)
    assert any(named_with_code(said, p.manifest(op)) for op in planted), said
    if not p.posix:
        assert all(named_with_code(said, p.manifest(op)) for op in planted), said
    assert p.outside() == outside
    assert p.user() == before
    no_canary_inside(p)
    b_still_works(p, before)
    assert p.outside() == outside


# --- damaged state: truncated, not JSON, wrong types -----------------------------------------
GARBAGE = b"\xff\xfe{not json \x80\x81"
FORMS = ("truncated", "not_json", "wrong_types")


def _lines_damage(good_line: bytes, form: str) -> bytes:
    """One line appended to an append-only log (history, oplog)."""
    return {"truncated": good_line[:len(good_line) // 2] + b"\n", "not_json": GARBAGE + b"\n",
            "wrong_types": json.dumps({"op_id": 7, "time": "yesterday", "manifest": [1, 2]}).encode() + b"\n"}[form]


def damage(p: Place, kind: str, form: str, op_a: str) -> str:
    """Damage one state file of ``kind``; returns its rel path (the file that must be named)."""
    if kind == "journal":  # an unfinished operation's journal on run a (none is left after a reduce)
        op = "20260101T000002-abcdef"
        rel = p.journal(op)
        good = (_local_journal(p, op, []) if p.posix else _bucket_journal(p, op, [], step="backing_up"))
        wrong = ([{"type": "begin", "kind": "reduce", "op_id": op, "run": 7, "plan": "x"}] if p.posix
                 else {"op": op, "runs": 7, "step": 3})
        # a line-based journal's torn last line is what a crash leaves (settled, not damage): cut
        # inside a JSON document, then a complete line after it
        data = {"truncated": good[:len(good) // 2] + (b"\n" + good if p.posix else b""),
                "not_json": GARBAGE + b"\n", "wrong_types": json.dumps(wrong).encode() + b"\n"}[form]
    elif kind in ("history", "oplog"):
        rel = p.history(op_a) if kind == "history" else p.oplog(op_a)
        old = p.read(rel)
        if old is None and kind == "history" and not p.posix:
            # a bucket's clean reduce writes no line (only a rollback does): one planted first
            old = json.dumps({"time": 1.0, "op_id": "20260101T000009-abcdef", "kind": "reduce", "run": "a",
                              "outcome": "rolled_back", "verified": False, "backup_kept": False}).encode() + b"\n"
        assert old, rel
        data = old + _lines_damage(old.splitlines()[0], form) + (old.splitlines()[0] + b"\n" if kind == "history" else b"")
    else:
        rel = {"manifest": p.manifest_file(op_a), "lock": p.lock("a"), "ledger": p.ledger("a")}[kind]
        old = p.read(rel)
        if kind == "lock":  # the run's lock (or its lease) is gone once the reduce released it
            assert old is None, rel
            old = json.dumps({"expires": 1.0, "host": "vm", "pid": 1, "pid_start": 1, "renewed": 1.0, "run": "a",
                              "op": op_a, "at": 1.0, "shard": None, "started": 1.0, "token": "x"}).encode()
        assert old, rel
        wrong = {"manifest": {"op_id": op_a, "op": op_a, "files": 5, "run": ["a"], "status": "verified",
                              "outcome": "verified"},
                 "lock": {"host": 7, "pid": "x", "expires": "never", "run": ["a"], "op": 5},
                 "ledger": {"version": "x", "runs": 5, "entry": 5, "run": 7}}[kind]
        data = {"truncated": old[:len(old) // 2], "not_json": GARBAGE, "wrong_types": json.dumps(wrong).encode()}[form]
    p.write(rel, data)
    return rel


STATE_KINDS = ("journal", "manifest", "lock", "ledger", "history", "oplog")
#: The three object stores share each (kind, form) of damage among them (CI time: 45 cases on moto,
#: the GCS emulator and Azurite were ~70 s of the suite's worker time, 15 now): a bucket's state
#: files are parsed by the same functions of the bucket engine whatever the store, from the bytes
#: the store gives back; what is the store's own is that read, and each store still reads every
#: kind damaged, and meets every form (kind j, form k on store (j + k) mod 3: each (kind, form) on
#: one store, each store every kind and every form; checked by
#: ``test_the_bucket_damage_sample_covers_every_store_kind_and_form``). The disk runs every case.
BUCKET_KINDS = ("s3", "gs", "az")


def damage_sampled(store: str, kind: str, form: str) -> bool:
    if store not in BUCKET_KINDS:
        return True
    return (STATE_KINDS.index(kind) + FORMS.index(form)) % len(BUCKET_KINDS) == BUCKET_KINDS.index(store)


DAMAGE = [(s, k, f) for s in KINDS for k in STATE_KINDS for f in FORMS
          if (s == "posix" or k != "oplog") and damage_sampled(s, k, f)]
DAMAGE_CASES = [pytest.param(s, k, f, id=f"{s}-{k}-{f}") for s, k, f in DAMAGE]


def test_the_bucket_damage_sample_covers_every_store_kind_and_form():
    for s in BUCKET_KINDS:
        assert {k for st, k, _ in DAMAGE if st == s} == set(STATE_KINDS) - {"oplog"}, s
        assert {f for st, _, f in DAMAGE if st == s} == set(FORMS), s
    for k in set(STATE_KINDS) - {"oplog"}:
        for f in FORMS:
            assert [st for st, kk, ff in DAMAGE if (kk, ff) == (k, f) and st in BUCKET_KINDS], (k, f)
    assert len([c for c in DAMAGE if c[0] == "posix"]) == len(STATE_KINDS) * len(FORMS)


@pytest.mark.parametrize("place,kind,form", DAMAGE_CASES, indirect=["place"])
def test_damaged_state_is_named_with_a_code_and_loses_nothing(place, kind, form):
    p = place
    before, after, op_a = reduced_a(p)
    outside = p.outside()
    blobs = {k for k in p.every() if k.startswith(f"{STATE}/blobs/")}
    rel = damage(p, kind, form, op_a)
    name = p.name(rel)

    st = api.status(p.url)
    coded(st["problems"])
    recovered = api.recover_logdir(p.url)
    coded(recovered)
    said = [st, recovered, api.status(p.url)]
    assert p.user() == after and p.outside() == outside
    # nothing lost: every backup is still in the vault; ``a`` restores byte for byte, or (its
    # manifest unreadable) the restore names the manifest with a code and the backup stays
    assert blobs <= set(p.every())
    try:
        outs = api.restore(p.url, run="a")
    except Exception as e:  # noqa: BLE001 - a refusal that names the file is what is asked for
        outs = [e]
    unnamed = []  # what is not said (asked last: the safety below holds anyway)
    if [getattr(o, "status", None) for o in outs] == [codes.Outcome.RESTORED]:
        assert {k: v for k, v in p.user().items() if k.startswith("a/")} == \
            {k: v for k, v in before.items() if k.startswith("a/")}
    else:
        assert kind in ("manifest", "oplog", "lock", "journal"), [getattr(o, "to_dict", lambda: o)() for o in outs]
        told = [{"code": getattr(o, "code", None), "detail": getattr(o, "reason", None) or str(o)} for o in outs]
        if not (named_with_code(told, rel) or (kind == "journal" and told and
                                               all(str(t["code"]) == codes.Failure.UNSETTLED for t in told))):
            unnamed.append(f"restore of 'a' not done and the refusal does not name {rel} with a code: {told}")
        assert blobs <= set(p.every())
    b_still_works(p, before)
    assert p.outside() == outside
    # named with a code, by status or by the next start
    if not named_with_code(said, name):
        unnamed.append(f"{name} named by neither status nor the next start: "
                       f"{json.dumps(st['problems'], default=str)[:1500]} "
                       f"{[(o.op_id, o.action, o.code, o.detail) for o in recovered]}")
    where = "posix" if p.posix else "bucket"
    gap = GAPS.get((where, kind, form)) or GAPS.get((where, kind, "*"))
    if gap:
        assert unnamed, f"named now: drop {(where, kind, form)} from GAPS"
        pytest.xfail(gap)
    assert not unnamed, unnamed


#: damage the product does not name with a code yet: (store, kind, form) -> why (each asserted
#: still unnamed, so a fix makes the case fail until it is dropped from here)
GAPS = {
}


# --- a foreign lock: another live process holds run ``b`` -----------------------------------
def foreign_lock(p: Place, run: str) -> bytes:
    import time
    now = time.time()
    if p.posix:
        doc = {"expires": now + 3600, "host": "another-host", "pid": 4242, "pid_start": 1, "renewed": now, "run": run,
               "shard": None, "started": now, "token": "f" * 32}
    else:
        doc = {"at": now, "expires": now + 3600, "host": "another-host", "op": "20260101T000003-abcdef", "pid": 4242,
               "pid_start": 1, "renewed": now, "run": run, "shard": None}
    return json.dumps(doc, sort_keys=True).encode()


@pytest.mark.parametrize("place", PARAMS, indirect=True)
def test_a_foreign_lock_is_respected_and_left_alone(place):
    """A run another host holds by a live lease is skipped (locked, with a code), on every store;
    the next start leaves the lock as it is; the other run is reduced and restored."""
    p = place
    before = p.user()
    rel = p.lock("b")
    p.write(rel, foreign_lock(p, "b"))
    lock = p.read(rel)
    outs = {o.run: o for o in api.reduce_logdir(p.url, policy=DROP, dry_run=False, quiet_period=0,
                                                verify_backends=("python",)).outcomes}
    assert outs["b"].status == codes.Outcome.SKIPPED and outs["b"].code == codes.Skip.LOCKED, outs["b"].to_dict()
    assert "another-host" in outs["b"].reason
    assert outs["a"].status == codes.Outcome.VERIFIED, outs["a"].to_dict()
    assert {k: v for k, v in p.user().items() if k.startswith("b/")} == {k: v for k, v in before.items()
                                                                         if k.startswith("b/")}
    api.recover_logdir(p.url)
    assert p.read(rel) == lock
    outs = api.restore(p.url, run="a")
    assert [o.status for o in outs] == [codes.Outcome.RESTORED], [o.to_dict() for o in outs]
    assert p.user() == before and p.read(rel) == lock


# --- odd names: spaces, unicode, '..'-like, very long ------------------------------------------
ODD_RUNS = ("run with  spaces", "ünïcødé 日本語 run", "x..y", "..dots", "...", "L" * 180)


@pytest.fixture(scope="module")
def odd_template(tmp_path_factory):
    root = tmp_path_factory.mktemp("odd") / "logs"
    rnd = random.Random(27)
    for run in ODD_RUNS:
        with synth.EventWriter(str(root / run)) as w:
            for s in range(3):
                w.scalar("loss", s, 1.0 / (s + 1))
        sess = root / run / "plugins" / "profile" / "2026 01 01 ü..x"
        sess.mkdir(parents=True)
        (sess / "host name ü.xplane.pb").write_bytes(rnd.randbytes(2000))
    old = 1_700_000_000
    for d, dirs, files in os.walk(root):
        for n in files + dirs:
            os.utime(os.path.join(d, n), (old, old))
    return root


@pytest.mark.parametrize("store", KINDS)
def test_odd_names_reduce_and_restore_alike_on_every_store(store, odd_template, tmp_path, buckets):
    """Runs and files named with spaces, unicode, '..' inside a name and 180 characters: each is
    reduced and verified, nothing lands outside, and a restore gives every byte back."""
    p = Place(store, odd_template, tmp_path, buckets)
    before, outside = p.user(), p.outside()
    rep = api.reduce_logdir(p.url, policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",))
    got = {o.run: (o.status, o.code) for o in rep.outcomes}
    assert got == {r: (codes.Outcome.VERIFIED, None) for r in ODD_RUNS}, got
    assert all("xplane" not in k for k in p.user())
    assert p.outside() == outside
    outs = api.restore(p.url)
    assert sorted(o.run for o in outs if o.status == codes.Outcome.RESTORED) == sorted(ODD_RUNS), \
        [o.to_dict() for o in outs]
    assert p.user() == before and p.outside() == outside


@pytest.mark.parametrize("place", [pytest.param("s3", id="s3")], indirect=True)
def test_a_key_with_dotdot_segments_is_refused_with_a_code_and_the_other_run_reduces(place):
    """S3 keeps a key like ``a/plugins/../../../<neighbour>/x`` as it is (the GCS emulator drops the
    connection, Azurite refuses it): the run holding it is refused with a code, the other run reduces,
    the neighbour the key points at is untouched."""
    p = place
    evil = f"a/{SESSION}/../../../../../{p.nprefix}/a/{SESSION}/host.xplane.pb"
    p.bucket.fs.pipe_file(p.bucket.key(f"{p.prefix}/{evil}"), b"planted")
    p.bucket.fs.invalidate_cache()
    outside = p.outside()
    try:
        outs = {o.run: o for o in api.reduce_logdir(p.url, policy=DROP, dry_run=False, quiet_period=0,
                                                    verify_backends=("python",)).outcomes}
    finally:
        assert p.outside() == outside
    # the run holding the key is the deepest one it is under (the scan may see a run below
    # ``a/.../..`` for it): that one is refused; every other run gets its outcome
    holder = max((r for r in outs if evil.startswith(r + "/")), key=len)
    assert outs[holder].status != codes.Outcome.VERIFIED and str(outs[holder].code) in KNOWN_CODES, \
        outs[holder].to_dict()
    assert {r: o.status for r, o in outs.items() if r != holder} == \
        {r: codes.Outcome.VERIFIED for r in outs if r != holder}, {r: o.to_dict() for r, o in outs.items()}
    assert "b" in outs and evil in p.user()
    assert not api.status(p.url)["unfinished_operations"]


@pytest.mark.parametrize("place", PARAMS, indirect=True)
def test_a_planted_restore_journal_and_its_manifest_read_nothing_from_outside(place):
    """A restore under way is finished by the next start: a planted pair — a manifest whose backup
    is the neighbour's canary and a restore journal of it — must not bring the canary in."""
    p = place
    before, after, op_a = reduced_a(p)
    outside = p.outside()
    ev_a = _event_rel(p, "a")
    op = "20260101T000005-abcdef"
    canary_sha = hashlib.sha256(CANARY).hexdigest()
    if p.posix:
        real = api.operation(p.url, op_a)
        m = {k: v for k, v in real.items() if not k.startswith("_")}
        m.update(op_id=op, files=[{"path": ev_a, "size": len(CANARY), "mode": 420, "mtime": 1.0, "action": "delete",
                                   "sha256": canary_sha, "blob": "blobs/../../../logs-n/canary.txt"}])
        p.write(p.manifest(op), json.dumps(m, default=str).encode())
        rop = "20260101T000006-abcdef"
        begin = {"type": "begin", "kind": "restore", "op_id": rop, "run": "a", "of_op": op,
                 "vault": str(p.root / STATE), "logdir": p.url, "logdir_id": _identity(p)["id"], "t": 1.0}
        jrel = p.journal(rop)
        p.write(jrel, json.dumps(begin).encode() + b"\n")
    else:
        files = [{"action": "delete", "path": ev_a, "backup": p.outside_path("canary.txt"), "size": len(CANARY)}]
        m = {"op": op, "run": "a", "status": "verified", "logdir": p.url, "created": 1.0, "files": files}
        p.write(p.manifest(op), json.dumps(m).encode())
        jrel = p.journal(op)
        p.write(jrel, json.dumps({"kind": "restore", "op": op, "run": "a", "files": files, "created": 1.0}).encode())
    outs = api.recover_logdir(p.url)
    coded(outs)
    # refused (a bucket: the journal names a backup outside the vault) or failed (a disk: the manifest
    # it finishes names a blob outside the vault), with a code, never completed
    assert [o.action for o in outs] in ([codes.Recovery.REFUSED], [codes.Recovery.FAILED]), \
        [(o.op_id, o.action, o.detail) for o in outs]
    assert outs[0].code in KNOWN_CODES
    assert p.user() == after and p.outside() == outside
    no_canary_inside(p)
    assert p.exists(jrel)  # left alone, for the user
