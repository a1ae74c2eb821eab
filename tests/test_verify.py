"""verify/: record checks, TensorBoard reader views and original-vs-reduced verification.

All cases use copies of the real fixtures; "original" directories are symlinks into the
read-only fixtures, as the transaction materializes them from the vault.
"""
import json
import os
import shutil
import struct
import time
from pathlib import Path

import pytest
from conftest import real
from tensorboard.compat.proto import event_pb2

from tb_footprint_plugin.scan import tfrecord
from tb_footprint_plugin.verify import dashboard
from tb_footprint_plugin.verify import (
    Expectations,
    check_event_files,
    data_server_binary,
    read_view,
    records_subsequence,
    verify_reduction,
)

needs_rust = pytest.mark.skipif(
    data_server_binary() is None, reason="tensorboard-data-server binary not available"
)
BOTH = ("python", "rust")
KERAS = "tf/keras_profiled/train"
HIST_TAG = "small_cnn/conv1/kernel/histogram"  # 5 points in the Keras fixture


@pytest.fixture(autouse=True)
def _full_read_path(monkeypatch):
    """These tests are of the full read (both backends keep every point, routes crawled on
    both), which runs of more than ``dashboard.FULL_READ_BYTES`` (1 MB) no longer take: their
    fixtures are a few MB. The big-run path is asked for where a test passes
    ``full_read_bytes=0``."""
    monkeypatch.setattr(dashboard, "FULL_READ_BYTES", 64 << 20)


# --- helpers -----------------------------------------------------------------------------


def event_names(run_dir: Path) -> list:
    return sorted(n for n in os.listdir(run_dir) if "tfevents" in n and (run_dir / n).is_file())


def link_original(name: str, dest: Path) -> Path:
    """An original run as the caller materializes it: links with the original names."""
    src = real(name)
    dest.mkdir(parents=True)
    for n in event_names(src):
        os.symlink(src / n, dest / n)
    return dest


def copy_events(name: str, dest: Path) -> Path:
    """A writable copy of a fixture run's own event files (no subdirectories)."""
    src = real(name)
    dest.mkdir(parents=True)
    for n in event_names(src):
        shutil.copyfile(src / n, dest / n)
    return dest


def main_event_file(run_dir: Path) -> Path:
    """The largest event file of a run (the one with the summaries)."""
    return max((run_dir / n for n in event_names(run_dir)), key=lambda p: p.stat().st_size)


def rewrite(path: Path, edit) -> int:
    """Rewrite an event file record by record; ``edit(i, event)`` returns the event to
    write (re-serialized), ``None`` to drop it, or ``True`` to keep the raw bytes.
    Returns how many records were changed or dropped."""
    out = path.with_name(path.name + ".tmp")
    changed = 0
    with open(out, "wb") as f, tfrecord.RecordReader(str(path)) as reader:
        writer = tfrecord.RecordWriter(f)
        for i, rec in enumerate(reader):
            result = edit(i, event_pb2.Event.FromString(rec.data))
            if result is True:
                writer.write(rec.data)
                continue
            changed += 1
            if result is not None:
                writer.write(result.SerializeToString())
    os.replace(out, path)
    return changed


def value_tag(event) -> str:
    return event.summary.value[0].tag if event.HasField("summary") and event.summary.value else ""


def nth_of_tag(tag: str, n: int):
    """An edit predicate matching the ``n``-th event of ``tag`` (0-based); -1 = all."""
    seen = {"count": -1}

    def match(event) -> bool:
        if value_tag(event) != tag:
            return False
        seen["count"] += 1
        return n == -1 or seen["count"] == n

    return match


def failed_text(result) -> str:
    return "\n".join(result.failed)


# --- Expectations ------------------------------------------------------------------------


