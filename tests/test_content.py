"""Content-level reduction: event files rewritten to keep what the dashboard shows, traces slimmed.

Everything runs through the public API (plan -> transaction -> verification -> restore) on real
writer fixtures and on generated logdirs (TF1 legacy values, TF2 tensor summaries with metadata
on the first value only, tensorboardX/PyTorch legacy values, restarts, several files per run).
"""
import gzip
import json
import os
import random
import time
from pathlib import Path

import pytest

from conftest import copy_real, user_files
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.scan import categories as cat
from tb_footprint_plugin.plan import rules as content_rules
from tb_footprint_plugin.plan.policies import policy_from_dict
from tb_footprint_plugin.scan.scanner import scan
from tb_footprint_plugin.scan.tfrecord import RecordReader
from tb_footprint_plugin.transforms import event_rewrite as er
from tb_footprint_plugin.transforms import trace_slim as ts
from tb_footprint_plugin.verify import data_server_binary, read_view

from tensorboard.compat.proto import event_pb2, summary_pb2

needs_rust = pytest.mark.skipif(data_server_binary() is None, reason="tensorboard-data-server not installed")

ARCHIVE_CONTENT = {"dedupe_graphs": True, "strip_run_metadata": True, "downsample": "dashboard_exact"}
LOSSLESS_CONTENT = {"dedupe_graphs": True}


def archive_like(**content):
    return policy_from_dict({"name": "archive-content", "base": "archive",
                             "content": dict(ARCHIVE_CONTENT, **content)})


def age(root, seconds=3600.0):
    old = time.time() - seconds
    for dirpath, _, files in os.walk(root):
        for n in files:
            os.utime(os.path.join(dirpath, n), (old, old))


def event_bytes(root):
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, fs in os.walk(root) for n in fs
               if cat.is_event_file_name(n) and ".tb-footprint" not in d)


def key(p):
    return (p[0], repr(p[1]), p[2])


def views_of(run_dir, backend, **kw):
    v = read_view(str(run_dir), backend, **kw)
    assert v.fatal is None, v.fatal
    return v


def assert_same_view(before, after, plugins):
    for plugin in plugins:
        b, a = before.plugins.get(plugin, {}), after.plugins.get(plugin, {})
        assert set(b) == set(a), (plugin, set(b) ^ set(a))
        for tag in b:
            assert b[tag].metadata == a[tag].metadata, (plugin, tag)
            assert [key(p) for p in b[tag].points] == [key(p) for p in a[tag].points], (plugin, tag)


def assert_subset_first_last(before, after, plugins):
    """In-order subset of the original keeping the first and the last step of every tag."""
    lost_first = assert_subset_last(before, after, plugins)
    assert not lost_first, ("first step lost", lost_first)


def outcome(rep, run):
    o = next(o for o in rep.outcomes if o.run == run)
    assert o.status == "verified", o.to_dict()
    assert o.verification["ok"], o.verification["failed"]
    return o


# --- generated logdirs --------------------------------------------------------------------
def _legacy_histo_values(n_variants=7, seed=0):
    """torch ``add_histogram``-style values over a narrow range (few buckets: small records)."""
    rng = random.Random(seed)
    return [summary_pb2.Summary.Value(histo=synth.legacy_histogram_proto(
        [1.0 + rng.random() * (0.2 + i / 50) for _ in range(64)])) for i in range(n_variants)]


def _write_value(w, tag, step, value, wall):
    v = summary_pb2.Summary.Value()
    v.CopyFrom(value)
    v.tag = tag
    w.write_event(event_pb2.Event(wall_time=wall, step=step, summary=summary_pb2.Summary(value=[v])))


def make_histogram_heavy(logdir: Path, steps: int = 12000) -> Path:
    """``tbx``: tensorboardX/PyTorch legacy values in two event files (a run split in two);
    ``tf2``: TF2 tensor summaries written with metadata on each tag's first value only."""
    tbx = logdir / "tbx"
    variants = _legacy_histo_values()
    half = steps // 2
    for index, (lo, hi) in enumerate(((0, half), (half, steps))):
        with synth.EventWriter(str(tbx), style="torch", index=index, timestamp=1795990000 + index) as w:
            for s in range(lo, hi):
                wall = 1795990000.0 + s * 0.01
                for t, tag in enumerate(("grad/a", "grad/b")):
                    _write_value(w, tag, s, variants[(s + t) % len(variants)], wall)
                if s % 100 == 0:
                    w.legacy_simple_value("loss", s, 1.0 / (s + 1), wall_time=wall)
                if s % 50 == 0:
                    w.legacy_image("sample", s, synth.make_png(6, 6, seed=s % 5), 6, 6, wall_time=wall)
    tf2 = logdir / "tf2"
    rng = random.Random(1)
    buckets = [[(i, i + 1, rng.randint(0, 9)) for i in range(30)] for _ in range(5)]
    with synth.EventWriter(str(tf2), metadata="first") as w:
        for s in range(steps):
            w.histogram("weights", s, buckets[s % 5])
            if s % 100 == 0:
                w.scalar("acc", s, s / steps)
            if s % 200 == 0:
                w.image("input", s, synth.make_png(4, 4, seed=s % 3), 4, 4)
        for _ in range(4):
            w.graph_def(synth.make_graph_def(30))
        w.run_metadata("step100", 100, synth.make_run_metadata(20))
    age(logdir)
    return logdir


