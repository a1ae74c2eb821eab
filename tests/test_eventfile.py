"""eventfile: per-record categorization, checked against real files and an independent reference."""
from __future__ import annotations

import json
import random
import shutil
import struct
from collections import Counter
from pathlib import Path

import pytest
from conftest import real, real_event_files
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

from tb_footprint_plugin.scan import categories as C
from tb_footprint_plugin.scan import eventfile
from tb_footprint_plugin.scan import tfrecord
from tb_footprint_plugin.scan.eventfile import EventFileStats, event_file_stats
from tb_footprint_plugin.scan.tfrecord import RecordWriter, frame

LEGACY = {"simple_value": "scalars", "histo": "histograms", "image": "images", "audio": "audio"}
FIXED = {
    "file_version": C.FILE_VERSION,
    "graph_def": C.GRAPH_DEF,
    "meta_graph_def": C.META_GRAPH_DEF,
    "tagged_run_metadata": C.TAGGED_RUN_METADATA,
    "session_log": C.SESSION_LOG,
}


# --- an independent reference: full event_pb2 parse of every record --------------------------
def reference(path) -> dict:
    """The documented rules, applied naively (framing via TensorBoard's reader when the file is ok)."""
    raw = Path(path).read_bytes()
    pos, records = 0, []
    while pos + 16 <= len(raw):
        (n,) = struct.unpack_from("<Q", raw, pos)
        records.append((raw[pos + 12 : pos + 12 + n], n + 16))
        pos += n + 16
    assert pos == len(raw), "reference handles undamaged files only"
    fixed, tags, bindings = {}, {}, {}

    def add(d, key, nbytes, step):
        st = d.setdefault(key, [0, 0, None, None])
        st[0] += nbytes
        st[1] += 1
        if step is not None:
            st[2] = step if st[2] is None else min(st[2], step)
            st[3] = step if st[3] is None else max(st[3], step)

    for data, framed in records:
        try:
            ev = event_pb2.Event.FromString(data)
        except Exception:
            add(fixed, C.EVENTS_OTHER, framed, None)
            continue
        what = ev.WhichOneof("what")
        values = list(ev.summary.value) if what == "summary" else []
        if not values:
            add(fixed, FIXED.get(what, C.EVENTS_OTHER), framed, ev.step)
            continue
        weights = [v.ByteSize() for v in values]
        total = sum(weights)
        shares = [framed * w // total if total else 0 for w in weights[:-1]]
        shares.append(framed - sum(shares))
        for v, share in zip(values, shares):
            if v.tag not in bindings:
                plugin = LEGACY.get(v.WhichOneof("value")) or (
                    v.metadata.plugin_data.plugin_name if v.HasField("metadata") else ""
                )
                if plugin:
                    bindings[v.tag] = plugin
            add(tags.setdefault(bindings.get(v.tag, ""), {}), v.tag, share, ev.step)
    return {"fixed": fixed, "tags": tags, "bindings": bindings}


def as_comparable(stats: EventFileStats) -> dict:
    def flat(st):
        return [st.bytes, st.records, st.min_step, st.max_step]

    return {
        "fixed": {k: flat(v) for k, v in stats.fixed.items()},
        "tags": {p: {t: flat(s) for t, s in tags.items()} for p, tags in stats.tags.items()},
        "bindings": dict(stats.bindings),
    }


def check_against_reference(path) -> EventFileStats:
    stats = event_file_stats(str(path))
    assert stats.status == "ok", stats.warning
    assert as_comparable(stats) == reference(path)
    assert sum(stats.category_bytes().values()) == stats.size == Path(path).stat().st_size
    return stats


# --- event builders -----------------------------------------------------------------------------
def scalar_tensor(x: float):
    return tensor_pb2.TensorProto(
        dtype=types_pb2.DT_FLOAT, tensor_shape=tensor_shape_pb2.TensorShapeProto(), tensor_content=struct.pack("<f", x)
    )


def meta(plugin: str):
    return summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=plugin))


