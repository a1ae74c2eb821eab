"""Batched reduction of many small runs (issue #28 item 2): what every run paid alike.

* A run whose event files the reduce leaves alone (only its profile data goes) is verified by
  identity: each event file's sha256, hashed under the run's lock before the backup, is its
  sha256 at the verification and after the swap. No TensorBoard reader is started for it; a
  file changed meanwhile is caught and the run rolled back. A run whose event file is rewritten
  is still read by the readers.
* The batch ledger is an append-only log: one line per transition, compacted at the batch's
  end; a damaged line is skipped and named.
"""
from __future__ import annotations

import json
import os
import time

import pytest

from conftest import tree_hashes
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.storage.files import sha256_file
from tb_footprint_plugin.storage.paths import state_dir
from tb_footprint_plugin.verify import readers

OLD = time.time() - 3 * 86400


def _run(root, name, seed, steps=40, hist_every=10):
    """One small run as a training job leaves it: scalars, a few histograms, an xprof session."""
    run = os.path.join(root, name)
    with synth.EventWriter(run, timestamp=1_700_000_000 + seed) as w:
        for step in range(steps):
            w.scalar("loss", step, 1.0 / (step + 1 + seed))
            if step % hist_every == 0:
                w.histogram("layer/weights", step, [(i - 5.0, i - 4.0, float((i + step) % 7)) for i in range(10)])
    synth.write_profile_session(run, synth.session_name_for(1_700_000_600 + seed), "host", n_events=50, seed=seed)
    return run


def _age(root):
    for d, _dirs, files in os.walk(root):
        for f in files:
            os.utime(os.path.join(d, f), (OLD, OLD))


def _user_files(root):
    return {k: v for k, v in tree_hashes(root).items() if not k.startswith(".tb-footprint")}


def _event_files(run_dir):
    return sorted(n for n in os.listdir(run_dir) if "tfevents" in n)


@pytest.fixture
def reader_opens(monkeypatch):
    """The runs TensorBoard's readers were opened over (each side of each backend counts)."""
    opened = []
    real_open = readers.Reader.open

    def counting(self, *a, **kw):
        opened.append(self.view.run_dir)
        return real_open(self, *a, **kw)

    monkeypatch.setattr(readers.Reader, "open", counting)
    return opened


pytestmark = pytest.mark.usefixtures("disarm_faults")


def test_a_profile_only_removal_starts_no_reader_and_lists_each_event_file_unchanged(tmp_path, reader_opens):
    logdir = tmp_path / "logs"
    runs = [_run(str(logdir), f"exp0/run{i}", i) for i in range(3)]
    _age(logdir)
    before = _user_files(logdir)
    hashes = {os.path.relpath(os.path.join(r, n), logdir): sha256_file(os.path.join(r, n))
              for r in runs for n in _event_files(r)}
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python", "rust"),
                            ledger="default")
    assert [o.status for o in rep.outcomes] == ["verified"] * 3, [o.to_dict() for o in rep.outcomes]
    assert reader_opens == []  # not one reader, of either backend, for any of the runs
    for o in rep.outcomes:
        assert o.removed_files and not any("tfevents" in f for f in o.removed_files)
        v = o.verification
        assert v["ok"] and v["mode"] == "unchanged" and v["backends"] == []
        mine = {p: h for p, h in hashes.items() if p.startswith(o.run + "/")}
        assert {f["path"]: f["sha256"] for f in v["unchanged"]} == mine
        names = {c["name"] for c in v["checks"]}
        assert {"event files", "run present", "routes", "removed files", "plan"} <= names
        line = next(c["detail"] for c in v["checks"] if c["name"] == "event files")
        assert "unchanged (sha256)" in line
    # the manifest holds the same record; the event files are the very bytes they were
    ops = {m["op_id"]: m for m in api.operations(str(logdir))}
    for o in rep.outcomes:
        m = ops[o.op_id]
        assert m["verification"]["mode"] == "unchanged" and "views" not in m["verification"]
        # compact: a built-in policy by its name, the plan's actions as per-category totals and
        # their digest (files and removed_dirs list what was done)
        assert m["policy"] == {"name": "archive", "builtin": True}
        assert "actions" not in m["plan"] and len(m["plan"]["actions_sha256"]) == 64
        assert m["plan"]["changes"]["profile_xplane"][2] == 1, m["plan"]["changes"]
        # each removed folder: its path, mode, mtime and (since e558d46, given back as root) owner
        assert all(set(d) == {"path", "mode", "mtime_ns", "uid", "gid"} for d in m["removed_dirs"]), \
            m["removed_dirs"]
    after = _user_files(logdir)
    assert {p: after[p] for p in hashes} == {p: before[p] for p in hashes}
    assert not [p for p in after if "plugins/profile" in p]
    # the ledger was compacted at the batch's end: one JSON document, every run done
    with open(os.path.join(state_dir(str(logdir)), "ledger.json")) as f:
        assert {e["state"] for e in json.load(f)["runs"].values()} == {"done"}
    outs = api.restore(str(logdir))
    assert outs and all(o.status == "restored" for o in outs)
    assert _user_files(logdir) == before