def test_protected_plugins_are_always_identical():
    for plugin in ("scalars", "hparams", "text"):
        with pytest.raises(ValueError, match=plugin):
            Expectations(plugin_modes={plugin: "subset"})
        assert Expectations(default_mode="removed").mode_for(plugin) == "identical"
    Expectations(plugin_modes={"scalars": "identical"})  # saying it explicitly is fine
    with pytest.raises(ValueError):
        Expectations(plugin_modes={"images": "sometimes"})
    with pytest.raises(ValueError):
        Expectations(graph="subset")
    assert Expectations(graph="removed").mode_for("graphs") == "removed"
    assert Expectations().mode_for("images") == "identical"


# --- records -----------------------------------------------------------------------------


def test_record_check_clean_fixture(tmp_path):
    run = link_original("tf/summary_mix", tmp_path / "orig")
    (check,) = check_event_files(str(run))
    assert check.ok and check.records > 10000 and check.size > 0


def test_records_subsequence(tmp_path):
    orig = link_original("tf/keras_profiled/train", tmp_path / "orig")
    red = copy_events("tf/keras_profiled/train", tmp_path / "red")
    f = main_event_file(red)
    is_hist = nth_of_tag(HIST_TAG, 2)
    assert rewrite(f, lambda i, e: None if is_hist(e) else True) == 1

    ok, msg = records_subsequence(str(orig), str(red))
    assert ok, msg
    ok, msg = records_subsequence(str(main_event_file(orig)), str(f))
    assert ok, msg

    # Swapping two records breaks the order.
    with tfrecord.RecordReader(str(f)) as reader:
        records = [r.data for r in reader]
    records[5], records[6] = records[6], records[5]
    with open(f, "wb") as out:
        w = tfrecord.RecordWriter(out)
        for r in records:
            w.write(r)
    ok, msg = records_subsequence(str(orig), str(red))
    assert not ok and "offset" in msg


# --- views -------------------------------------------------------------------------------


def test_python_view_dashboard_config_and_store_all(tmp_path):
    run = link_original("tf/summary_mix", tmp_path / "orig")
    dash = read_view(str(run), "python")
    assert dash.run_present and not dash.errors
    # The dashboard's reservoir: 1000 scalars per tag, 10 images per tag.
    assert len(dash.plugins["scalars"]["loss"].points) == 1000
    assert len(dash.plugins["images"]["samples/generated"].points) == 10
    full = read_view(str(run), "python", store_all=True)
    assert len(full.plugins["scalars"]["loss"].points) == 2000
    assert full.counts()["scalars"] == (8, 12080)
    assert full.plugins["scalars"]["loss"].display_steps is not None
    assert len(full.plugins["scalars"]["loss"].display_steps) == 1000
    assert full.graph and full.graph == dash.graph
    step, wall_time, value = full.plugins["scalars"]["loss"].points[0]
    assert isinstance(step, int) and isinstance(wall_time, float) and isinstance(value, float)


def test_view_ignores_subdirectories_and_missing_dirs(tmp_path):
    run = link_original("torch/profiled", tmp_path / "orig")
    os.symlink(real("torch/profiled") / "1795998068.7669468", run / "1795998068.7669468")
    view = read_view(str(run), "python")
    assert view.run_present and "hparams" not in view.plugins  # hparams live in the sub-run
    gone = read_view(str(tmp_path / "nope"), "python")
    assert not gone.run_present and not gone.plugins


@needs_rust
def test_rust_view_default_sampling(tmp_path):
    run = link_original("tf/summary_mix", tmp_path / "orig")
    view = read_view(str(run), "rust")
    assert view.run_present and not view.errors, view.errors
    assert len(view.plugins["scalars"]["loss"].points) == 1000
    assert len(view.plugins["images"]["samples/generated"].points) == 10
    assert len(view.plugins["histograms"]["weights/w1"].points) == 100
    assert view.graph == read_view(str(run), "python").graph


# --- verify_reduction: identical copies --------------------------------------------------