def value(tag, plugin=None, kind="tensor", x=0.5, size=8):
    v = summary_pb2.Summary.Value(tag=tag)
    if kind == "tensor":
        v.tensor.CopyFrom(scalar_tensor(x))
    elif kind == "simple_value":
        v.simple_value = x
    elif kind == "histo":
        v.histo.CopyFrom(summary_pb2.HistogramProto(min=0, max=x, num=size, bucket=[1.0] * size, bucket_limit=[x] * size))
    elif kind == "image":
        v.image.CopyFrom(summary_pb2.Summary.Image(height=4, width=4, colorspace=3, encoded_image_string=b"\x89PNG" * size))
    elif kind == "audio":
        v.audio.CopyFrom(summary_pb2.Summary.Audio(sample_rate=8000, num_channels=1, encoded_audio_string=b"RIFF" * size))
    elif kind == "none":
        pass
    if plugin is not None:
        v.metadata.CopyFrom(meta(plugin))
    return v


def summary_event(step, *values, wall=1.7e9):
    return event_pb2.Event(wall_time=wall, step=step, summary=summary_pb2.Summary(value=list(values)))


def write_events(path, events) -> bytes:
    with open(path, "wb") as f:
        w = RecordWriter(f)
        for ev in events:
            w.write(ev if isinstance(ev, bytes) else ev.SerializeToString())
    return Path(path).read_bytes()


def tag_bytes(stats, plugin, tag):
    return stats.tags[plugin][tag].bytes


# --- real fixtures --------------------------------------------------------------------------------
def copy_fixture(tmp_path, rel):
    src = real(rel)
    dst = tmp_path / src.name
    shutil.copyfile(src, dst)
    return dst


def plugins_of(stats):
    return {p: sorted(tags) for p, tags in stats.tags.items()}


def records_per_plugin(stats):
    return {p: sum(s.records for s in tags.values()) for p, tags in stats.tags.items()}


def test_real_tf_summary_mix(tmp_path):
    path = copy_fixture(tmp_path, "tf/summary_mix/events.out.tfevents.1795998045.vm.25654.0.v2")
    stats = check_against_reference(path)
    assert set(stats.tags) == {
        "scalars",
        "histograms",
        "images",
        "audio",
        "text",
        "hparams",
        "graph_run_metadata",
        "graph_run_metadata_graph",
    }
    assert len(stats.tags["scalars"]) == 8
    assert records_per_plugin(stats) == {
        "scalars": 12080,
        "histograms": 300,
        "images": 500,
        "audio": 5,
        "text": 20,
        "hparams": 2,
        "graph_run_metadata": 1,
        "graph_run_metadata_graph": 1,
    }
    assert plugins_of(stats)["hparams"] == ["_hparams_/experiment", "_hparams_/session_start_info"]
    assert plugins_of(stats)["graph_run_metadata"] == ["step_fn_profile"]
    assert {k: v.records for k, v in stats.fixed.items()} == {C.FILE_VERSION: 1, C.GRAPH_DEF: 1}
    assert stats.tags["scalars"]["loss"].min_step == 0 and stats.tags["scalars"]["loss"].max_step == 1999
    cats = stats.category_bytes()
    assert sum(cats.values()) == stats.size and cats[C.IMAGES] > cats[C.SCALARS]


def test_real_torch_profiled(tmp_path):
    path = copy_fixture(tmp_path, "torch/profiled/events.out.tfevents.1795998065.vm.25684.0")
    stats = check_against_reference(path)
    # PyTorch writes legacy simple_value / histo / image values (no metadata) and a text tensor
    assert records_per_plugin(stats) == {"scalars": 1200, "histograms": 300, "images": 12, "text": 3}
    assert plugins_of(stats)["scalars"] == ["perf/step_time_ms", "train/accuracy", "train/loss", "train/lr"]
    assert {k: v.records for k, v in stats.fixed.items()} == {
        C.FILE_VERSION: 1,
        C.GRAPH_DEF: 1,  # add_graph
        C.TAGGED_RUN_METADATA: 1,
    }
    hparams = check_against_reference(
        copy_fixture(tmp_path, "torch/profiled/1795998068.7669468/events.out.tfevents.1795998068.vm.25684.1")
    )
    assert plugins_of(hparams) == {
        "hparams": ["_hparams_/experiment", "_hparams_/session_end_info", "_hparams_/session_start_info"],
        "scalars": ["hparam/accuracy", "hparam/final_loss"],
    }


