"""A big run's reduce reads its original once (issue 12: verification within 3x of the Rust load).

The rewrite's selection pass hashes the original and notes every record's offset, size and CRC
and the scan's tag index; the Rust data server loads the original once, started by the engine;
both are handed to the verification (``verify.original``). These tests check that:

* a big-run reduce is verified with exactly one data-server load of the original (plus one of
  the reduced run), without streaming the original again for the record subsequence, and the
  Python loader reads a thinned copy whose whole scalar tag it was spared;
* a planted transform dropping a graph tag on that path is still rolled back, naming the route
  and the tag, every user file unchanged;
* the indexed record-subsequence check agrees with the streaming one and fails on a changed
  or reordered record;
* the data server's load is not used when a file changed between it and the pass, and
  nothing is handed over when a file's sha256 is not the backup's;
* the Python loader's probe is refused for pre-v2 event files (their purge depends on every
  summary's step).
"""
import os
import random
import shutil
from pathlib import Path

import pytest

from conftest import copy_real, tree_hashes
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.formats import views
from tb_footprint_plugin.scan import tfrecord
from tb_footprint_plugin.verify import Expectations, dashboard, data_server_binary, records
from tb_footprint_plugin.verify.original import OriginalRun, read_facts, stat_sig

BOTH = ("python", "rust")
needs_rust = pytest.mark.skipif(data_server_binary() is None, reason="no data server binary")


def _age(root: Path) -> None:
    old = 1_700_000_000
    for dirpath, dirs, files in os.walk(root):
        for n in files + dirs:
            os.utime(os.path.join(dirpath, n), (old, old))


def _histogram_run(run: Path, steps: int = 400) -> Path:
    """A torch-style run: two legacy histogram tags and a scalar every step, an image every 20."""
    from tensorboard.compat.proto import event_pb2, summary_pb2

    rng = random.Random(0)
    variants = [synth.legacy_histogram_proto([rng.gauss(0, 1 + i / 10) for _ in range(200)])
                for i in range(4)]
    png = synth.make_png(8, 8, seed=1)
    run.mkdir(parents=True)
    with synth.EventWriter(str(run), style="torch") as w:
        for step in range(steps):
            wall = 1_700_000_000.0 + step
            for t, tag in enumerate(("layer1/weight", "layer2/weight")):
                v = summary_pb2.Summary.Value(tag=tag, histo=variants[(step + t) % len(variants)])
                w.write_event(event_pb2.Event(wall_time=wall, step=step,
                                              summary=summary_pb2.Summary(value=[v])))
            w.legacy_simple_value("loss", step, 1.0 / (step + 1), wall_time=wall)
            if step % 20 == 0:
                w.legacy_image("sample", step, png, 8, 8, wall_time=wall)
        path = w.path
    return Path(path)


def _user_files(root: Path) -> dict:
    return {k: v for k, v in tree_hashes(root).items() if not k.startswith(".tb-footprint")}