@needs_rust
@pytest.mark.parametrize("name", ["tf/summary_mix", "tf/keras_profiled/train", "torch/profiled"])
def test_identical_copy_verifies(tmp_path, name):
    orig = link_original(name, tmp_path / "orig")
    red = copy_events(name, tmp_path / "red")
    start = time.monotonic()
    result = verify_reduction(str(orig), str(red), backends=BOTH)
    elapsed = time.monotonic() - start
    assert result.ok, failed_text(result)
    assert result.backends == ["python", "rust"]
    assert result.scalar_series
    for tag, series in result.scalar_series.items():
        assert 0 < len(series["before"]) <= 200 and series["before"] == series["after"]
    d = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert d["ok"] and d["checks"]
    print(f"\n{name}: verified in {elapsed:.2f}s")
    if name == "tf/summary_mix":
        lines = [c.detail for c in result.checks]
        assert "scalars: 8 tags, 12080 points identical (python, rust)" in lines
        # the same run by the big-run path (what its 3.6 MB now take by default): every record
        # proven byte-identical instead
        big = verify_reduction(str(orig), str(red), backends=BOTH, full_read_bytes=0)
        assert big.ok, failed_text(big)
        assert ("record subsequence: 12911 records, each byte-identical to an original record, in order"
                in [c.detail for c in big.checks])
        loss = result.scalar_series["loss"]["before"]
        assert loss[0][0] == 0 and loss[-1][0] == result.scalar_series["loss"]["before"][-1][0]


def test_python_only_backend(tmp_path):
    orig = link_original("tf/keras_profiled/train", tmp_path / "orig")
    red = copy_events("tf/keras_profiled/train", tmp_path / "red")
    result = verify_reduction(str(orig), str(red), backends=("python",))
    assert result.ok and result.backends == ["python"]


# --- verify_reduction: failures ----------------------------------------------------------


@needs_rust
def test_changed_tensor_scalar_fails(tmp_path):
    orig = link_original("tf/summary_mix", tmp_path / "orig")
    red = copy_events("tf/summary_mix", tmp_path / "red")
    target = nth_of_tag("loss", 700)
    changed = {}

    def bump(i, e):
        if not target(e):
            return True
        t = e.summary.value[0].tensor
        (old,) = struct.unpack("<f", t.tensor_content)
        t.tensor_content = struct.pack("<f", old + 0.5)
        changed["step"] = e.step
        return e

    assert rewrite(main_event_file(red), bump) == 1
    result = verify_reduction(str(orig), str(red), backends=BOTH)
    assert not result.ok
    scalar_lines = [f for f in result.failed if f.startswith("scalars")]
    assert scalar_lines, failed_text(result)
    assert "'loss'" in scalar_lines[0] and f"step {changed['step']}" in scalar_lines[0]
    assert "python" in failed_text(result) and "rust" in failed_text(result)
    assert any(f.startswith("record subsequence") for f in result.failed)


def test_changed_simple_value_scalar_fails(tmp_path):
    orig = link_original("torch/profiled", tmp_path / "orig")
    red = copy_events("torch/profiled", tmp_path / "red")
    target = nth_of_tag("train/loss", 150)

    def bump(i, e):
        if not target(e):
            return True
        e.summary.value[0].simple_value += 1.0
        return e

    assert rewrite(main_event_file(red), bump) == 1
    result = verify_reduction(str(orig), str(red), backends=("python",))
    assert not result.ok
    assert any(f.startswith("scalars") and "'train/loss'" in f for f in result.failed), \
        failed_text(result)


@pytest.fixture
def dropped_histogram(tmp_path):
    """keras train run with one (middle) histogram record of one tag dropped."""
    orig = link_original("tf/keras_profiled/train", tmp_path / "orig")
    red = copy_events("tf/keras_profiled/train", tmp_path / "red")
    target = nth_of_tag(HIST_TAG, 2)
    assert rewrite(main_event_file(red), lambda i, e: None if target(e) else True) == 1
    return str(orig), str(red)