@needs_rust
def test_archive_content_cuts_histogram_heavy_runs_dashboard_exact(tmp_path):
    logdir = make_histogram_heavy(tmp_path / "logdir")
    before_files = user_files(logdir)
    runs = {r: logdir / r for r in ("tbx", "tf2")}
    rust0 = {r: views_of(d, "rust") for r, d in runs.items()}
    py0 = {r: views_of(d, "python", store_all=True) for r, d in runs.items()}
    bytes0 = {r: event_bytes(d) for r, d in runs.items()}

    pol = archive_like()
    plan = api.plan(str(logdir), pol)
    for r in runs:
        rp = plan.run(r)
        assert [a.kind for a in rp.actions] and all(a.kind == "rewrite" for a in rp.actions)
        text = "\n".join(rp.fidelity + rp.fidelity_details)
        assert "shows exactly the same 100 points per tag" in text and "--load_fast=false" in text
        assert "--samples_per_plugin" in text
        assert rp.expected_after_bytes < 0.15 * rp.bytes_before
    assert len(plan.run("tbx").actions) == 2  # both files of the split run
    rep = api.reduce_logdir(str(logdir), policy=pol, dry_run=False, verify_backends=("python", "rust"))
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    for r, d in runs.items():
        o = outcome(rep, r)
        assert {"python", "rust"} <= set(o.verification["backends"])
        cut = 1 - event_bytes(d) / bytes0[r]
        assert cut >= 0.85, (r, cut)
        rust1 = views_of(d, "rust")
        assert_same_view(rust0[r], rust1, ("histograms", "images", "scalars"))
        py1 = views_of(d, "python", store_all=True)
        assert_same_view(py0[r], py1, ("scalars",))
        assert_subset_first_last(py0[r], py1, ("histograms", "images"))
        # TF2: the run graph is unchanged, run metadata (step stats) is gone
        if r == "tf2":
            assert rust1.graph == rust0[r].graph and py1.graph == py0[r].graph
            assert "graph_tagged_run_metadata" in py0[r].plugins
            assert "graph_tagged_run_metadata" not in py1.plugins
    names_after = {k for k in user_files(logdir) if "tfevents" in k}
    assert names_after == {k for k in before_files if "tfevents" in k}
    outs = api.restore(str(logdir))
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    assert user_files(logdir) == before_files


def _merged(w, step, values, wall):
    w.write_event(event_pb2.Event(wall_time=wall, step=step, summary=summary_pb2.Summary(value=values)))


def make_restarts(logdir: Path) -> Path:
    """Two event files: a crash and restart (SessionLog.START, steps going backwards), a TF1
    merged summary (several tags per record), a tag whose metadata is only on its first value."""
    run = logdir / "restart"
    variants = _legacy_histo_values(3, seed=2)
    with synth.EventWriter(str(run), index=0, metadata="first") as w:
        w.session_log_start(0)
        for s in range(400):
            wall = 1795990000.0 + s
            _write_value(w, "h", s, variants[s % 3], wall)
            w.histogram("g", s, [(0, 1, s % 7), (1, 2, 3)], wall_time=wall)
            w.legacy_image("img", s, synth.make_png(3, 3, seed=s % 4), 3, 3, wall_time=wall)
            if s % 10 == 0:
                w.scalar("loss", s, 1.0 / (s + 1), wall_time=wall)
            if s < 200:  # TF1 merge_all: one event, several tags
                v1 = summary_pb2.Summary.Value(tag="m/loss", simple_value=float(s))
                v2 = summary_pb2.Summary.Value()
                v2.CopyFrom(variants[0])
                v2.tag = "m/h"
                _merged(w, s, [v1, v2], wall)
    with synth.EventWriter(str(run), index=1, timestamp=1795999000, metadata="first") as w:
        w.session_log_start(300)
        for s in range(300, 600):
            wall = 1795999000.0 + s
            _write_value(w, "h", s, variants[s % 3], wall)
            if s % 10 == 0:
                w.scalar("loss", s, 2.0 / (s + 1), wall_time=wall)
            w.legacy_image("late", s, synth.make_png(3, 3, seed=s % 2), 3, 3, wall_time=wall)
    age(logdir)
    return logdir


@needs_rust
def test_restarts_multi_value_events_and_first_value_metadata(tmp_path):
    logdir = make_restarts(tmp_path / "logdir")
    run = logdir / "restart"
    before_files = user_files(logdir)
    rust0, py0 = views_of(run, "rust"), views_of(run, "python", store_all=True)
    rules = content_rules.Rules.from_content(ARCHIVE_CONTENT)
    sel = er.select_run(str(run), rules, er.event_file_names(str(run)))
    tags = sel.tags
    assert tags["h"]["kept"] == tags["h"]["records"] and "restart" in tags["h"]["why"]
    assert tags["g"]["kept"] == tags["g"]["records"] and "purges" in tags["g"]["why"]
    assert tags["img"]["kept"] == tags["img"]["records"]
    assert tags["m/h"]["kept"] == tags["m/h"]["records"] and "shares records" in tags["m/h"]["why"]
    assert tags["late"]["kept"] == 11  # 300 images after the restart: what the server shows + first
    rep = api.reduce_logdir(str(logdir), policy=archive_like(), dry_run=False)
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    outcome(rep, "restart")
    rust1, py1 = views_of(run, "rust"), views_of(run, "python", store_all=True)
    assert_same_view(rust0, rust1, ("histograms", "images", "scalars"))
    assert_same_view(py0, py1, ("histograms", "scalars"))
    # every session_log and multi-value record is still there, in order
    kinds = []
    for name in sorted(os.listdir(run)):
        if "tfevents" in name:
            with RecordReader(str(run / name)) as r:
                for rec in r:
                    ev = event_pb2.Event.FromString(rec.data)
                    if ev.HasField("session_log"):
                        kinds.append(("start", ev.step))
                    elif len(ev.summary.value) > 1:
                        kinds.append("merged")
    assert kinds.count("merged") == 200 and [k for k in kinds if k != "merged"] == [("start", 0), ("start", 300)]
    api.restore(str(logdir))
    assert user_files(logdir) == before_files