def test_real_keras_profiled(tmp_path):
    train = check_against_reference(
        copy_fixture(tmp_path, "tf/keras_profiled/train/events.out.tfevents.1795998030.vm.25428.0.v2")
    )
    assert set(train.tags) == {"scalars", "histograms", "images", "graph_keras_model", "graph_run_metadata_graph"}
    assert plugins_of(train)["graph_keras_model"] == ["keras"]
    assert plugins_of(train)["graph_run_metadata_graph"] == ["batch_6"]
    assert train.tags["scalars"]["batch_loss"].records == 640
    assert len(train.tags["histograms"]) == 8 and len(train.tags["images"]) == 7
    validation = check_against_reference(
        copy_fixture(tmp_path, "tf/keras_profiled/validation/events.out.tfevents.1795998031.vm.25428.1.v2")
    )
    assert plugins_of(validation) == {
        "scalars": ["epoch_accuracy", "epoch_loss", "evaluation_accuracy_vs_iterations", "evaluation_loss_vs_iterations"]
    }


def test_every_real_event_file_matches_reference_and_sums(tmp_path):
    for i, src in enumerate(real_event_files()):
        dst = tmp_path / f"{i}_{src.name}"
        shutil.copyfile(src, dst)
        check_against_reference(dst)


# --- plugin rules ----------------------------------------------------------------------------------
def test_legacy_tf1_values_map_by_type(tmp_path):
    events = [event_pb2.Event(wall_time=1.0, file_version="brain.Event:2")]
    for step in range(60):
        events.append(summary_event(step, value("loss", kind="simple_value", x=step)))
        events.append(summary_event(step, value("weights", kind="histo", size=20)))
        if step % 10 == 0:
            events.append(summary_event(step, value("input", kind="image", size=300)))
            events.append(summary_event(step, value("sound", kind="audio", size=500)))
    path = tmp_path / "events.out.tfevents.tf1"
    write_events(path, events)
    stats = check_against_reference(path)
    assert plugins_of(stats) == {"scalars": ["loss"], "histograms": ["weights"], "images": ["input"], "audio": ["sound"]}
    assert stats.tags["scalars"]["loss"].records == 60
    assert (stats.tags["scalars"]["loss"].min_step, stats.tags["scalars"]["loss"].max_step) == (0, 59)
    assert stats.bindings == {"loss": "scalars", "weights": "histograms", "input": "images", "sound": "audio"}


def test_metadata_on_first_value_binds_the_tag(tmp_path):
    events = [summary_event(0, value("acc", plugin="scalars"))]
    events += [summary_event(s, value("acc", x=s / 100)) for s in range(1, 200)]
    path = tmp_path / "events.out.tfevents.first"
    data = write_events(path, events)
    stats = check_against_reference(path)
    assert plugins_of(stats) == {"scalars": ["acc"]}
    assert stats.tags["scalars"]["acc"].records == 200 and tag_bytes(stats, "scalars", "acc") == len(data)


def test_first_binding_wins_and_empty_plugin_name_does_not_bind(tmp_path):
    events = []
    for s in range(100):
        events.append(summary_event(s, value("a", plugin="" if s < 5 else ("text" if s < 50 else "scalars"))))
        events.append(summary_event(s, value("b", plugin="scalars" if s == 0 else "images")))
    path = tmp_path / "events.out.tfevents.bind"
    write_events(path, events)
    stats = check_against_reference(path)
    assert stats.bindings == {"a": "text", "b": "scalars"}
    assert stats.tags[""]["a"].records == 5 and stats.tags["text"]["a"].records == 95
    assert stats.tags["scalars"]["b"].records == 100


def test_tag_without_metadata_is_unresolved(tmp_path):
    events = [summary_event(s, value("orphan", x=s)) for s in range(100)]
    path = tmp_path / "events.out.tfevents.orphan"
    data = write_events(path, events)
    stats = check_against_reference(path)
    assert plugins_of(stats) == {"": ["orphan"]} and stats.bindings == {}
    assert stats.category_bytes() == {C.EVENTS_OTHER: len(data)}
    assert stats.category_bytes({"orphan": "scalars"}) == {"scalars": len(data)}