def test_a_run_whose_event_file_is_rewritten_is_still_read_by_the_readers(tmp_path, reader_opens):
    logdir = tmp_path / "logs"
    run = _run(str(logdir), "big/run", 0, steps=400, hist_every=1)  # archive thins its histograms
    _age(logdir)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    (o,) = rep.outcomes
    assert o.status == "verified", o.to_dict()
    assert any("tfevents" in f for f in o.created_files)
    assert reader_opens and o.verification.get("mode") != "unchanged"
    assert o.verification["backends"] == ["python"]
    assert _event_files(run)


def _tamper(path):
    """Change a byte of ``path`` keeping its size and mtime: only its sha256 can tell."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(st.st_size - 1)
        last = f.read(1)
        f.seek(st.st_size - 1)
        f.write(bytes([last[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("step", ["reduce.backup", "reduce.swap_record"])
def test_an_untouched_event_file_changed_before_the_commit_rolls_the_run_back(tmp_path, step, reader_opens):
    """Changed between the backup and the commit: found by its sha256 at the verification
    (``reduce.backup``) or after the swap (``reduce.swap_record``, the verification had passed);
    either way the run goes back as it was, its profile data byte for byte."""
    logdir = tmp_path / "logs"
    run = _run(str(logdir), "exp0/run0", 0)
    _age(logdir)
    event = os.path.join(run, _event_files(run)[0])
    faults.arm(step, lambda: _tamper(event))
    before = _user_files(logdir)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python", "rust"))
    (o,) = rep.outcomes
    assert o.status == "rolled_back", o.to_dict()
    assert "changed" in o.reason and os.path.basename(event) in o.reason
    assert reader_opens == []
    after = _user_files(logdir)
    rel = os.path.relpath(event, logdir)
    assert after[rel] != before[rel]  # the change stays: it was never ours to undo
    assert {k: v for k, v in after.items() if k != rel} == {k: v for k, v in before.items() if k != rel}
    assert not api.pending_operations(str(logdir))


def test_the_ledger_appends_one_line_a_transition_and_names_a_damaged_line(tmp_path):
    from tb_footprint_plugin.engine.ledger import Ledger, load_ledger

    path = str(tmp_path / ".tb-footprint" / "ledger.json")
    book = Ledger(path, "archive", str(tmp_path))
    book.start([f"r{i}" for i in range(50)])
    ino = os.stat(path).st_ino
    for i in range(10):
        book.mark(f"r{i}", "reducing")
        book.mark(f"r{i}", "done", op_id=f"op{i}")
    assert os.stat(path).st_ino == ino  # appended to, never rewritten
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    assert len([x for x in lines if x.strip()]) == 1 + 20
    # a damaged line costs only itself, and is named
    with open(path, "ab") as f:
        f.write(b'{"run": "r11", "entry": \xff}\n')
        f.write(json.dumps({"run": "r12", "entry": {"state": "done", "op_id": "op12"}}).encode() + b"\n")
    data, problems = load_ledger(path, str(tmp_path))
    assert data["runs"]["r12"]["state"] == "done" and data["runs"]["r9"]["state"] == "done"
    assert data["runs"]["r11"]["state"] == "pending"
    assert [p.code for p in problems] == ["damaged_line"] and "line 22" in str(problems[0])
    # a torn last line (a writer killed mid-append) is ignored; the next mark rewrites the file
    with open(path, "ab") as f:
        f.write(b'{"run": "r13", "ent')
    other = Ledger(path, "archive", str(tmp_path))
    other.mark("r14", "done", op_id="op14")
    data, problems = load_ledger(path, str(tmp_path))
    assert problems == [] and data["runs"]["r14"]["state"] == "done" and data["runs"]["r12"]["state"] == "done"
    book.compact()
    with open(path) as f:
        assert len(json.load(f)["runs"]) == 50  # one JSON document again, as earlier versions read it


def test_changes_since_reads_only_what_was_appended_and_follows_a_replaced_file(tmp_path, monkeypatch):
    """The per-run check for another process's change reads each history file once and then only
    its new lines (reading every file whole for each run of a batch was quadratic)."""
    from tb_footprint_plugin.engine import history

    state = str(tmp_path / ".tb-footprint")
    os.makedirs(state)
    path = os.path.join(state, "history.jsonl")

    def line(run, t, outcome="verified"):
        return json.dumps({"time": t, "run": run, "outcome": outcome, "op_id": f"{run}-{t}", "kind": "reduce"}) + "\n"

    with open(path, "w") as f:
        f.write(line("a", 1.0) + line("b", 2.0) + "not json\n" + line("a", 3.0, "rolled_back"))
    reads = []  # where each read of a history file starts
    real = history.StateFolder.read_range
    monkeypatch.setattr(history.StateFolder, "read_range",
                        lambda self, key, start, end: reads.append(start) or real(self, key, start, end))
    assert [e["op_id"] for e in history.changes_since(state, "a", 0.5, {"verified"})] == ["a-1.0"]
    size = os.path.getsize(path)
    with open(path, "a") as f:
        f.write(line("a", 4.0) + '{"time": 5.0, "run": "a", "outc')  # the last one torn, mid-append
    assert [e["op_id"] for e in history.changes_since(state, "a", 1.5, {"verified"})] == ["a-4.0"]
    assert history._FOLLOWED[path][1] == size + len(line("a", 4.0))  # the torn line is not consumed
    with open(path, "a") as f:
        f.write('ome": "verified", "op_id": "a-5.0"}\n')
    assert [e["op_id"] for e in history.changes_since(state, "a", 1.5, {"verified"})] == ["a-4.0", "a-5.0"]
    # replaced (set aside and started again): read from its start
    os.replace(path, path + ".old")
    with open(path, "w") as f:
        f.write(line("a", 9.0))
    assert [e["op_id"] for e in history.changes_since(state, "a", 0.0, {"verified"})] == ["a-9.0"]
    # each call one read from just before where the last one stopped (its last line, to tell an
    # appended file from a replaced one); the replaced file read again from its start
    assert reads[0] == 0 and all(0 < r < size for r in reads[1:2]) and all(r >= size - 256 for r in reads[1:4]), reads
    assert reads[4:] == [0] and len(reads) == 5, reads


def test_markers_no_destructive_step_waits_on_are_not_fsynced_one_by_one(tmp_path, monkeypatch):
    """A small run's reduce fsynced ~24 times; the journal's markers (backed_up, verified,
    swapped, commit), the removal of a committed run's journal and a ledger's in-flight states
    are made durable by the next fsync instead. Every record a destructive step waits on still is."""
    from tb_footprint_plugin.engine.journal import Journal
    from tb_footprint_plugin.engine.ledger import Ledger

    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real(fd))
    j = Journal.create(str(tmp_path / "journal"), "20260101T000000-abcdef", {"type": "begin"})
    synced.clear()
    j.append({"type": "backed_up"}, sync=False)
    assert synced == []
    j.append({"type": "swap"})
    assert len(synced) == 1
    assert [r["type"] for r in j.records()] == ["begin", "backed_up", "swap"]
    book = Ledger(str(tmp_path / ".tb-footprint" / "ledger.json"), "archive", str(tmp_path))
    book.start(["r"])
    synced.clear()
    book.mark("r", "reducing")
    book.mark("r", "verifying")
    assert synced == []
    book.mark("r", "done", op_id="x")
    assert len(synced) == 1 and book.read()["runs"]["r"]["state"] == "done"


def test_a_builtin_policy_is_stored_by_name_and_a_custom_one_whole(tmp_path):
    from tb_footprint_plugin.engine.catalogue import stored_policy
    from tb_footprint_plugin.plan.policies import get_policy

    archive = get_policy("archive").to_dict()
    assert stored_policy(archive) == {"name": "archive", "builtin": True}
    custom = dict(archive, rules=dict(archive.get("rules") or {}, extra=1)) if "rules" in archive else \
        dict(archive, name="archive", keep_sessions=99)
    assert stored_policy(custom) == custom
    assert stored_policy({"name": "custom(archive)", "x": 1}) == {"name": "custom(archive)", "x": 1}