@needs_rust
def test_keep_per_tag_caps_evenly_spaced_first_and_last(tmp_path):
    logdir = make_restarts(tmp_path / "logdir")  # reuse: only "late" is free of restarts
    run = logdir / "restart"
    extra = logdir / "caps"
    with synth.EventWriter(str(extra), style="torch") as w:
        variants = _legacy_histo_values(2)
        for s in range(0, 3000, 3):
            _write_value(w, "h", s, variants[s % 2], 1795990000.0 + s)
            w.legacy_image("im", s, synth.make_png(3, 3, seed=s % 3), 3, 3, wall_time=1795990000.0 + s)
    age(logdir)
    py0 = views_of(extra, "python", store_all=True)
    rust_all0 = views_of(extra, "rust", sampling_hints={"histograms": 0, "images": 0})
    pol = archive_like(keep_per_tag={"histograms": 50, "images": 5})
    text = "\n".join(api.plan(str(logdir), pol).run("caps").fidelity)  # the short lines say it
    assert "at most 50 records per tag" in text and "at most 5 records per tag" in text
    rep = api.reduce_logdir(str(logdir), policy=pol, dry_run=False)
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    o = outcome(rep, "caps")
    details = " ".join(c["detail"] for c in o.verification["checks"])
    assert "histograms: 1/1 tags, 50/1000 points kept" in details
    py1 = views_of(extra, "python", store_all=True)
    assert_subset_first_last(py0, py1, ("histograms", "images"))
    rust_all1 = views_of(extra, "rust", sampling_hints={"histograms": 0, "images": 0})
    assert_subset_first_last(rust_all0, rust_all1, ("histograms", "images"))
    steps = [p[0] for p in py1.plugins["histograms"]["h"].points]
    assert len(steps) == 50 and steps[0] == 0 and steps[-1] == 2997
    gaps = [b - a for a, b in zip(steps, steps[1:])]
    assert max(gaps) - min(gaps) <= 6  # evenly spaced by step (records every 3 steps)
    assert len(py1.plugins["images"]["im"].points) == 5
    outcome(rep, "restart")  # restarts: still verified (tags kept in full where needed)
    assert views_of(run, "python").run_present


@needs_rust
def test_corrupt_event_file_is_never_rewritten(tmp_path):
    logdir = tmp_path / "logdir"
    run = logdir / "run"
    with synth.EventWriter(str(run), index=0) as w:
        for s in range(100):
            w.image("im", s, synth.make_png(3, 3, seed=s % 3), 3, 3)
    with synth.EventWriter(str(run), index=1, timestamp=1795991000) as w:
        for s in range(100):
            w.scalar("loss", s, float(s))
        w.image("im2", 0, synth.make_png(3, 3), 3, 3)
    bad = next(p for p in run.iterdir() if p.name.endswith(".1.v2"))
    data = bytearray(bad.read_bytes())
    with RecordReader(str(bad)) as r:
        offsets = [rec.offset for rec in r]
    corrupt_at = offsets[50]
    data[corrupt_at + 14] ^= 0xFF  # inside the record's data: bad data CRC
    bad.write_bytes(bytes(data))
    age(logdir)
    plan = api.plan(str(logdir), archive_like())
    rp = plan.run("run")
    assert [a.path for a in rp.actions] == [f"run/{next(p.name for p in run.iterdir() if p.name.endswith('.0.v2'))}"]
    assert f"{bad.name}: kept as is (corrupt at offset {corrupt_at})" in rp.fidelity
    before = user_files(logdir)
    rep = api.reduce_logdir(str(logdir), policy=archive_like(), dry_run=False)
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    outcome(rep, "run")
    assert bad.read_bytes() == bytes(data)  # untouched
    api.restore(str(logdir))
    assert user_files(logdir) == before


def test_stage_refuses_a_damaged_or_changed_file(tmp_path):
    run = tmp_path / "run"
    with synth.EventWriter(str(run)) as w:
        for s in range(30):
            w.image("im", s, synth.make_png(2, 2, seed=s % 2), 2, 2)
    src = next(run.iterdir())
    mask = bytearray([1]) * 31
    with pytest.raises(er.RewriteError, match="changed"):
        er.rewrite_event_file(str(src), str(tmp_path / "out1"), mask, expected_sha="0" * 64)
    with pytest.raises(er.RewriteError, match="records"):
        er.rewrite_event_file(str(src), str(tmp_path / "out2"), mask[:-1])
    src.write_bytes(src.read_bytes()[:-7])  # an incomplete final record
    with pytest.raises(er.RewriteError, match="never rewritten"):
        er.rewrite_event_file(str(src), str(tmp_path / "out3"), mask)
    with pytest.raises(er.RewriteError, match="never rewritten"):
        er.select_run(str(run), content_rules.Rules.from_content(ARCHIVE_CONTENT), [src.name])