def test_values_before_the_tags_metadata_resolve_through_the_files_own_bindings(tmp_path):
    events = [summary_event(s, value("late")) for s in range(60)]
    events += [summary_event(60, value("late", plugin="scalars"))]
    events += [summary_event(s, value("late")) for s in range(61, 100)]
    path = tmp_path / "events.out.tfevents.late"
    data = write_events(path, events)
    stats = check_against_reference(path)
    assert stats.tags[""]["late"].records == 60 and stats.tags["scalars"]["late"].records == 40
    assert stats.category_bytes() == {"scalars": len(data)}


def test_custom_plugin_names_are_kept_verbatim(tmp_path):
    names = ["graph_keras_model", "graph_run_metadata", "graph_run_metadata_graph", "hparams", "text", "pr_curves", "custom_scalars", "my.plugin/v2"]
    events = [summary_event(s, value(f"t{i}", plugin=n)) for s in range(10) for i, n in enumerate(names)]
    path = tmp_path / "events.out.tfevents.custom"
    write_events(path, events)
    stats = check_against_reference(path)
    assert set(stats.tags) == set(names)


def test_multi_value_events_are_split_exactly(tmp_path):
    big = value("big", plugin="histograms", kind="histo", size=50)
    small = value("small", plugin="scalars")
    mid = value("mid", kind="image", size=20)
    ev = summary_event(7, small, big, mid)
    path = tmp_path / "events.out.tfevents.multi"
    data = write_events(path, [ev])
    framed = len(data)
    sizes = [small.ByteSize(), big.ByteSize(), mid.ByteSize()]
    shares = [framed * s // sum(sizes) for s in sizes[:2]]
    stats = check_against_reference(path)
    assert tag_bytes(stats, "scalars", "small") == shares[0]
    assert tag_bytes(stats, "histograms", "big") == shares[1]
    assert tag_bytes(stats, "images", "mid") == framed - sum(shares)
    assert stats.records == 1 and all(s.records == 1 for t in stats.tags.values() for s in t.values())


def test_non_summary_events(tmp_path):
    events = [
        event_pb2.Event(wall_time=1, file_version="brain.Event:2"),
        event_pb2.Event(wall_time=2, step=1, graph_def=b"\x0a\x03abc" * 100),
        event_pb2.Event(wall_time=3, step=2, meta_graph_def=b"meta" * 10),
        event_pb2.Event(wall_time=4, step=3, tagged_run_metadata=event_pb2.TaggedRunMetadata(tag="t", run_metadata=b"rm")),
        event_pb2.Event(wall_time=5, step=4, session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)),
        event_pb2.Event(wall_time=6, step=5, log_message=event_pb2.LogMessage(message="hi")),
        event_pb2.Event(wall_time=7, step=6, source_metadata=event_pb2.SourceMetadata(writer="me")),
        event_pb2.Event(),
        event_pb2.Event(wall_time=8, step=9, summary=summary_pb2.Summary()),
    ]
    path = tmp_path / "events.out.tfevents.fixed"
    data = write_events(path, events)
    stats = check_against_reference(path)
    assert {k: v.records for k, v in stats.fixed.items()} == {
        C.FILE_VERSION: 1,
        C.GRAPH_DEF: 1,
        C.META_GRAPH_DEF: 1,
        C.TAGGED_RUN_METADATA: 1,
        C.SESSION_LOG: 1,
        C.EVENTS_OTHER: 4,
    }
    assert stats.fixed[C.GRAPH_DEF].bytes == len(frame(events[1].SerializeToString()))
    assert (stats.fixed[C.EVENTS_OTHER].min_step, stats.fixed[C.EVENTS_OTHER].max_step) == (0, 9)
    assert sum(stats.category_bytes().values()) == len(data)