@needs_rust
def test_dropped_histogram_fails_identical(dropped_histogram):
    result = verify_reduction(*dropped_histogram, backends=BOTH)
    assert not result.ok
    lines = [f for f in result.failed if f.startswith("histograms")]
    assert lines and f"{HIST_TAG!r}" in lines[0], failed_text(result)
    assert not any(f.startswith("scalars") for f in result.failed)
    assert not any(f.startswith("record") for f in result.failed)  # a dropped record is fine


@needs_rust
@pytest.mark.parametrize("mode", ["subset", "removed"])
def test_dropped_histogram_passes_subset_modes(dropped_histogram, mode):
    result = verify_reduction(
        *dropped_histogram, Expectations(plugin_modes={"histograms": mode}), backends=BOTH
    )
    assert result.ok, failed_text(result)


@needs_rust
def test_dropped_histogram_changes_rust_default_view(dropped_histogram):
    # Rust stores up to 100 histograms per tag, so its default view lost a point;
    # Python's subset-with-first-and-last check alone would pass.
    result = verify_reduction(
        *dropped_histogram,
        Expectations(plugin_modes={"histograms": "default_view_identical"}),
        backends=BOTH,
    )
    assert not result.ok
    lines = [f for f in result.failed if f.startswith("histograms")]
    assert len(lines) == 1 and lines[0].endswith("(rust)"), failed_text(result)


def test_dropped_first_or_all_histograms(tmp_path):
    orig = link_original("tf/keras_profiled/train", tmp_path / "orig")
    red = copy_events("tf/keras_profiled/train", tmp_path / "red")
    first = nth_of_tag(HIST_TAG, 0)
    rewrite(main_event_file(red), lambda i, e: None if first(e) else True)
    subset = Expectations(plugin_modes={"histograms": "subset"})
    result = verify_reduction(str(orig), str(red), subset, backends=("python",))
    assert not result.ok and f"{HIST_TAG!r}" in failed_text(result)

    red2 = copy_events("tf/keras_profiled/train", tmp_path / "red2")
    # Only a tag's first value carries metadata, so find histogram tags by reading.
    hist_tags = set(read_view(str(orig), "python").plugins["histograms"])

    def no_histograms(i, e):
        return None if value_tag(e) in hist_tags else True

    rewrite(main_event_file(red2), no_histograms)
    result = verify_reduction(str(orig), str(red2), subset, backends=("python",))
    assert not result.ok and "missing after reduction" in failed_text(result)
    removed = Expectations(plugin_modes={"histograms": "removed"})
    result = verify_reduction(str(orig), str(red2), removed, backends=("python",))
    assert result.ok, failed_text(result)
    assert any(c.detail.startswith("histograms: 8 tags removed") for c in result.checks)


@needs_rust
def test_images_default_view_identical(tmp_path):
    """Keep only the images the Rust server shows (plus each tag's first record, which
    carries the metadata): the default view is unchanged, the stored content is not."""
    orig = link_original("tf/summary_mix", tmp_path / "orig")
    red = copy_events("tf/summary_mix", tmp_path / "red")
    shown = read_view(str(orig), "rust").plugins["images"]
    keep = {tag: {p[0] for p in tv.points} for tag, tv in shown.items()}
    seen = set()

    def thin(i, e):
        tag = value_tag(e)
        if tag not in keep:
            return True
        if tag not in seen:
            seen.add(tag)
            return True
        return True if e.step in keep[tag] else None

    assert rewrite(main_event_file(red), thin) > 400
    dvi = Expectations(plugin_modes={"images": "default_view_identical"})
    result = verify_reduction(str(orig), str(red), dvi, backends=BOTH)
    assert result.ok, failed_text(result)
    lines = [c.detail for c in result.checks if c.name == "images"]
    assert "images: 2 tags, 20 points default view identical (rust)" in lines
    assert any("first & last kept (python)" in line for line in lines)

    result = verify_reduction(str(orig), str(red), backends=BOTH)  # "identical" by default
    assert not result.ok and result.failed
    for f in result.failed:  # the reader-level line, and the routes naming the images route
        assert f.startswith("images") or f.startswith("routes") and "/data/plugin/images/images?" in f, f