@needs_rust
def test_lossless_drops_repeated_graphs_but_keeps_what_each_backend_shows(tmp_path):
    logdir = tmp_path / "logdir"
    run = logdir / "g"
    g1, g2 = synth.make_graph_def(40, seed=1), synth.make_graph_def(40, seed=2)
    with synth.EventWriter(str(run)) as w:
        for s in range(50):
            w.scalar("x", s, float(s))
        for g in (g1, g1, g2, g1, g1, g1):  # the readers show the first (Python) and last (Rust)
            w.graph_def(g)
        for _ in range(3):
            w.meta_graph_def(synth.make_meta_graph_def(10))
    age(logdir)
    rust0, py0 = views_of(run, "rust", store_all=True), views_of(run, "python", store_all=True)
    pol = policy_from_dict({"name": "lossless-content", "base": "lossless", "content": LOSSLESS_CONTENT})
    rep = api.reduce_logdir(str(logdir), policy=pol, dry_run=False)
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    outcome(rep, "g")
    counts = {"graph_def": 0, "meta_graph_def": 0}
    with RecordReader(str(next(p for p in run.iterdir() if "tfevents" in p.name))) as r:
        for rec in r:
            what = event_pb2.Event.FromString(rec.data).WhichOneof("what")
            if what in counts:
                counts[what] += 1
    assert counts == {"graph_def": 3, "meta_graph_def": 2}  # g1 first, g2, g1 last; first + last meta
    rust1, py1 = views_of(run, "rust", store_all=True), views_of(run, "python", store_all=True)
    assert rust1.graph == rust0.graph and py1.graph == py0.graph
    assert_same_view(rust0, rust1, ("graphs", "scalars"))
    assert_same_view(py0, py1, ("graphs", "scalars"))


# --- real fixtures ---------------------------------------------------------------------------
@needs_rust
@pytest.mark.parametrize("name", ["tf/summary_mix", "torch/profiled", "tf/keras_profiled"])
def test_archive_content_on_real_writer_output(tmp_path, name):
    logdir = copy_real(name, tmp_path / "logdir")
    before = user_files(logdir)
    fp = scan(str(logdir))
    runs = [r.name for r in fp.runs if r.has_event_files]
    rust0 = {r: views_of(logdir / r, "rust") for r in runs}
    py0 = {r: views_of(logdir / r, "python", store_all=True) for r in runs}
    pol = archive_like()
    plan = api.plan(str(logdir), pol)
    rep = api.reduce_logdir(str(logdir), policy=pol, dry_run=False)
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    for r in runs:
        rust1 = views_of(logdir / r, "rust")
        py1 = views_of(logdir / r, "python", store_all=True)
        plugins = set(rust0[r].plugins) - set(content_rules.RUN_METADATA_PLUGINS)
        assert_same_view(rust0[r], rust1, plugins)
        assert_same_view(py0[r], py1, ("scalars", "hparams", "text"))
        assert_subset_first_last(py0[r], py1, set(py0[r].plugins) - set(content_rules.RUN_METADATA_PLUGINS))
    if name == "tf/summary_mix":
        rp = plan.run(".")
        assert any(a.kind == "rewrite" for a in rp.actions)
        py1 = views_of(logdir, "python", store_all=True)
        assert {t: len(v.points) for t, v in py1.plugins["images"].items()} == \
            {t: 11 for t in py0["."].plugins["images"]}  # 250 images per tag -> the 10 shown + the first
    api.restore(str(logdir))
    assert user_files(logdir) == before


def test_plan_says_xplane_is_kept_as_is(tmp_path):
    logdir = copy_real("tf/summary_mix", tmp_path / "logdir")
    pol = policy_from_dict({"name": "lossless-content", "base": "lossless", "content": LOSSLESS_CONTENT})
    rp = api.plan(str(logdir), pol).run(".")
    i = rp.fidelity.index("profile: 1 xplane file(s) kept as is")
    assert "xplane trimming is not proven safe with the profile plugin" in rp.fidelity_details[i]


# --- dashboard-exact internals ---------------------------------------------------------------------
@needs_rust
def test_probe_matches_the_real_reader_and_fillers_hide_the_first_record(tmp_path):
    table = er.kept_positions(10)
    assert table[11] == tuple(range(1, 11))  # 11 items: the server drops exactly the first
    run = tmp_path / "run"
    with synth.EventWriter(str(run)) as w:
        for s in range(137):
            w.image("im", s, synth.make_png(2, 2, seed=s % 5), 2, 2)
    steps = [p[0] for p in views_of(run, "rust").plugins["images"]["im"].points]
    assert tuple(steps) == er.kept_positions(10, 140)[137]  # the probe predicts real data
    keep = er.arrange_fillers(list(steps), [0], table, 10)
    assert keep == sorted([0] + steps)
    # retained records with no room between them for a filler: no arrangement
    assert er.arrange_fillers(list(range(90, 100)), [0], {11: table[11]}, 10) == [0] + list(range(90, 100))
    assert er.arrange_fillers(list(range(1, 11)), [0], {n: table[n] for n in (12, 13)}, 10) is None