@needs_rust
def test_big_run_reduce_reads_the_original_once(tmp_path, monkeypatch):
    logdir = tmp_path / "logdir"
    _histogram_run(logdir / "run")
    _age(logdir)
    monkeypatch.setattr(dashboard, "FULL_READ_BYTES", 0)  # this small run takes the big-run path
    starts = []
    real_start = views.DataServer.start

    def counting_start(self, *a, **kw):
        starts.append(self)
        return real_start(self, *a, **kw)

    monkeypatch.setattr(views.DataServer, "start", counting_start)

    def no_stream(*a, **kw):
        raise AssertionError("the original was streamed again for the record subsequence")

    monkeypatch.setattr(records, "records_subsequence", no_stream)
    # the plan runs the rewrite's selection, which asks a data server of the original which
    # records to keep (plan = outcome); its outcome is cached, and its load is kept for the
    # reduce that follows (the tab's and the CLI's flow): the reduce loads only the reduced run
    api.plan(str(logdir), "archive")
    assert len(starts) == 1, "the plan's selection: one data-server load of the original"
    starts.clear()
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=BOTH)
    out = [o for o in rep.outcomes if o.status != "skipped"]
    assert len(out) == 1 and out[0].status == "verified", [o.to_dict() for o in out]
    v = out[0].verification
    assert v["ok"], v["failed"]
    assert len(starts) == 1, "the plan's load of the original taken over; one load of the reduced run"
    lines = {c["name"]: c["detail"] for c in v["checks"]}
    assert "each byte-identical to an original record, in order" in lines["record subsequence"]
    assert lines["tag index"].startswith("tag index: 1 identical tags whole")
    assert "routes (rust, default view)" in lines["routes"]
    # the loader was spared the scalar tag's records (all but its first and last)
    assert "not re-read" in lines["python"] and "398 records" in lines["python"], lines["python"]
    assert out[0].bytes_after < out[0].bytes_before / 2
    # the handed-over reader's view held what the rewrite read of it: the tab's summaries must
    # not show those tags as emptied (both sides are summarised alike)
    for plugin, summary in (v.get("tag_summaries") or {}).items():
        for tag, entry in summary["tags"].items():
            assert not (entry["points"][0] > 0 and entry["points"][1] == 0), (plugin, tag, entry)


@needs_rust
def test_planted_graph_tag_drop_on_the_handover_path_is_rolled_back(tmp_path, monkeypatch):
    """The planted transform of ``test_dashboard_routes`` on the big-run path, where the
    verification uses what the rewrite read: still rolled back, naming route and tag."""
    from test_dashboard_routes import _drop_records, _into_the_staged_file

    from tb_footprint_plugin.storage.files import sha256_file
    from tb_footprint_plugin.transforms import event_rewrite

    logdir = copy_real("tf/summary_mix", tmp_path / "logdir")
    before = _user_files(logdir)
    monkeypatch.setattr(dashboard, "FULL_READ_BYTES", 0)
    real_stage = event_rewrite.stage_event_rewrite
    planted, handed = [], []

    def stage_dropping_graph_tag(action, src, tmp, sha, original=None):
        info = real_stage(action, src, tmp, sha, original=original)
        handed.append(original is not None and bool(original.files))
        staged = tmp + ".planted"
        planted.append(_drop_records(Path(tmp), Path(staged), "graph_run_metadata"))
        _into_the_staged_file(Path(staged), Path(tmp))
        info["size"] = os.path.getsize(tmp)
        info["sha256"] = sha256_file(tmp)
        info["expectations"] = {k: v for k, v in info["expectations"].items()
                                if not k.startswith("graph")}
        return info

    monkeypatch.setattr(event_rewrite, "stage_event_rewrite", stage_dropping_graph_tag)
    policy = {"name": "planted", "content": {"keep_per_tag": {"histograms": 50},
                                             "strip_run_metadata": False, "dedupe_graphs": False}}
    rep = api.reduce_logdir(str(logdir), policy=policy, dry_run=False, verify_backends=BOTH)
    assert planted and planted[0] >= 1 and any(handed), (planted, handed)
    out = [o for o in rep.outcomes if o.status != "skipped"]
    assert out and all(o.status == "rolled_back" for o in out), [o.to_dict() for o in out]
    reason = " ".join(filter(None, [out[0].reason] + list(out[0].verification["failed"])))
    assert "/data/plugin/graphs/info" in reason, reason
    assert "step_fn_profile" in reason, reason
    assert _user_files(logdir) == before


def _facts(run: Path) -> dict:
    return {p.name: read_facts(str(p)) for p in sorted(run.iterdir()) if "tfevents" in p.name}


def _rewrite(src: Path, dest: Path, keep) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tfrecord.RecordReader(str(src), verify=True) as r, open(dest, "wb") as out:
        recs = [rec.data for rec in r]
        for data in keep(recs):
            out.write(tfrecord.frame(data))