def _legacy_images_run(run_dir: Path, n: int = 60) -> Path:
    """tensorboardX-style legacy image values (no summary metadata) plus a scalar."""
    from tb_footprint_plugin import synth

    with synth.EventWriter(str(run_dir), style="torch") as w:
        for s in range(n):
            wall = 1795990000.0 + s
            w.legacy_image("img", s, synth.make_png(4, 4, seed=s % 3), 4, 4, wall_time=wall)
            if s % 10 == 0:
                w.legacy_simple_value("loss", s, 1.0 / (s + 1), wall_time=wall)
    return run_dir


@needs_rust
def test_default_view_exact_allows_dropped_first_point(tmp_path):
    """``default_view_exact``: Rust's default view identical, Python a subset with the last
    point; the first point may go, a changed Rust-visible point may not."""
    orig = _legacy_images_run(tmp_path / "orig")
    shown = read_view(str(orig), "rust").plugins["images"]["img"]
    steps = [p[0] for p in shown.points]
    assert len(steps) == 10 and 0 not in steps and steps[-1] == 59  # the server hides step 0

    def only_shown(keep_steps):
        def edit(i, e):
            return True if value_tag(e) != "img" or e.step in keep_steps else None
        return edit

    red = copy_events_from(orig, tmp_path / "red")
    assert rewrite(main_event_file(red), only_shown(set(steps))) == 50
    dve = Expectations(plugin_modes={"images": "default_view_exact"})
    result = verify_reduction(str(orig), str(red), dve, backends=BOTH)
    assert result.ok, failed_text(result)
    lines = [c.detail for c in result.checks if c.name == "images"]
    assert "images: 1 tag, 10 points default view identical (rust)" in lines, lines
    assert ("images: 1/1 tags, 10/60 points kept, all original, last kept; first step may differ "
            "on --load_fast=false (python)") in lines, lines
    # the stricter mode requires the first point on Python
    dvi = Expectations(plugin_modes={"images": "default_view_identical"})
    result = verify_reduction(str(orig), str(red), dvi, backends=("python",))
    assert not result.ok and "first point (step 0) was not kept" in failed_text(result)

    # a Rust-visible point dropped: the default view changes
    red2 = copy_events_from(orig, tmp_path / "red2")
    rewrite(main_event_file(red2), only_shown(set(steps) - {steps[4]}))
    result = verify_reduction(str(orig), str(red2), dve, backends=BOTH)
    assert not result.ok
    lines = [f for f in result.failed if f.startswith("images")]
    assert len(lines) == 1 and lines[0].startswith("images [default_view_exact]"), failed_text(result)
    assert lines[0].endswith("(rust)"), failed_text(result)

    # the last point dropped: fails on Python too
    red3 = copy_events_from(orig, tmp_path / "red3")
    rewrite(main_event_file(red3), only_shown(set(steps) - {59}))
    result = verify_reduction(str(orig), str(red3), dve, backends=("python",))
    assert not result.ok and "last point (step 59) was not kept" in failed_text(result)