def test_unparseable_record_is_other_with_a_warning(tmp_path):
    events = [summary_event(s, value("x", plugin="scalars")) for s in range(100)]
    events.insert(50, b"\xff\xff\xff not a protobuf")
    path = tmp_path / "events.out.tfevents.junk"
    write_events(path, events)
    stats = event_file_stats(str(path))
    assert stats.status == "ok"
    assert stats.fixed[C.EVENTS_OTHER].bytes == len(frame(b"\xff\xff\xff not a protobuf"))
    assert str(path) in stats.warning and "not parseable" in stats.warning
    assert stats.tags["scalars"]["x"].records == 100
    assert sum(stats.category_bytes().values()) == stats.size


# --- damaged and odd files ------------------------------------------------------------------------------
def scalar_file(tmp_path, n=300, name="events.out.tfevents.s"):
    events = [event_pb2.Event(wall_time=1.0, file_version="brain.Event:2")]
    events += [summary_event(s, value("loss", plugin="scalars" if s == 0 else None, x=s)) for s in range(n)]
    path = tmp_path / name
    return path, write_events(path, events)


@pytest.mark.parametrize("cut_back", [1, 5, 14, 30])
def test_truncated_tail_is_incomplete(tmp_path, cut_back):
    path, data = scalar_file(tmp_path)
    last_len = len(frame(summary_event(299, value("loss", x=299)).SerializeToString()))
    path.write_bytes(data[:-cut_back])
    stats = event_file_stats(str(path), display_name="run/events.out.tfevents.s")
    assert stats.status == "truncated" and stats.error_offset == len(data) - last_len
    assert stats.fixed[C.EVENTS_INCOMPLETE].bytes == last_len - cut_back
    assert stats.tags["scalars"]["loss"].records == 299
    assert "run/events.out.tfevents.s" in stats.warning
    assert sum(stats.category_bytes().values()) == stats.size == len(data) - cut_back


def test_corrupt_record_makes_the_rest_corrupt(tmp_path):
    path, data = scalar_file(tmp_path)
    offsets = [0]
    for ev in [event_pb2.Event(wall_time=1.0, file_version="brain.Event:2")] + [
        summary_event(s, value("loss", plugin="scalars" if s == 0 else None, x=s)) for s in range(300)
    ]:
        offsets.append(offsets[-1] + len(frame(ev.SerializeToString())))
    bad = bytearray(data)
    bad[offsets[150] + 20] ^= 0x04
    path.write_bytes(bytes(bad))
    stats = event_file_stats(str(path))
    assert stats.status == "corrupt" and stats.error_offset == offsets[150]
    assert stats.fixed[C.EVENTS_CORRUPT].bytes == len(data) - offsets[150]
    assert stats.tags["scalars"]["loss"].records == 149
    assert f"offset {offsets[150]}" in stats.warning and str(path) in stats.warning
    assert sum(stats.category_bytes().values()) == stats.size == len(data)


def test_not_a_tfrecord_file_is_all_corrupt(tmp_path):
    path = tmp_path / "events.out.tfevents.README"
    path.write_text("# notes\nThis is not an event file, just text that happens to match the name.\n")
    stats = event_file_stats(str(path))
    assert stats.status == "corrupt" and stats.error_offset == 0 and stats.records == 0
    assert stats.category_bytes() == {C.EVENTS_CORRUPT: path.stat().st_size}
    assert str(path) in stats.warning and "not a TFRecord" in stats.warning


def test_zero_length_file(tmp_path):
    path = tmp_path / "events.out.tfevents.empty"
    path.write_bytes(b"")
    stats = event_file_stats(str(path))
    assert (stats.status, stats.size, stats.records, stats.warning) == ("ok", 0, 0, None)
    assert stats.category_bytes() == {}


def test_unreadable_file(tmp_path):
    import os
    import tempfile

    from test_scan import as_unprivileged  # as root (CI): in a child that dropped to nobody

    root = Path(tempfile.mkdtemp(prefix="tbfp-unreadable-", dir="/tmp"))
    os.chmod(root, 0o755)  # pytest's own tmp root is root's, 0700: the child could not walk it
    path, data = scalar_file(root)
    path.chmod(0)

    def check():
        try:
            open(path, "rb").close()
            raise AssertionError("a chmod-000 file was readable: the test would prove nothing")
        except PermissionError:
            pass
        stats = event_file_stats(str(path), display_name="shown")
        assert stats.status == "unreadable" and stats.size == len(data)
        assert stats.fixed == {} and stats.tags == {}
        assert stats.warning.startswith("shown: unreadable")
        assert stats.category_bytes() == {C.OTHER: len(data)}

    try:
        as_unprivileged(check)
    finally:
        path.chmod(0o644)
        shutil.rmtree(root, ignore_errors=True)