def test_evenly_spaced_keeps_first_and_last():
    steps = list(range(0, 1000, 7))
    idx = er.evenly_spaced(steps, 10)
    assert len(idx) == 10 and idx[0] == 0 and idx[-1] == len(steps) - 1
    assert er.evenly_spaced(steps[:5], 10) == list(range(5))


def test_rules_from_content():
    r = content_rules.Rules.from_content({"downsample": {"histograms": "dashboard_exact", "*": "keep"},
                               "keep_per_tag": {"images": 5, "distributions": 20}})
    assert r.mode("histograms") == 20 and r.mode("images") == 5 and r.mode("audio") is None
    assert r.mode("scalars") is None and r.mode("text") is None
    assert content_rules.Rules.from_content(ARCHIVE_CONTENT).mode("pr_curves") == content_rules.DASHBOARD_EXACT
    with pytest.raises(ValueError):
        content_rules.Rules.from_content({"keep_per_tag": {"images": 1}})


def assert_subset_last(before, after, plugins):
    """In-order subset of the original with the last step of every tag (first not required)."""
    lost_first = []
    for plugin in plugins:
        for tag, tv in before.plugins.get(plugin, {}).items():
            got = [key(p) for p in after.plugins[plugin][tag].points]
            orig = [key(p) for p in tv.points]
            it = iter(orig)
            assert all(any(k == o for o in it) for k in got), (plugin, tag, "not an in-order subset")
            assert got and got[-1] == orig[-1], (plugin, tag, "last step lost")
            if got[0] != orig[0]:
                lost_first.append(tag)
    return lost_first


@needs_rust
def test_default_view_mode_keeps_exactly_what_rust_shows(tmp_path):
    """``downsample: "default_view"`` end to end (plan, transaction, real verification): the
    default reader's view is unchanged, the Python reader sees a subset with the last step (the
    first may be gone), verified as ``default_view_exact``; ~100/N of a mid-length series."""
    logdir = tmp_path / "logdir"
    run = logdir / "run"
    variants = _legacy_histo_values(3)
    with synth.EventWriter(str(run), style="torch") as w:
        for s in range(1500):
            wall = 1795990000.0 + s
            _write_value(w, "h", s, variants[s % 3], wall)
            if s % 10 == 0:
                w.legacy_simple_value("loss", s, 1.0 / (s + 1), wall_time=wall)
            if s % 5 == 0:
                w.legacy_image("img", s, synth.make_png(6, 6, seed=s % 4), 6, 6, wall_time=wall)
    age(logdir)
    before_files = user_files(logdir)
    rust0 = views_of(run, "rust")
    py0 = views_of(run, "python", store_all=True)
    bytes0 = event_bytes(run)

    pol = archive_like(downsample="default_view")
    plan = api.plan(str(logdir), pol)
    rp = plan.run("run")
    assert "shows exactly the same 100 points per tag" in "\n".join(rp.fidelity_details)
    # per tag, what --load_fast=false users will see: the short line names the tag, its detail the steps
    i = rp.fidelity.index("histograms, --load_fast=false: the same 100 points as the default dashboard (h)")
    assert "first step may be gone, the last is kept" in rp.fidelity_details[i]
    assert "h: 100 of " in rp.fidelity_details[i]

    rep = api.reduce_logdir(str(logdir), policy=pol, dry_run=False, verify_backends=("python", "rust"))
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    o = outcome(rep, "run")
    assert {"python", "rust"} <= set(o.verification["backends"])
    assert o.verification["expectations"] == {"histograms": "default_view_exact",
                                              "images": "default_view_exact"}
    details = [c["detail"] for c in o.verification["checks"]]
    assert "histograms: 1 tag, 100 points default view identical (rust)" in details, details
    assert any(d.startswith("histograms: 1/1 tags, 100/1500 points kept") and
               "first step may differ on --load_fast=false (python)" in d for d in details), details

    rust1 = views_of(run, "rust")
    assert_same_view(rust0, rust1, ("histograms", "images", "scalars"))
    for plugin in ("histograms", "images"):
        for tag, tv in rust0.plugins[plugin].items():
            assert rust1.plugins[plugin][tag].display_steps == tv.display_steps, (plugin, tag)
    py1 = views_of(run, "python", store_all=True)
    assert_same_view(py0, py1, ("scalars",))
    lost_first = assert_subset_last(py0, py1, ("histograms", "images"))
    assert lost_first, "the relaxed mode should have dropped a first step the default view hides"
    assert [p[0] for p in py1.plugins["histograms"]["h"].points] == \
        [p[0] for p in rust0.plugins["histograms"]["h"].points]  # exactly the server's 100
    cut = 1 - event_bytes(run) / bytes0
    assert cut >= 0.85, cut

    outs = api.restore(str(logdir))
    assert outs and all(x.status == "restored" for x in outs), [x.to_dict() for x in outs]
    assert user_files(logdir) == before_files

    # selection level: dashboard-exact (strict) keeps the first step, impossible at this length
    name = er.event_file_names(str(run))[0]
    strict = er.select_run(str(run), content_rules.Rules.from_content({"downsample": "dashboard_exact"}), [name])
    assert strict.tags["h"]["kept"] == 1500
    # metadata: the first record may go when the first kept one carries the same metadata, or
    # none (TF2 writers): then the first record's metadata is carried onto it (one re-encoded record)
    from tb_footprint_plugin.verify import compare

    assert content_rules.DEFAULT_VIEW_EXACT_MODE == compare.DEFAULT_VIEW_EXACT in compare.MODES
    rules = content_rules.Rules.from_content({"downsample": "default_view"})
    for policy, carried in (("every", 0), ("first", 1)):
        d = tmp_path / f"tf2-{policy}"
        with synth.EventWriter(str(d), metadata=policy) as w:
            for s in range(1500):
                w.histogram("w", s, [(0, 1, s % 5), (1, 2, 1)])
        n = er.event_file_names(str(d))[0]
        sel = er.select_run(str(d), rules, [n])
        assert sel.tags["w"]["kept"] == 100, (policy, sel.tags)
        assert sel.expectations == {"histograms": content_rules.DEFAULT_VIEW_EXACT_MODE}
        assert any("--load_fast=false" in note for note in sel.notes), sel.notes
        subs = list(sel.subs.get(n, {}).values())
        assert len(subs) == carried and all(x[:2] == (er.CARRY_METADATA, "w") for x in subs), subs
    # a first kept record whose metadata differs from the first's: kept whole, and said why
    import numpy as np
    from tensorboard.plugins.histogram import metadata as hm
    from tensorboard.util import tensor_util

    d = tmp_path / "tf2-differs"
    with synth.EventWriter(str(d)) as w:
        for s in range(1500):
            v = summary_pb2.Summary.Value(tag="w", metadata=hm.create_summary_metadata("", "v1" if s == 0 else "v2"))
            v.tensor.CopyFrom(tensor_util.make_tensor_proto(np.array([[0.0, 1.0, s % 5]])))
            w.write_event(event_pb2.Event(wall_time=1795990000.0 + s, step=s, summary=summary_pb2.Summary(value=[v])))
    n = er.event_file_names(str(d))[0]
    sel = er.select_run(str(d), rules, [n])
    assert sel.tags["w"]["kept"] == 1500 and "metadata differs" in sel.tags["w"]["why"], sel.tags
    assert not sel.subs and any("kept in full: default_view:" in note for note in sel.notes), sel.notes