def copy_events_from(src: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    for n in event_names(src):
        shutil.copyfile(src / n, dest / n)
    return dest


def test_flipped_byte_fails_record_check(tmp_path):
    orig = link_original("tf/keras_profiled/train", tmp_path / "orig")
    red = copy_events("tf/keras_profiled/train", tmp_path / "red")
    f = main_event_file(red)
    with tfrecord.RecordReader(str(f)) as reader:
        recs = list(reader)
    victim = recs[len(recs) // 2]
    pos = victim.offset + victim.framed_size - 8  # inside the record's data
    data = bytearray(f.read_bytes())
    data[pos] ^= 0x40
    f.write_bytes(bytes(data))

    (check,) = check_event_files(str(red))
    assert check.status == "corrupt"
    assert victim.offset <= check.error_offset < victim.offset + victim.framed_size
    result = verify_reduction(str(orig), str(red), backends=("python",))
    assert not result.ok
    line = next(x for x in result.failed if x.startswith("records"))
    assert f.name in line and f"offset {check.error_offset}" in line


@needs_rust
def test_corrupt_original_carried_over_unchanged_is_allowed(tmp_path):
    orig = copy_events("tf/keras_profiled/train", tmp_path / "orig")
    f = main_event_file(orig)
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))
    red = tmp_path / "red"
    red.mkdir()
    shutil.copyfile(f, red / f.name)
    result = verify_reduction(str(orig), str(red), backends=BOTH)
    assert result.ok, failed_text(result)
    records_line = next(c.detail for c in result.checks if c.name == "records")
    assert "carried over unchanged" in records_line


@needs_rust
def test_missing_event_file_fails(tmp_path):
    orig = link_original("tf/summary_mix", tmp_path / "orig")
    red = tmp_path / "red"
    red.mkdir()
    (red / "notes.txt").write_text("not an event file")
    result = verify_reduction(str(orig), str(red), backends=BOTH)
    assert not result.ok
    line = next(f for f in result.failed if f.startswith("run present"))
    assert "MISSING" in line and "python" in line and "rust" in line
    assert result.scalar_series["loss"]["after"] == []


# --- reader failures are findings, with bounded waits ------------------------------------


def fake_server(tmp_path: Path, body: str) -> str:
    script = tmp_path / "fake-data-server"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


def test_rust_server_that_cannot_start_fails_verification(tmp_path, monkeypatch):
    from tb_footprint_plugin.formats import views

    monkeypatch.setattr(views, "data_server_binary",
                        lambda: fake_server(tmp_path, "echo 'bad logdir' >&2; exit 8"))
    orig = link_original(KERAS, tmp_path / "orig")
    red = copy_events(KERAS, tmp_path / "red")
    result = verify_reduction(str(orig), str(red), backends=BOTH)
    assert not result.ok
    line = next(f for f in result.failed if f.startswith("reader errors (rust)"))
    assert "exited with 8" in line and "bad logdir" in line
    # The Python backend still compared everything, and passed.
    assert any(c.ok and c.detail.endswith("(python)") and c.name == "scalars"
               for c in result.checks)


def test_rust_server_that_never_answers_times_out(tmp_path, monkeypatch):
    from tb_footprint_plugin.formats import views

    # Never writes a port file; exits when its stdin closes, like --die-after-stdin.
    monkeypatch.setattr(views, "data_server_binary", lambda: fake_server(tmp_path, "cat >/dev/null"))
    orig = link_original(KERAS, tmp_path / "orig")
    start = time.monotonic()
    view = read_view(str(orig), "rust", timeout_s=1.0)
    assert time.monotonic() - start < 10
    assert view.fatal and "VerifyTimeout" in view.fatal and not view.run_present


def test_no_reader_is_never_a_pass(tmp_path, monkeypatch):
    from tb_footprint_plugin.formats import views

    monkeypatch.setattr(views, "data_server_binary", lambda: None)
    orig = link_original(KERAS, tmp_path / "orig")
    red = copy_events(KERAS, tmp_path / "red")
    result = verify_reduction(str(orig), str(red), backends=("rust",))
    assert not result.ok and result.backends == []
    assert any("skipped" in c.detail for c in result.checks)
    # With Python available too, a missing binary is only a note: TensorBoard falls back.
    result = verify_reduction(str(orig), str(red), backends=BOTH)
    assert result.ok and result.backends == ["python"]