def test_unreadable_simulated(tmp_path, monkeypatch):
    """Same contract without needing a non-root user: the open fails with EACCES."""
    path, data = scalar_file(tmp_path)

    def deny(self):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tfrecord.RecordReader, "_open", deny)
    stats = event_file_stats(str(path))
    assert (stats.status, stats.size, stats.fixed, stats.tags) == ("unreadable", len(data), {}, {})
    assert str(path) in stats.warning and "Permission denied" in stats.warning
    assert stats.category_bytes() == {C.OTHER: len(data)}


def test_dict_round_trip_is_json_safe(tmp_path):
    events = [summary_event(s, value("a", plugin="scalars" if s == 0 else None), value("b", kind="histo")) for s in range(80)]
    events.append(summary_event(80, value("orphan")))
    path = tmp_path / "events.out.tfevents.json"
    data = write_events(path, events)
    path.write_bytes(data[:-3])
    stats = event_file_stats(str(path))
    back = EventFileStats.from_dict(json.loads(json.dumps(stats.to_dict())))
    assert back == stats
    assert back.category_bytes() == stats.category_bytes()


# --- the fast path agrees with the reference on everything ---------------------------------------------
def _odd_record(rng: random.Random) -> bytes:
    """Serialized events in shapes the fast path must hand over to the full parser."""
    v = value("odd", plugin="scalars").SerializeToString()
    summary = b"\x2a" + bytes([len(v) + 2]) + b"\x0a" + bytes([len(v)]) + v
    wall = b"\x09" + struct.pack("<d", 1.5)
    choice = rng.randrange(8)
    if choice == 0:  # step before wall_time
        return b"\x10\x05" + wall + summary
    if choice == 1:  # an unknown trailing field
        return wall + b"\x10\x05" + summary + b"\x58\x01"
    if choice == 2:  # the summary field twice (protobuf merges the values)
        return wall + b"\x10\x06" + summary + summary
    if choice == 3:  # node_name between tag and value
        val = b"\x0a\x03odd\x3a\x01n\x15" + struct.pack("<f", 1.0)
        return wall + b"\x2a" + bytes([len(val) + 2]) + b"\x0a" + bytes([len(val)]) + val
    if choice == 4:  # tag given twice: the last one counts
        val = b"\x0a\x03odd\x15" + struct.pack("<f", 1.0) + b"\x0a\x04odd2"
        return wall + b"\x2a" + bytes([len(val) + 2]) + b"\x0a" + bytes([len(val)]) + val
    if choice == 5:  # metadata, then a second value field (the oneof's last one counts)
        metadata = meta("text").SerializeToString()
        val = b"\x0a\x03odd\x42\x00" + b"\x4a" + bytes([len(metadata)]) + metadata
        val += b"\x15" + struct.pack("<f", 2.0)
        return wall + b"\x2a" + bytes([len(val) + 2]) + b"\x0a" + bytes([len(val)]) + val
    if choice == 6:  # the summary claims fewer bytes than its value: malformed
        return wall + b"\x2a" + bytes([len(v) + 1]) + b"\x0a" + bytes([len(v)]) + v
    return b"\x08\x01"  # garbage: field 1 with the wrong wire type