def test_indexed_subsequence_agrees_with_streaming(tmp_path):
    """Also where whole batches are matched at once (unique size and CRC, ≥ 64 records), and
    where they are not (a record repeated, or out of order)."""
    path = _histogram_run(tmp_path / "orig", steps=300)
    orig = path.parent
    facts = _facts(orig)
    cases = {
        "every third": (lambda recs: recs[::3], True),
        "identical": (lambda recs: recs, True),
        "changed": (lambda recs: recs[:5] + [recs[5][:-1] + bytes([recs[5][-1] ^ 1])] + recs[6:], False),
        "changed late": (lambda recs: recs[:500] + [recs[500][:-1] + bytes([recs[500][-1] ^ 1])]
                         + recs[501:], False),
        "reordered": (lambda recs: recs[:3] + [recs[4], recs[3]] + recs[5:], False),
        "reordered late": (lambda recs: recs[:700] + [recs[701], recs[700]] + recs[702:], False),
        "repeated": (lambda recs: recs[:100] + recs[99:], False),
        "foreign": (lambda recs: recs[:3] + [b"not an event"] + recs[3:], False),
    }
    for label, (keep, ok) in cases.items():
        red = tmp_path / label.replace(" ", "_")
        _rewrite(path, red / path.name, keep)
        fast = records.records_subsequence_indexed(str(orig), str(red), facts)
        slow = records.records_subsequence(str(orig), str(red))
        assert fast is not None
        assert fast == slow, (label, fast, slow)
        assert fast[0] is ok, (label, fast)
    # an index that does not cover the original's files is not used
    extra = orig / "events.out.tfevents.2.extra"
    shutil.copy(path, extra)
    assert records.records_subsequence_indexed(str(orig), str(tmp_path / "identical"), facts) is None


@needs_rust
def test_nothing_is_handed_over_after_a_change(tmp_path):
    """A file touched between the data server's load and the rewrite's pass: that load is not
    used (the selection and the verifier load the original themselves); a sha256 that is not
    the backup's: nothing is handed over."""
    from tb_footprint_plugin.engine import verification
    from tb_footprint_plugin.transforms import event_rewrite as er

    path = _histogram_run(tmp_path / "run", steps=150)
    run = path.parent
    rules = er.Rules.from_content({"downsample": "default_view"})
    original = OriginalRun(str(run)).start_reader(timeout_s=120)
    try:
        er.select_run(str(run), rules, [path.name], original=original)
        facts = original.files[path.name]
        assert facts.sha256 == read_facts(str(path)).sha256
        assert original.rust_reader() is not None
        assert original.index() == dashboard.run_index(str(run))
    finally:
        original.close()

    changed = OriginalRun(str(run)).start_reader(timeout_s=120)
    try:
        changed._thread.join()
        os.utime(path, (1, 1))  # a write changes mtime and ctime the same way
        sel = er.select_run(str(run), rules, [path.name], original=changed)
        assert changed.files[path.name].sha256 == facts.sha256
        assert changed.rust_reader() is None
        assert sel.tags["layer1/weight"]["kept"] == 100  # the selection read the view itself
    finally:
        changed.close()

    class Ctx:
        logdir = str(tmp_path)

        @staticmethod
        def abs(rel):
            return os.path.join(str(tmp_path), rel)

    pairs = {path.name: (str(path), str(path))}
    rel = os.path.relpath(str(path), str(tmp_path))
    assert verification.handed_over(Ctx, str(run), original, {rel: {"sha256": facts.sha256}},
                                    pairs) is original
    assert verification.handed_over(Ctx, str(run), original, {rel: {"sha256": "0" * 64}},
                                    pairs) is None
    assert stat_sig(str(path)) != facts.stat