# --- traces ---------------------------------------------------------------------------------------
REAL_TRACE = "torch/profiled"


def _events(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def _expected_kept(doc, o: ts.TraceOptions):
    evs = doc["traceEvents"]
    cut = None
    if o.keep_steps is not None:
        steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in evs
                       if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"))
        if len(steps) > o.keep_steps:
            cut = max(end for _, end in steps[: o.keep_steps])
    kept, removed = [], {k: 0 for k in ts.REMOVAL_KINDS}
    for e in evs:
        if o.drop_python_function and e.get("cat") == "python_function":
            removed["python_function"] += 1
        elif o.drop_memory and e.get("ph") == "i" and e.get("name") == "[memory]":
            removed["memory"] += 1
        elif (cut is not None and e.get("ph") != "M" and e.get("cat") != "Trace"
              and not (e.get("ph") == "i" and e.get("s") == "g") and e.get("ts", 0) >= cut):
            removed["after_steps"] += 1
        elif (o.min_dur_us is not None and e.get("ph") == "X" and e.get("dur", 1e30) < o.min_dur_us
              and not str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") != "Trace"):
            removed["short"] += 1
        else:
            kept.append(e)
    return kept, removed


@pytest.mark.parametrize("opts", [
    {},
    {"drop_python_function": True},
    {"drop_memory": True},
    {"keep_steps": 1},
    {"min_dur_us": 5},
    {"whitespace": False, "drop_python_function": True, "drop_memory": True, "keep_steps": 2, "min_dur_us": 1.5},
])
def test_trace_slim_each_option_on_real_kineto_traces(tmp_path, opts):
    src_dir = copy_real(REAL_TRACE, tmp_path / "logdir")
    o = ts.TraceOptions.from_dict(opts)
    for src in sorted(src_dir.glob("*.pt.trace.json")):
        doc = _events(src)
        dst = tmp_path / (src.name + ".gz")
        stats = ts.slim_trace(str(src), str(dst), o)
        ts.verify_slim(str(dst), stats)
        out = _events(dst)  # parses (gzip + JSON)
        kept, removed = _expected_kept(doc, o)
        assert stats["removed"] == removed
        assert out["traceEvents"] == kept  # identical JSON values, same order
        assert stats["events_before"] - sum(removed.values()) == len(out["traceEvents"])
        assert list(out) == list(doc) and all(out[k] == doc[k] for k in doc if k != "traceEvents")
        if opts.get("drop_python_function"):
            assert removed["python_function"] > 0
        if opts.get("keep_steps"):
            names = [e["name"] for e in out["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
            assert len(names) == opts["keep_steps"]
        if not opts:
            raw = src.read_bytes()
            assert len(gzip.decompress(dst.read_bytes())) < 0.8 * len(raw)  # whitespace gone
        dst.unlink()


def test_trace_slim_keeps_device_work_of_kept_steps(tmp_path):
    """keep_steps: a kernel launched in a kept step stays even if it ran after the cut."""
    evs = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    for k in range(3):
        t = 1000.0 * k
        evs.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 1, "tid": 1,
                    "ts": t, "dur": 900.0})
        evs.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                    "ts": t + 800, "dur": 5.0, "args": {"correlation": 100 + k}})
        evs.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7,
                    "ts": t + 950, "dur": 100.0, "args": {"correlation": 100 + k}})
        evs.append({"ph": "s", "cat": "ac2g", "id": 100 + k, "pid": 1, "tid": 1, "ts": t + 800, "name": "ac2g"})
        evs.append({"ph": "f", "cat": "ac2g", "id": 100 + k, "pid": 0, "tid": 7, "ts": t + 950, "name": "ac2g",
                    "bp": "e"})
    src = tmp_path / "w.1.pt.trace.json"
    src.write_text(json.dumps({"schemaVersion": 1, "traceEvents": evs, "traceName": "x"}, indent=1))
    dst = tmp_path / "out.gz"
    stats = ts.slim_trace(str(src), str(dst), ts.TraceOptions(keep_steps=1))
    ts.verify_slim(str(dst), stats)
    out = _events(dst)["traceEvents"]
    assert [e["name"] for e in out if e.get("cat") == "kernel"] == ["gemm"]  # step 0's kernel (ts 950 > cut 900)
    assert len([e for e in out if e.get("cat") == "ac2g"]) == 2
    assert stats["removed"]["after_steps"] == 2 * 5