def random_events(rng: random.Random, n: int) -> list:
    tags = [f"t{i}" for i in range(12)] + ["odd", "odd2", "naïve/ünïcode", "x" * 200, "y" * 1500, ""]
    kinds = ["tensor", "tensor", "tensor", "simple_value", "histo", "image", "audio", "none"]
    plugins = [None, None, None, "scalars", "text", "", "images", "pr_curves"]
    events = [event_pb2.Event(wall_time=1.0, file_version="brain.Event:2")]
    for i in range(n):
        r = rng.random()
        step = rng.choice([i, i, i, 0, 2**40 + i, -i - 1, 2**60])
        if r < 0.85:
            values = [
                value(rng.choice(tags), rng.choice(plugins), rng.choice(kinds), x=rng.random(), size=rng.choice([1, 10, 100, 3000]))
                for _ in range(1 if rng.random() < 0.9 else rng.randint(2, 4))
            ]
            events.append(summary_event(step, *values, wall=rng.choice([1.7e9 + i, 0.0])))
        elif r < 0.95:
            events.append(_odd_record(rng))
        else:
            events.append(
                rng.choice(
                    [
                        event_pb2.Event(wall_time=2, step=step, session_log=event_pb2.SessionLog(status=1)),
                        event_pb2.Event(wall_time=2, step=step, graph_def=b"g" * rng.randint(0, 500)),
                        event_pb2.Event(wall_time=2, log_message=event_pb2.LogMessage(message="m")),
                        event_pb2.Event(),
                    ]
                )
            )
    return events


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("chunk", [None, 4096])
def test_fast_path_matches_reference_on_random_files(tmp_path, monkeypatch, seed, chunk):
    if chunk:
        monkeypatch.setattr(tfrecord, "_CHUNK", chunk)  # many batches: bindings cross batch edges
    rng = random.Random(seed)
    path = tmp_path / "events.out.tfevents.random"
    write_events(path, random_events(rng, 3000))
    check_against_reference(path)


def test_fast_path_is_actually_used(tmp_path, monkeypatch):
    parsed = Counter()
    real = eventfile._Accumulator._parse

    def spy(self, data):
        parsed["n"] += 1
        return real(self, data)

    monkeypatch.setattr(eventfile._Accumulator, "_parse", spy)
    events = [event_pb2.Event(wall_time=1.0, file_version="brain.Event:2")]
    tags = ["loss", "acc", "lr", "layer/1/grad_norm"]
    seen = set()
    for i in range(20000):
        tag = tags[i % 4]
        events.append(summary_event(i // 4, value(tag, plugin=None if tag in seen else "scalars", x=i)))
        seen.add(tag)
    path = tmp_path / "events.out.tfevents.big"
    write_events(path, events)
    stats = event_file_stats(str(path))
    assert sum(s.records for s in stats.tags["scalars"].values()) == 20000
    assert parsed["n"] < 50  # a handful of full parses: learning tags, first metadata


def test_tf2_style_metadata_on_every_value(tmp_path):
    """TF 2.21 actually writes the metadata on every value (see the real fixtures)."""
    events = [summary_event(s, value(t, plugin="scalars", x=s)) for s in range(3000) for t in ("a", "b")]
    path = tmp_path / "events.out.tfevents.every"
    write_events(path, events)
    stats = check_against_reference(path)
    assert stats.tags["scalars"]["a"].records == 3000


def test_tag_matching_is_exact_even_when_hashes_collide(tmp_path, monkeypatch):
    # a hash that only sees the length: every same-length tag collides
    monkeypatch.setattr(eventfile, "_tag_hash", lambda tl, words: tl.astype("uint64"))
    events = [summary_event(s, value(t, plugin="scalars" if s == 0 else None)) for s in range(300) for t in ("aa", "bb", "cc")]
    path = tmp_path / "events.out.tfevents.collide"
    write_events(path, events)
    stats = check_against_reference(path)
    assert {t: st.records for t, st in stats.tags["scalars"].items()} == {"aa": 300, "bb": 300, "cc": 300}


def test_metadata_only_value_binds_its_tag(tmp_path):
    """PyTorch's add_hparams writes values that carry only metadata (no value field)."""
    events = [summary_event(s, value("loss", plugin="scalars" if s == 0 else None)) for s in range(100)]
    events.insert(50, summary_event(0, value("_hparams_/session_end_info", plugin="hparams", kind="none")))
    events += [summary_event(s, value("_hparams_/session_end_info")) for s in range(100)]
    path = tmp_path / "events.out.tfevents.hp"
    write_events(path, events)
    stats = check_against_reference(path)
    assert stats.tags["hparams"]["_hparams_/session_end_info"].records == 101