def test_python_probe_thins_whole_tags_of_v2_files_only(tmp_path):
    from tensorboard.compat.proto import event_pb2

    from tb_footprint_plugin.verify import pyside

    path = _histogram_run(tmp_path / "run", steps=50)
    exp = Expectations(plugin_modes={"histograms": "default_view_exact", "images": "default_view_exact"})
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    probe = pyside.python_probe(str(path.parent), exp, str(probe_dir))
    assert probe is not None and probe["thinned"] == {"loss": 48}
    listing = pyside.read_listing(str(probe_dir), 60)
    assert listing.fatal is None and not listing.errors
    assert listing.plugins["scalars"]["loss"] == [0, 49]
    assert len(listing.plugins["histograms"]["layer1/weight"]) == 50

    # pre-v2: the loader purges by the step order of every summary, so nothing is thinned
    v1 = tmp_path / "v1"
    v1.mkdir()
    with tfrecord.RecordReader(str(path), verify=True) as r, open(v1 / path.name, "wb") as out:
        for i, rec in enumerate(r):
            data = rec.data
            if i == 0:
                data = event_pb2.Event(wall_time=1.0, file_version="brain.Event:1").SerializeToString()
            out.write(tfrecord.frame(data))
    other = tmp_path / "probe-v1"
    other.mkdir()
    assert pyside.python_probe(str(v1), exp, str(other)) is None


# --- the selection's batch fast path decides exactly what the record-by-record path does --------


def _selection_summary(sel) -> dict:
    return {"masks": {k: bytes(v) for k, v in sel.masks.items()},
            "codes": {k: bytes(v) for k, v in sel.codes.items()}, "code_names": sel.code_names,
            "expectations": sel.expectations, "notes": sel.notes, "tags": sel.tags,
            "subs": sel.subs}


def _restart_run(run: Path) -> None:
    """Torch-style histograms whose steps go back midway (a restart), in big batches."""
    from tensorboard.compat.proto import event_pb2, summary_pb2

    histo = synth.legacy_histogram_proto([float(i) for i in range(200)])
    with synth.EventWriter(str(run), style="torch") as w:
        for step in list(range(300)) + list(range(150, 400)):
            v = summary_pb2.Summary.Value(tag="h", histo=histo)
            w.write_event(event_pb2.Event(wall_time=1.0 + step, step=step,
                                          summary=summary_pb2.Summary(value=[v])))
            w.legacy_simple_value("loss", step, 1.0, wall_time=1.0 + step)


def _tf2_run(run: Path) -> None:
    """TF2 histograms with metadata on the first value only, and scalars."""
    with synth.EventWriter(str(run), style="tf", metadata="first") as w:
        for step in range(400):
            w.histogram("w", step, [float(step % 7), 1.0, 2.0])
            w.scalar("loss", step, 1.0 / (step + 1))


def selection_runs(tmp_path: Path) -> list:
    """Every real fixture's run, and generated torch, restart and TF2 runs (the selection's
    and the probe's equivalence tests)."""
    from conftest import REAL_FIXTURES

    runs = sorted({p.parent for p in REAL_FIXTURES.rglob("*tfevents*") if p.is_file()})
    _histogram_run(tmp_path / "histograms", steps=300)
    _restart_run(tmp_path / "restart")
    _tf2_run(tmp_path / "tf2")
    return runs + [tmp_path / "histograms", tmp_path / "restart", tmp_path / "tf2"]


@needs_rust
@pytest.mark.parametrize("content", [
    {"downsample": "default_view"},
    {"downsample": "dashboard_exact"},
    {"keep_per_tag": {"histograms": 50, "scalars": 20}, "dedupe_graphs": True,
     "strip_run_metadata": True},
], ids=["default_view", "dashboard_exact", "keep_per_tag"])
def test_batch_fast_path_selects_as_record_by_record(tmp_path, content):
    from tb_footprint_plugin.transforms import event_rewrite as er

    runs = selection_runs(tmp_path)
    rules = er.Rules.from_content(content)
    fast_batches = []
    real_fast = er._RunSelection._fast_run

    def counting(self, *a):
        ok = real_fast(self, *a)
        fast_batches.append(ok)
        return ok

    taken = {}
    for run in runs:
        names = er.event_file_names(str(run))
        slow = er.select_run(str(run), rules, names)  # no OriginalRun: record by record
        er._RunSelection._fast_run = counting
        fast_batches.clear()
        try:
            fast = er.select_run(str(run), rules, names, original=OriginalRun(str(run)))
        finally:
            er._RunSelection._fast_run = real_fast
        taken[run.name] = sum(fast_batches)
        assert _selection_summary(fast) == _selection_summary(slow), run
    # torch (legacy values) and TF2 values past their first: taken; TF 2.21 puts metadata on
    # every value, so the summary_mix fixture goes record by record
    assert all(taken[n] >= 1 for n in ("histograms", "restart", "tf2", "profiled")), taken