def test_trace_slim_refuses_bad_input(tmp_path):
    src = tmp_path / "x.pt.trace.json"
    src.write_text('{"traceEvents": [{"ph": "X", "ts": 1}, {"ph": ')  # cut short
    with pytest.raises(ts.TraceFormatError):
        ts.slim_trace(str(src), str(tmp_path / "o.gz"), ts.TraceOptions())
    assert not (tmp_path / "o.gz").exists()
    src.write_text('{"traceEvents": [{"dur": NaN}]}')
    with pytest.raises(ts.TraceFormatError):
        ts.slim_trace(str(src), str(tmp_path / "o.gz"), ts.TraceOptions())
    with pytest.raises(ValueError):
        ts.TraceOptions.from_dict({"keep_steps": 0})


def test_trace_slim_streams_a_generated_trace_and_a_gz_input(tmp_path):
    src = tmp_path / "h_1.1.pt.trace.json.gz"
    synth.write_torch_trace(str(src), n_steps=4, gz=True)
    o = ts.TraceOptions(drop_python_function=True, keep_steps=2)
    dst = tmp_path / "out.gz"
    stats = ts.slim_trace(str(src), str(dst), o)
    ts.verify_slim(str(dst), stats)
    kept, removed = _expected_kept(_events(src), o)
    assert _events(dst)["traceEvents"] == kept and stats["removed"] == removed


def test_trace_slim_through_the_api_and_restore(tmp_path):
    logdir = copy_real(REAL_TRACE, tmp_path / "logdir")
    before = user_files(logdir)
    originals = {p.name: _events(p) for p in logdir.glob("*.pt.trace.json")}
    opts = {"drop_python_function": True, "drop_memory": True, "keep_steps": 2}
    pol = policy_from_dict({"name": "slim", "base": "lossless", "content": {"trace": opts}})
    rp = api.plan(str(logdir), pol).run(".")
    rewrites = [a for a in rp.actions if a.kind == "rewrite"]
    assert len(rewrites) == 2 and not [a for a in rp.actions if a.kind == "compress"]
    assert all(a.new_path == a.path + ".gz" for a in rewrites)
    assert any("Memory view becomes empty" in line for line in rp.fidelity)
    rep = api.reduce_logdir(str(logdir), policy=pol, dry_run=False, verify_backends=("python",))
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    assert not list(logdir.glob("*.pt.trace.json")) and not list(logdir.glob(".footprint-*"))
    o = ts.TraceOptions.from_dict(opts)
    for name, doc in originals.items():
        kept, _ = _expected_kept(doc, o)
        assert _events(logdir / (name + ".gz"))["traceEvents"] == kept
    api.restore(str(logdir))
    assert user_files(logdir) == before


def test_trace_slim_of_gz_traces_keeps_their_names(tmp_path):
    logdir = copy_real("torch/profiled_gz", tmp_path / "logdir")
    names = sorted(p.name for p in logdir.glob("*.pt.trace.json.gz"))
    pol = policy_from_dict({"name": "slim", "base": "lossless", "content": {"trace": {"drop_memory": True}}})
    rep = api.reduce_logdir(str(logdir), policy=pol, dry_run=False, verify_backends=("python",))
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    assert sorted(p.name for p in logdir.glob("*.pt.trace.json.gz")) == names
    for n in names:
        assert not [e for e in _events(logdir / n)["traceEvents"] if e.get("name") == "[memory]"]


def test_selection_drops_and_reads_masks_per_file_as_record_by_record():
    """The selection's at-once mask updates (drop all but the kept, which records a tag keeps,
    which sit in files kept whole) do what a loop over each record does, across two files."""
    from array import array

    rng = random.Random(7)
    names = ["events.out.tfevents.1.a", "events.out.tfevents.2.b"]
    sel = er._RunSelection("/nonexistent", er.Rules.from_content({}), names, {names[1]})
    sel.masks = {names[0]: bytearray(b"\1" * 300), names[1]: bytearray(b"\1" * 500)}
    s = er._Stream(plugin="histograms", mode=er.DEFAULT_VIEW)
    ids = sorted(rng.sample(range(300), 120)) + [(1 << er._REC_BITS) | r
                                                 for r in sorted(rng.sample(range(500), 200))]
    s.ids, s.steps = array("q", ids), array("q", range(0, 3 * len(ids), 3))
    keep = sorted(rng.sample(range(len(ids)), 90))
    expect = {n: bytearray(m) for n, m in sel.masks.items()}
    for i, gid in enumerate(ids):
        if i not in set(keep):
            expect[names[gid >> er._REC_BITS]][gid & er._REC_MASK] = 0
    assert sel._drop_all_but(s, keep) == len(ids) - len(keep)
    assert sel.masks == expect
    flags = sel._kept_flags(s)
    assert flags.nonzero()[0].tolist() == keep
    assert er._in_whole_files(s, sel.rewritten, sel.file_of) == set(range(120))
    assert er._in_whole_files(s, set(names), sel.file_of) == set()
    # one file only: the same through the no-sort path
    one = er._Stream(plugin="histograms", mode=er.DEFAULT_VIEW)
    one.ids = array("q", ids[120:])
    one.steps = array("q", range(len(one.ids)))
    assert er._in_whole_files(one, {names[0]}, sel.file_of) == set(range(200))
    assert sel._kept_flags(one).tolist() == [bool(expect[names[1]][g & er._REC_MASK])
                                             for g in ids[120:]]


def _fast_and_slow(run_dir, rules, rust_view, monkeypatch):
    """The selection of ``run_dir`` with runs of plain records classified from the batch decode
    (``_fast_run``, what plans and reduces do) and record by record; and how many runs took the
    fast path (a comparison where it never ran would prove nothing)."""
    taken = []
    fast_run = er._RunSelection._fast_run

    def counting(self, *a):
        ok = fast_run(self, *a)
        taken.append(ok)
        return ok

    monkeypatch.setattr(er._RunSelection, "_fast_run", counting)
    names = er.event_file_names(str(run_dir))
    fast = er.select_run(str(run_dir), rules, names, rust_view=rust_view)
    n_fast = sum(taken)
    slow = er.select_run(str(run_dir), rules, names, rust_view=rust_view, fast=False)
    assert sum(taken) == n_fast  # the record-by-record selection never took the fast path
    return fast, slow, n_fast


def _assert_same_selection(fast, slow):
    assert fast.masks == slow.masks  # the same kept records, file by file
    assert fast.codes == slow.codes
    assert fast.subs == slow.subs
    assert fast.tags == slow.tags
    assert fast.expectations == slow.expectations
    assert fast.notes == slow.notes


def make_duplicates(logdir: Path) -> Path:
    """Torch-style legacy values (no metadata: the fast path's case) with a repeated step, a step
    going backwards mid-file, and clean tags beside them; a second file continuing them."""
    run = logdir / "dups"
    variants = _legacy_histo_values(3, seed=5)
    with synth.EventWriter(str(run), style="torch") as w:
        for s in range(600):
            wall = 1795990000.0 + s
            _write_value(w, "clean/h", s, variants[s % 3], wall)
            _write_value(w, "dup/h", s if s != 300 else 299, variants[s % 3], wall)  # a repeated step
            _write_value(w, "back/h", s if s < 400 else s - 350, variants[s % 3], wall)  # a restart
            w.legacy_image("clean/im", s, synth.make_png(3, 3, seed=s % 3), 3, 3, wall_time=wall)
            if s % 10 == 0:
                w.scalar("loss", s, 1.0 / (s + 1), wall_time=wall)
    with synth.EventWriter(str(run), style="torch", index=1, timestamp=1795999000) as w:
        for s in range(600, 900):
            wall = 1795990000.0 + s
            _write_value(w, "clean/h", s, variants[s % 3], wall)
            _write_value(w, "dup/h", s, variants[s % 3], wall)
            w.legacy_image("clean/im", s, synth.make_png(3, 3, seed=s % 3), 3, 3, wall_time=wall)
    age(logdir)
    return run


@needs_rust
@pytest.mark.parametrize("content", [
    ARCHIVE_CONTENT,
    {"downsample": "default_view", "dedupe_graphs": True},
    dict(ARCHIVE_CONTENT, keep_per_tag={"histograms": 50, "images": 5}),
], ids=["dashboard_exact", "default_view", "keep_per_tag"])
def test_fast_and_record_by_record_selection_keep_the_same_records(tmp_path, monkeypatch, content):
    """One rule, two ways to apply it: a plan and a reduce must keep the same records whichever
    way each classified them (restarts, repeated steps, merged summaries, metadata on the first
    value only, legacy values without metadata, two files per run)."""
    rules = content_rules.Rules.from_content(content)
    restart = make_restarts(tmp_path / "a") / "restart"
    dups = make_duplicates(tmp_path / "b")
    for run in (restart, dups):
        fast, slow, n_fast = _fast_and_slow(run, rules, read_view(str(run), "rust"), monkeypatch)
        assert n_fast > 0
        _assert_same_selection(fast, slow)
        assert sum(len(m) - sum(m) for m in fast.masks.values()) > 0  # something is dropped
    tags = er.select_run(str(dups), rules, er.event_file_names(str(dups))).tags
    assert tags["dup/h"]["kept"] == tags["dup/h"]["records"] and "restart" in tags["dup/h"]["why"]
    assert tags["back/h"]["kept"] == tags["back/h"]["records"] and "restart" in tags["back/h"]["why"]
    assert tags["clean/im"]["kept"] < tags["clean/im"]["records"]