@needs_rust
def test_failure_during_the_backup_closes_the_early_server(tmp_path, monkeypatch):
    """The Rust load starts before the backup; a backup that fails rolls the run back and the
    data server is closed (no process left)."""
    from tb_footprint_plugin.engine import faults
    from tb_footprint_plugin.verify import original as orig_mod

    logdir = tmp_path / "logdir"
    _histogram_run(logdir / "run", steps=300)
    _age(logdir)
    before = _user_files(logdir)
    monkeypatch.setattr(dashboard, "FULL_READ_BYTES", 0)
    made = []
    real_init = orig_mod.OriginalRun.__init__

    def tracking_init(self, *a, **kw):
        real_init(self, *a, **kw)
        made.append(self)

    monkeypatch.setattr(orig_mod.OriginalRun, "__init__", tracking_init)
    faults.arm("reduce.backup_record", "raise")
    try:
        rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=BOTH)
    finally:
        faults.disarm_all()
    out = [o for o in rep.outcomes if o.status != "skipped"]
    assert len(out) == 1 and out[0].status == "rolled_back", [o.to_dict() for o in out]
    # the plan's load (taken over by the reduce) and the reduce's own
    assert len(made) == 2 and made[0].reader is None and made[0]._thread is None
    o = made[-1]
    assert o.reader is None and not o._thread.is_alive()  # closed: its data server was stopped
    assert orig_mod._parked is None  # nothing kept running either
    assert _user_files(logdir) == before


def test_python_probe_vectorised_writes_the_record_by_record_copy(tmp_path):
    """The probe classifies runs of plain records from the scan's decode, in its own pass or
    folded into the record subsequence's pass over the reduced run; on every real fixture and
    on generated torch, restart and TF2 runs each way writes byte for byte the copy that parsing
    each record writes, and says the same."""
    import hashlib

    from tb_footprint_plugin.verify import pyside

    runs = selection_runs(tmp_path)
    thinned = 0
    for exp in (Expectations(), Expectations(plugin_modes={"histograms": "default_view_identical"})):
        for i, run in enumerate(runs):
            outs = []
            for how in ("vectorised", "record by record", "folded"):
                dest = tmp_path / f"probe-{i}-{how}-{len(exp.plugin_modes)}"
                dest.mkdir()
                tap = None
                if how == "folded":  # the first pass made by the record subsequence's pass
                    rp = records.ReducedPass(str(run))
                    rp.probe = tap = pyside.ProbeTap(exp)
                    for n in rp.names:
                        fold = rp.tap(n)
                        with tfrecord.RecordReader(str(run / n), verify=True) as r:
                            for batch in r.batches():
                                fold.add(batch)
                        fold.finish(r)
                res = pyside.python_probe(str(run), exp, str(dest),
                                          vectorised=how != "record by record", tap=tap)
                files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in dest.iterdir()}
                outs.append((res, files if res else None))
            assert outs[0] == outs[1] == outs[2], run
            thinned += outs[0][0] is not None
    assert thinned >= 4


def test_python_probe_refuses_a_run_with_an_unparseable_record(tmp_path):
    """A record whose envelope decodes but whose value does not parse, of a tag already bound:
    the probe does not apply (the loader reads the reduced run itself), in every way."""
    import struct

    from tensorboard.compat.proto import event_pb2, summary_pb2

    from tb_footprint_plugin.verify import pyside

    run = tmp_path / "run"
    run.mkdir()
    recs = [tfrecord.frame(event_pb2.Event(wall_time=1.0, file_version="brain.Event:2")
                           .SerializeToString())]
    h = summary_pb2.HistogramProto(min=0, max=1, num=1, bucket_limit=[1.0], bucket=[1.0])
    for i in range(100):
        if i == 55:  # histo field with corrupt nested bytes
            val = b"\x0a\x01h" + b"\x2a\x02\xff\xff"
            summ = b"\x0a" + bytes([len(val)]) + val
            data = (b"\x09" + struct.pack("<d", 2.0) + b"\x10" + bytes([i]) + b"\x2a"
                    + bytes([len(summ)]) + summ)
        else:
            data = event_pb2.Event(wall_time=2.0, step=i, summary=summary_pb2.Summary(
                value=[summary_pb2.Summary.Value(tag="h", histo=h)])).SerializeToString()
        recs.append(tfrecord.frame(data))
    (run / "events.out.tfevents.1.host").write_bytes(b"".join(recs))
    for i, vectorised in enumerate((False, True)):
        dest = tmp_path / f"probe-{i}"
        dest.mkdir()
        assert pyside.python_probe(str(run), Expectations(), str(dest), vectorised=vectorised) is None
    # without the bad record the probe applies (so the test sees the refusal, not something else)
    good = tmp_path / "good"
    good.mkdir()
    (good / "events.out.tfevents.1.host").write_bytes(b"".join(recs[:56] + recs[57:]))
    dest = tmp_path / "probe-good"
    dest.mkdir()
    assert pyside.python_probe(str(good), Expectations(), str(dest)) is not None


def _crc_twin(m: bytes) -> bytes:
    """Other bytes of the same length and the same CRC-32C (the CRC is affine over GF(2):
    flip the first byte, then solve for the last four)."""
    crc = tfrecord._crc32c
    n = len(m)
    zero = crc(bytes(n))

    def lin(d: bytes) -> int:
        return crc(d) ^ zero

    flip = bytearray(n)
    flip[0] = 1
    target = lin(bytes(flip))
    basis: dict = {}
    for bit in range(32):
        d = bytearray(n)
        d[n - 4 + bit // 8] = 1 << (bit % 8)
        v, comb = lin(bytes(d)), 1 << bit
        for b in range(31, -1, -1):
            if (v >> b) & 1:
                if b in basis:
                    v, comb = v ^ basis[b][0], comb ^ basis[b][1]
                else:
                    basis[b] = (v, comb)
                    break
    v, comb = target, 0
    for b in range(31, -1, -1):
        if (v >> b) & 1:
            v, comb = v ^ basis[b][0], comb ^ basis[b][1]
    for bit in range(32):
        if (comb >> bit) & 1:
            flip[n - 4 + bit // 8] ^= 1 << (bit % 8)
    out = bytes(a ^ b for a, b in zip(m, flip))
    assert out != m and crc(out) == crc(m)
    return out


def test_indexed_subsequence_looks_past_a_same_crc_record(tmp_path):
    """A batch matched at once whose candidate has the record's size and CRC but other bytes
    is searched record by record: a later original file may hold the record itself."""
    orig, red = tmp_path / "orig", tmp_path / "red"
    orig.mkdir()
    red.mkdir()
    rng = random.Random(11)
    recs = [b"record %03d " % i + rng.randbytes(8) for i in range(100)]
    kept = b"the kept record!" + rng.randbytes(8)
    files = {"events.out.tfevents.1.a": recs[:50] + [_crc_twin(kept)] + recs[51:],
             "events.out.tfevents.2.b": [kept] + recs[51:]}
    for name, rs in files.items():
        (orig / name).write_bytes(b"".join(tfrecord.frame(r) for r in rs))
    (red / "events.out.tfevents.1.a").write_bytes(
        b"".join(tfrecord.frame(r) for r in recs[:50] + [kept] + recs[51:]))
    facts = _facts(orig)
    streamed = records.records_subsequence(str(orig), str(red))
    assert streamed[0] is True
    assert records.records_subsequence_indexed(str(orig), str(red), facts) == streamed
