"""Writers of synthetic but faithful TensorBoard and profiler data (demo logdir, tests, benches).

Everything here is deterministic: no clock, host name or pid is ever read; all of them are
parameters with fixed defaults, and all randomness comes from ``random.Random(seed)``.

What "faithful" means, measured against ``/work/shared/fixtures/real`` (real writers' output):

* Event files are framed by TensorBoard's own ``RecordWriter`` and hold ``Event`` protos built
  with TensorBoard's own protos and ``metadata.create_summary_metadata`` helpers, in the shapes
  the real writers use: TF 2.x tensor summaries (scalars as a 4-byte ``tensor_content``,
  30x3 double histograms, ``[w, h, png...]`` image string tensors), TF1/PyTorch legacy
  ``Summary.Value`` fields (``simple_value``, ``histo``, ``image``, ``audio``), ``graph_def``,
  ``meta_graph_def``, ``tagged_run_metadata``, ``session_log`` and hparams.
  Note: TF 2.21 puts the ``SummaryMetadata`` on *every* value (12,080 of 12,080 scalar values in
  ``tf/summary_mix``), so ``metadata="every"`` is the default; ``"first"`` mimics TF1's
  ``FileWriter`` which strips it after the first value of a tag.
* XSpace files (``<host>.xplane.pb``) use the field numbers of ``tsl/profiler/protobuf/xplane.proto``
  and are encoded by a small hand-written protobuf wire encoder, so they can be written without
  xprof installed. ``xplane_proto_classes()`` gives real protobuf classes (from an importable
  ``xplane_pb2`` or from the descriptor compiled into the installed xprof native library) to check
  and cross-encode them; the tests also open the files with xprof's real profile plugin.
* PyTorch traces reproduce kineto's layout (its odd pretty-printing included) and are streamed.

API: ``make_png``, ``make_wav``, ``make_graph_def``, ``make_run_metadata``, ``make_meta_graph_def``,
``keras_model_config``; ``event_file_name``, ``EventWriter``, ``write_profile_empty``;
``build_host_xspace``, ``encode_xspace_wire``, ``encode_xspace_proto``, ``xplane_proto_classes``,
``xspace_bytes``, ``write_xplane``, ``write_trace_json_gz``, ``write_perfetto_trace_json_gz``,
``session_name_for``, ``write_profile_session``; ``torch_trace_name``, ``write_torch_trace``.

Not faithful (by design): values are plausible, not from a real model; the XSpace holds only
host planes (no device/TPU/GPU planes, no HLO modules, so no ``graph_viewer``/``memory_viewer``
tools); xprof's binary caches (``*.SSTABLE``, ``op_stats_v2.pb``) are opaque filler marked stale.
"""
from __future__ import annotations

import calendar
import functools
import gzip
import io
import json
import math
import os
import random
import struct
import time
import wave
import zlib
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from tensorboard.compat.proto import (
    config_pb2,
    event_pb2,
    graph_pb2,
    meta_graph_pb2,
    summary_pb2,
    tensor_pb2,
    tensor_shape_pb2,
    types_pb2,
)
from tensorboard.summary.writer.record_writer import RecordWriter

# --- fixed identities (never read from the machine: determinism) -----------------------------
DEFAULT_HOST = "demo-host"
DEFAULT_PID = 4242
DEFAULT_TIMESTAMP = 1795990000  # 2026-11-29 22:06:40 UTC, the era of the real fixtures
FILE_VERSION = "brain.Event:2"
TF_SOURCE_WRITER = "tensorflow.core.util.events_writer"  # TF's C++ writer
TB_SOURCE_WRITER = "tensorboard.summary.writer.event_file_writer"  # torch / tensorboardX
XPROF_VERSION = "2.24.2"
#: ``cache_version.txt`` of synthetic caches: older (as strings, like xprof compares) than every
#: xprof that writes these caches, so they are always rebuilt rather than read.
STALE_CACHE_VERSION = "2.19.0"

#: Tools the xprof 2.24 plugin lists for a host-only (CPU) XSpace such as ``write_xplane``'s.
HOST_ONLY_TOOLS = (
    "overview_page",
    "trace_viewer@",
    "op_profile",
    "input_pipeline_analyzer",
    "memory_profile",
    "roofline_model",
    "framework_op_stats",
    "hlo_stats",
)


# =============================================================================================
# Small media: PNG and WAV
# =============================================================================================
def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def make_png(width: int, height: int, *, seed: int = 0, channels: int = 3, noise: int = 64) -> bytes:
    """A valid 8-bit PNG: a gradient plus deterministic noise (``noise`` = amplitude, 0..255).

    Noise keeps the image from compressing to nothing, like real activations or samples.
    """
    color_type = {1: 0, 3: 2, 4: 6}[channels]
    rng = random.Random(seed)
    rows = []
    for y in range(height):
        base = (y * 255) // max(1, height - 1)
        noise_row = rng.randbytes(width * channels) if noise else bytes(width * channels)
        row = bytearray(width * channels)
        for i in range(width * channels):
            row[i] = (base + (i // channels) * 7 + noise_row[i] % (noise + 1)) & 0xFF
        rows.append(b"\x00" + bytes(row))  # filter type 0 (None) per scanline
    ihdr = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", zlib.compress(b"".join(rows), 6))
        + _png_chunk(b"IEND", b"")
    )


def make_wav(n_frames: int, *, sample_rate: int = 16000, seed: int = 0, freq: float = 440.0) -> bytes:
    """A 16-bit mono PCM WAV (sine plus a little deterministic noise) via the ``wave`` module."""
    rng = random.Random(seed)
    samples = bytearray()
    for i in range(n_frames):
        v = 0.5 * math.sin(2 * math.pi * freq * i / sample_rate) + rng.uniform(-0.05, 0.05)
        samples += struct.pack("<h", int(max(-1.0, min(1.0, v)) * 32767))
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(bytes(samples))
    return buf.getvalue()


# =============================================================================================
# Protos that go into event files
# =============================================================================================
_TF_OPS = (
    ("Placeholder", 0), ("Conv2D", 2), ("BiasAdd", 2), ("Relu", 1), ("MaxPool", 1),
    ("Reshape", 2), ("MatMul", 2), ("Softmax", 1), ("Identity", 1), ("ReadVariableOp", 1),
)


def make_graph_def(n_nodes: int = 40, *, seed: int = 0) -> graph_pb2.GraphDef:
    """A plausible TF ``GraphDef``: a chain of ops with dtype, shape and ``_output_shapes`` attrs."""
    from tensorboard.compat.proto import attr_value_pb2, node_def_pb2

    rng = random.Random(seed)
    graph = graph_pb2.GraphDef()
    names: List[str] = []
    for i in range(n_nodes):
        op, n_in = _TF_OPS[0] if i == 0 else rng.choice(_TF_OPS[1:])
        node = node_def_pb2.NodeDef(name=f"sequential/layer_{i // 4}/{op}_{i}", op=op,
                                    device="/job:localhost/replica:0/task:0/device:CPU:0")
        node.input.extend(rng.sample(names, min(n_in, len(names))) if names else [])
        node.attr["T"].CopyFrom(attr_value_pb2.AttrValue(type=types_pb2.DT_FLOAT))
        shape = tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=s) for s in (-1, rng.choice((8, 16, 32, 64)))]
        )
        node.attr["_output_shapes"].CopyFrom(
            attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(shape=[shape]))
        )
        graph.node.append(node)
        names.append(node.name)
    graph.versions.producer = 1882
    return graph


def make_run_metadata(n_nodes: int = 40, *, seed: int = 0, with_graph: bool = False) -> config_pb2.RunMetadata:
    """A ``RunMetadata`` with CPU step stats (what ``trace_export``/``add_run_metadata`` store)."""
    rng = random.Random(seed)
    rm = config_pb2.RunMetadata()
    dev = rm.step_stats.dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:0")
    t = 1_700_000_000_000_000
    for i in range(n_nodes):
        dur = rng.randint(5, 900)
        dev.node_stats.add(node_name=f"sequential/layer_{i // 4}/op_{i}", all_start_micros=t,
                           op_end_rel_micros=dur, all_end_rel_micros=dur + 2,
                           timeline_label=f"op_{i} = MatMul(a, b)")
        dev.node_stats[-1].memory.add(allocator_name="cpu", total_bytes=rng.randint(256, 1 << 20))
        t += dur + rng.randint(1, 20)
    if with_graph:
        rm.partition_graphs.add().CopyFrom(make_graph_def(n_nodes, seed=seed))
    return rm


def make_meta_graph_def(n_nodes: int = 40, *, seed: int = 0) -> meta_graph_pb2.MetaGraphDef:
    """A TF1-style ``MetaGraphDef`` wrapping ``make_graph_def``."""
    meta = meta_graph_pb2.MetaGraphDef()
    meta.meta_info_def.tensorflow_version = "1.15.5"
    meta.meta_info_def.tensorflow_git_version = "v1.15.4-39-g3db52be"
    meta.graph_def.CopyFrom(make_graph_def(n_nodes, seed=seed))
    return meta


def keras_model_config(n_layers: int = 4) -> str:
    """A Keras ``Sequential`` model JSON like the one Keras' TensorBoard callback writes."""
    layers = [{"module": "keras.layers", "class_name": "InputLayer",
               "config": {"batch_shape": [None, 28, 28, 1], "dtype": "float32", "name": "input_layer"}}]
    for i in range(n_layers):
        layers.append({"module": "keras.layers", "class_name": "Dense",
                       "config": {"name": f"dense_{i}", "trainable": True, "units": 64 >> (i % 3),
                                  "activation": "relu", "use_bias": True,
                                  "kernel_initializer": {"module": "keras.initializers",
                                                         "class_name": "GlorotUniform",
                                                         "config": {"seed": None}}}})
    return json.dumps({"module": "keras", "class_name": "Sequential",
                       "config": {"name": "sequential", "trainable": True, "layers": layers},
                       "build_config": {"input_shape": [None, 28, 28, 1]}})


def _string_tensor(values: Sequence[bytes], shape: Sequence[int]) -> tensor_pb2.TensorProto:
    return tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=s) for s in shape]
        ),
        string_val=list(values),
    )


def _as_bytes(x: Union[bytes, str]) -> bytes:
    return x.encode("utf-8") if isinstance(x, str) else bytes(x)


# TF's default histogram bucket limits (tensorboardX/torch ``bins="tensorflow"``)
def _tf_default_bucket_limits() -> List[float]:
    pos, v = [], 1e-12
    while v < 1e20:
        pos.append(v)
        v *= 1.1
    return [-x for x in reversed(pos)] + [0.0] + pos


_DEFAULT_LIMITS: Optional[List[float]] = None


def legacy_histogram_proto(values: Sequence[float]) -> summary_pb2.HistogramProto:
    """A ``HistogramProto`` the way tensorboardX/``torch.utils.tensorboard`` build it."""
    import numpy as np

    global _DEFAULT_LIMITS
    if _DEFAULT_LIMITS is None:
        _DEFAULT_LIMITS = _tf_default_bucket_limits()
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    edges = np.asarray([-1.7976931348623157e308] + _DEFAULT_LIMITS + [1.7976931348623157e308])
    counts, limits = np.histogram(arr, bins=edges)
    cum = np.cumsum(np.greater(counts, 0))
    start, end = np.searchsorted(cum, [0, cum[-1] - 1], side="right")
    start, end = int(start), int(end) + 1
    counts = counts[start - 1: end] if start > 0 else np.concatenate([[0], counts[:end]])
    limits = limits[start: end + 1]
    return summary_pb2.HistogramProto(
        min=float(arr.min()), max=float(arr.max()), num=float(arr.size), sum=float(arr.sum()),
        sum_squares=float((arr * arr).sum()), bucket_limit=limits.tolist(), bucket=counts.tolist(),
    )


# =============================================================================================
# Event files
# =============================================================================================
def event_file_name(timestamp: int, host: str = DEFAULT_HOST, pid: int = DEFAULT_PID,
                    index: int = 0, suffix: str = ".v2") -> str:
    """``events.out.tfevents.<ts>.<host>.<pid>.<n><suffix>``: TF 2.x uses ``.v2``, torch none."""
    return "events.out.tfevents.%010d.%s.%s.%s%s" % (timestamp, host, pid, index, suffix)


class _FastRecordWriter(RecordWriter):
    """TensorBoard's ``RecordWriter`` framing, with the C ``google_crc32c`` when available.

    TB's own CRC is a pure-Python loop (~12 MB/s); the bytes are identical either way
    (tests compare both).
    """

    def __init__(self, fileobj: IO[bytes]):
        super().__init__(fileobj)
        try:
            import google_crc32c  # optional, C-accelerated
        except ImportError:  # pragma: no cover - depends on the environment
            self._crc = None
        else:
            self._crc = google_crc32c.value

    def _masked(self, data: bytes) -> int:
        crc = self._crc(data)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    def write(self, data: bytes) -> None:
        if self._crc is None:
            return super().write(data)
        header = struct.pack("<Q", len(data))
        self._writer.write(
            header + struct.pack("<I", self._masked(header)) + data + struct.pack("<I", self._masked(data))
        )


class EventWriter:
    """Writes one event file into ``run_dir`` like TF 2.x (``style="tf"``) or torch (``"torch"``).

    The file name is deterministic (``event_file_name``). Wall times advance by ``tick`` seconds
    per event unless given. ``metadata="every"`` keeps ``SummaryMetadata`` on every value (what
    TF 2.21 and torch's text/hparams do); ``"first"`` keeps it only on a tag's first value (TF1).
    """

    def __init__(self, run_dir: str, *, timestamp: int = DEFAULT_TIMESTAMP, host: str = DEFAULT_HOST,
                 pid: int = DEFAULT_PID, index: int = 0, style: str = "tf",
                 suffix: Optional[str] = None, metadata: str = "every", tick: float = 0.001,
                 file_name: Optional[str] = None):
        if style not in ("tf", "torch"):
            raise ValueError("style must be 'tf' or 'torch'")
        if metadata not in ("every", "first"):
            raise ValueError("metadata must be 'every' or 'first'")
        self.style = style
        self._metadata_policy = metadata
        self._seen_tags: set = set()
        self._tick = tick
        if suffix is None:
            suffix = ".v2" if style == "tf" else ""
        os.makedirs(run_dir, exist_ok=True)
        self.path = os.path.join(run_dir, file_name or event_file_name(timestamp, host, pid, index, suffix))
        self._file = open(self.path, "xb")  # never clobber another writer's file
        self._records = _FastRecordWriter(self._file)
        # TF's C++ writer stamps whole seconds on the first event; TB's writer a float time
        self._clock = float(timestamp)
        self.write_event(event_pb2.Event(
            wall_time=self._clock, file_version=FILE_VERSION,
            source_metadata=event_pb2.SourceMetadata(
                writer=TF_SOURCE_WRITER if style == "tf" else TB_SOURCE_WRITER),
        ))

    # --- plumbing ---------------------------------------------------------------------------
    def __enter__(self) -> "EventWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    @property
    def wall_time(self) -> float:
        """The wall time of the last event written."""
        return self._clock

    def _wall(self, wall_time: Optional[float]) -> float:
        if wall_time is not None:
            self._clock = max(self._clock, wall_time)
            return wall_time
        self._clock += self._tick
        return self._clock

    def write_event(self, event: event_pb2.Event) -> None:
        """Frame and write one ``Event`` as is (maps in sorted order: same bytes in every process)."""
        self._records.write(event.SerializeToString(deterministic=True))

    def _summary(self, step: int, value: summary_pb2.Summary.Value, wall_time: Optional[float]) -> None:
        if value.HasField("metadata"):
            if self._metadata_policy == "first" and value.tag in self._seen_tags:
                value.ClearField("metadata")
            self._seen_tags.add(value.tag)
        self.write_event(event_pb2.Event(wall_time=self._wall(wall_time), step=step,
                                         summary=summary_pb2.Summary(value=[value])))

    # --- TF 2.x tensor summaries ------------------------------------------------------------
    def scalar(self, tag: str, step: int, value: float, wall_time: Optional[float] = None) -> None:
        """``tf.summary.scalar``: a rank-0 DT_FLOAT tensor in ``tensor_content`` (as TF writes it)."""
        from tensorboard.plugins.scalar import metadata as m

        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT,
                                        tensor_shape=tensor_shape_pb2.TensorShapeProto(),
                                        tensor_content=struct.pack("<f", value))
        self._summary(step, summary_pb2.Summary.Value(
            tag=tag, tensor=tensor, metadata=m.create_summary_metadata("", "")), wall_time)

    def histogram(self, tag: str, step: int, values_or_buckets: Sequence[Any], *, buckets: int = 30,
                  wall_time: Optional[float] = None) -> None:
        """``tf.summary.histogram``: raw values (bucketed by TB's own ``histogram_pb``) or
        ``(left, right, count)`` triples."""
        import numpy as np
        from tensorboard.plugins.histogram import metadata as m
        from tensorboard.plugins.histogram import summary_v2
        from tensorboard.util import tensor_util

        seq = list(values_or_buckets)
        if seq and isinstance(seq[0], (tuple, list)):
            tensor = tensor_util.make_tensor_proto(np.asarray(seq, dtype=np.float64))
            value = summary_pb2.Summary.Value(tag=tag, tensor=tensor,
                                              metadata=m.create_summary_metadata("", ""))
        else:
            value = summary_v2.histogram_pb(tag, np.asarray(seq, dtype=np.float64), buckets=buckets).value[0]
        self._summary(step, value, wall_time)

    def image(self, tag: str, step: int, png_bytes: Union[bytes, Sequence[bytes]], w: int, h: int,
              wall_time: Optional[float] = None) -> None:
        """``tf.summary.image``: a DT_STRING ``[w, h, png, ...]`` tensor."""
        from tensorboard.plugins.image import metadata as m

        pngs = [png_bytes] if isinstance(png_bytes, (bytes, bytearray)) else list(png_bytes)
        vals = [str(w).encode(), str(h).encode()] + [bytes(p) for p in pngs]
        self._summary(step, summary_pb2.Summary.Value(
            tag=tag, tensor=_string_tensor(vals, [len(vals)]),
            metadata=m.create_summary_metadata("", "")), wall_time)

    def audio(self, tag: str, step: int, wav_bytes: Union[bytes, Sequence[bytes]], *,
              label: Union[bytes, str] = b"", wall_time: Optional[float] = None) -> None:
        """``tf.summary.audio``: a DT_STRING ``[k, 2]`` tensor of (wav, label)."""
        from tensorboard.plugins.audio import metadata as m

        wavs = [wav_bytes] if isinstance(wav_bytes, (bytes, bytearray)) else list(wav_bytes)
        vals: List[bytes] = []
        for wav in wavs:
            vals += [bytes(wav), _as_bytes(label)]
        meta = m.create_summary_metadata("", "", encoding=m.Encoding.Value("WAV"))
        self._summary(step, summary_pb2.Summary.Value(
            tag=tag, tensor=_string_tensor(vals, [len(wavs), 2]), metadata=meta), wall_time)

    def text(self, tag: str, step: int, text: str, wall_time: Optional[float] = None) -> None:
        """``tf.summary.text`` (rank 0) or torch ``add_text`` (shape ``[1]``), by ``style``."""
        from tensorboard.plugins.text import metadata as m

        shape = [] if self.style == "tf" else [1]
        self._summary(step, summary_pb2.Summary.Value(
            tag=tag, tensor=_string_tensor([text.encode("utf-8")], shape),
            metadata=m.create_summary_metadata("", "")), wall_time)

    def pr_curve(self, tag: str, step: int, labels: Sequence[bool], predictions: Sequence[float], *,
                 num_thresholds: int = 51, wall_time: Optional[float] = None) -> None:
        """A PR-curve summary: DT_FLOAT ``[6, num_thresholds]`` (TP, FP, TN, FN, precision, recall).

        Computed here because TB's ``pr_curve.summary.pb`` imports TensorFlow.
        """
        import numpy as np
        from tensorboard.plugins.pr_curve import metadata as m
        from tensorboard.util import tensor_util

        lab = np.asarray(labels, dtype=bool)
        pred = np.asarray(predictions, dtype=np.float64)
        thresholds = np.linspace(0.0, 1.0, num_thresholds)
        tp = np.array([(lab & (pred >= t)).sum() for t in thresholds], dtype=np.float64)
        fp = np.array([(~lab & (pred >= t)).sum() for t in thresholds], dtype=np.float64)
        tn = (~lab).sum() - fp
        fn = lab.sum() - tp
        precision = tp / np.maximum(1e-7, tp + fp)
        recall = tp / np.maximum(1e-7, tp + fn)
        data = np.stack((tp, fp, tn, fn, precision, recall)).astype(np.float32)
        self._summary(step, summary_pb2.Summary.Value(
            tag=f"{tag}/pr_curves", tensor=tensor_util.make_tensor_proto(data),
            metadata=m.create_summary_metadata(tag, "", num_thresholds)), wall_time)

    def hparams(self, hparams_dict: Mapping[str, Any], metrics: Union[Sequence[str], Mapping[str, float]] = (),
                *, trial_id: Optional[str] = None, start_time_secs: Optional[float] = None,
                wall_time: Optional[float] = None) -> None:
        """hparams: experiment config + session start (TF ``hp.hparams_config``/``hp.hparams``), or
        torch ``add_hparams`` (typed infos, session end info, metric values as simple values)."""
        start = float(start_time_secs if start_time_secs is not None else self._clock)
        if self.style == "tf":
            from tensorboard.plugins.hparams import summary_v2 as hp

            infos = [hp.HParam(k, hp.Discrete([v]) if isinstance(v, (str, bool)) else None)
                     for k, v in hparams_dict.items()]
            config = hp.hparams_config_pb(infos, [hp.Metric(t) for t in metrics], time_created_secs=start)
            session = hp.hparams_pb(dict(hparams_dict), trial_id=trial_id, start_time_secs=start)
            pbs = list(config.value) + list(session.value)
        else:
            pbs = _torch_hparams_values(hparams_dict, list(metrics))
        wt = self._wall(wall_time)
        for value in pbs:
            self._summary(0, _sorted_hparams_content(value), wt)
        if isinstance(metrics, Mapping):
            for tag, v in metrics.items():
                if self.style == "tf":
                    self.scalar(tag, 0, v, wall_time=wt)
                else:
                    self.legacy_simple_value(tag, 0, v, wall_time=wt)

    # --- graphs and run metadata ---------------------------------------------------------------
    def graph_def(self, graph: Union[bytes, graph_pb2.GraphDef], wall_time: Optional[float] = None) -> None:
        """``Event.graph_def`` (TF1 ``add_graph``, ``tf.summary.graph``, torch ``add_graph``)."""
        data = graph if isinstance(graph, (bytes, bytearray)) else graph.SerializeToString()
        self.write_event(event_pb2.Event(wall_time=self._wall(wall_time), graph_def=bytes(data)))

    def meta_graph_def(self, meta: Union[bytes, meta_graph_pb2.MetaGraphDef],
                       wall_time: Optional[float] = None) -> None:
        """``Event.meta_graph_def`` (TF1 ``add_meta_graph``)."""
        data = meta if isinstance(meta, (bytes, bytearray)) else meta.SerializeToString()
        self.write_event(event_pb2.Event(wall_time=self._wall(wall_time), meta_graph_def=bytes(data)))

    def run_metadata(self, tag: str, step: int, run_metadata: Union[bytes, config_pb2.RunMetadata],
                     wall_time: Optional[float] = None) -> None:
        """``Event.tagged_run_metadata`` (TF1 ``add_run_metadata``, torch ``add_graph``)."""
        data = run_metadata if isinstance(run_metadata, (bytes, bytearray)) else run_metadata.SerializeToString()
        self.write_event(event_pb2.Event(
            wall_time=self._wall(wall_time), step=step,
            tagged_run_metadata=event_pb2.TaggedRunMetadata(tag=tag, run_metadata=bytes(data))))

    def graph_summary(self, tag: str, step: int, data: Union[bytes, str], plugin_name: str,
                      wall_time: Optional[float] = None) -> None:
        """The TF2 graph sub-plugin summaries (content ``"1"``): ``graph_keras_model`` (model JSON),
        ``graph_run_metadata`` / ``graph_run_metadata_graph`` (``trace_export`` RunMetadata)."""
        self.raw_value(tag, step, plugin_name, b"1", _string_tensor([_as_bytes(data)], []), wall_time)

    def session_log_start(self, step: int = 0, wall_time: Optional[float] = None) -> None:
        """``Event.session_log`` START (TF1 ``SessionLog``; restarts purge orphaned data)."""
        self.write_event(event_pb2.Event(wall_time=self._wall(wall_time), step=step,
                                         session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)))

    def log_message(self, step: int, message: str, wall_time: Optional[float] = None) -> None:
        """``Event.log_message`` (deprecated, still found in old logs)."""
        self.write_event(event_pb2.Event(wall_time=self._wall(wall_time), step=step,
                                         log_message=event_pb2.LogMessage(level=event_pb2.LogMessage.INFO,
                                                                          message=message)))

    # --- TF1 / PyTorch legacy values (never carry metadata) -----------------------------------
    def legacy_simple_value(self, tag: str, step: int, value: float, wall_time: Optional[float] = None) -> None:
        """``Summary.Value.simple_value`` (torch ``add_scalar``)."""
        self._summary(step, summary_pb2.Summary.Value(tag=tag, simple_value=value), wall_time)

    def legacy_histo(self, tag: str, step: int, values: Sequence[float], wall_time: Optional[float] = None) -> None:
        """``Summary.Value.histo`` with TF's default exponential buckets (torch ``add_histogram``)."""
        self._summary(step, summary_pb2.Summary.Value(tag=tag, histo=legacy_histogram_proto(values)), wall_time)

    def legacy_image(self, tag: str, step: int, png_bytes: bytes, w: int, h: int, colorspace: int = 3,
                     wall_time: Optional[float] = None) -> None:
        """``Summary.Value.image`` (torch ``add_image``)."""
        img = summary_pb2.Summary.Image(height=h, width=w, colorspace=colorspace, encoded_image_string=png_bytes)
        self._summary(step, summary_pb2.Summary.Value(tag=tag, image=img), wall_time)

    def legacy_audio(self, tag: str, step: int, wav_bytes: bytes, *, sample_rate: float = 16000,
                     wall_time: Optional[float] = None) -> None:
        """``Summary.Value.audio`` (torch ``add_audio``); frames read from the WAV itself."""
        with wave.open(io.BytesIO(wav_bytes), "rb") as w:
            channels, frames = w.getnchannels(), w.getnframes()
        audio = summary_pb2.Summary.Audio(sample_rate=sample_rate, num_channels=channels, length_frames=frames,
                                          encoded_audio_string=wav_bytes, content_type="audio/wav")
        self._summary(step, summary_pb2.Summary.Value(tag=tag, audio=audio), wall_time)

    def raw_value(self, tag: str, step: int, plugin_name: str, content: bytes = b"",
                  tensor: Optional[tensor_pb2.TensorProto] = None, wall_time: Optional[float] = None) -> None:
        """A tensor summary for any (custom) plugin."""
        value = summary_pb2.Summary.Value(
            tag=tag, metadata=summary_pb2.SummaryMetadata(
                plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=plugin_name, content=content)))
        if tensor is not None:
            value.tensor.CopyFrom(tensor)
        self._summary(step, value, wall_time)


def write_profile_empty(run_dir: str, timestamp: int = DEFAULT_TIMESTAMP, host: str = DEFAULT_HOST) -> str:
    """``events.out.tfevents.<ts>.<host>.profile-empty``: the stub older TF profilers (C++
    ``MaybeCreateEmptyEventFile``) wrote beside ``plugins/profile`` so TensorBoard would see a run.
    It holds only the file-version record. (TF 2.15+ no longer writes it.)"""
    w = EventWriter(run_dir, timestamp=timestamp, file_name="events.out.tfevents.%010d.%s.profile-empty"
                    % (timestamp, host))
    w.close()
    return w.path


def _sorted_hparams_content(value: summary_pb2.Summary.Value) -> summary_pb2.Summary.Value:
    """Re-serialize the hparams plugin content with sorted maps: TB's helpers serialize the
    ``hparams`` map in hash order, which changes from process to process."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    pd = plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
    value.metadata.plugin_data.content = pd.SerializeToString(deterministic=True)
    return value


def _torch_hparams_values(hparams_dict: Mapping[str, Any], metric_tags: List[str]) -> List[summary_pb2.Summary.Value]:
    """What ``torch.utils.tensorboard.summary.hparams`` builds: metadata-only values (no tensor)."""
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    infos, start = [], plugin_data_pb2.SessionStartInfo()
    for k, v in hparams_dict.items():
        if isinstance(v, bool):
            infos.append(api_pb2.HParamInfo(name=k, type=api_pb2.DATA_TYPE_BOOL))
            start.hparams[k].bool_value = v
        elif isinstance(v, (int, float)):
            infos.append(api_pb2.HParamInfo(name=k, type=api_pb2.DATA_TYPE_FLOAT64))
            start.hparams[k].number_value = float(v)
        else:
            infos.append(api_pb2.HParamInfo(name=k, type=api_pb2.DATA_TYPE_STRING))
            start.hparams[k].string_value = str(v)
    exp = api_pb2.Experiment(hparam_infos=infos, metric_infos=[
        api_pb2.MetricInfo(name=api_pb2.MetricName(tag=t)) for t in metric_tags])
    end = plugin_data_pb2.SessionEndInfo(status=api_pb2.STATUS_SUCCESS)
    out = []
    for tag, pd in ((metadata.EXPERIMENT_TAG, plugin_data_pb2.HParamsPluginData(experiment=exp, version=0)),
                    (metadata.SESSION_START_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_start_info=start)),
                    (metadata.SESSION_END_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_end_info=end))):
        out.append(summary_pb2.Summary.Value(tag=tag, metadata=metadata.create_summary_metadata(pd)))
    return out


# =============================================================================================
# XSpace (xplane.pb): model, wire encoder, proto classes
# =============================================================================================
#: Field numbers of ``tsl/profiler/protobuf/xplane.proto`` (package ``tensorflow.profiler``) that
#: the wire encoder uses; ``tests/test_synth_demo.py`` checks them against xprof's descriptor.
XPLANE_FIELDS: Dict[str, Dict[str, int]] = {
    "XSpace": {"planes": 1, "errors": 2, "warnings": 3, "hostnames": 4},
    "XPlane": {"id": 1, "name": 2, "lines": 3, "event_metadata": 4, "stat_metadata": 5, "stats": 6},
    "XLine": {"id": 1, "name": 2, "timestamp_ns": 3, "events": 4, "duration_ps": 9, "display_id": 10,
              "display_name": 11},
    "XEvent": {"metadata_id": 1, "offset_ps": 2, "duration_ps": 3, "stats": 4, "num_occurrences": 5},
    "XStat": {"metadata_id": 1, "double_value": 2, "uint64_value": 3, "int64_value": 4, "str_value": 5,
              "bytes_value": 6, "ref_value": 7},
    "XEventMetadata": {"id": 1, "name": 2, "metadata": 3, "display_name": 4, "stats": 5, "child_id": 6},
    "XStatMetadata": {"id": 1, "name": 2, "description": 3},
}

#: A stat: (stat metadata id, kind, value); kind is an ``XStat`` oneof name without ``_value``:
#: ``int64``, ``uint64``, ``double``, ``str``, ``bytes`` or ``ref`` (a stat-metadata id whose name
#: is the string value: how real profilers store repeated strings).
Stat = Tuple[int, str, Any]
#: An event: (event metadata id, offset_ps from the line's timestamp, duration_ps, stats).
Event = Tuple[int, int, int, Tuple[Stat, ...]]


@dataclass
class XLineModel:
    id: int
    name: str
    timestamp_ns: int
    events: List[Event] = field(default_factory=list)
    display_id: int = 0
    display_name: str = ""
    duration_ps: int = 0


@dataclass
class XPlaneModel:
    name: str
    id: int = 0
    lines: List[XLineModel] = field(default_factory=list)
    event_metadata: Dict[int, str] = field(default_factory=dict)
    stat_metadata: Dict[int, str] = field(default_factory=dict)
    stats: List[Stat] = field(default_factory=list)

    _event_ids: Dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    _stat_ids: Dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def event_id(self, name: str) -> int:
        """Intern an event name; ids start at 1 like the real profilers'."""
        if name not in self._event_ids:
            self._event_ids[name] = len(self.event_metadata) + 1
            self.event_metadata[self._event_ids[name]] = name
        return self._event_ids[name]

    def stat_id(self, name: str) -> int:
        """Intern a stat name (also used for ``ref`` string values)."""
        if name not in self._stat_ids:
            self._stat_ids[name] = len(self.stat_metadata) + 1
            self.stat_metadata[self._stat_ids[name]] = name
        return self._stat_ids[name]


@dataclass
class XSpaceModel:
    planes: List[XPlaneModel]
    hostnames: List[str] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)


# --- the hand-written wire encoder --------------------------------------------------------------
def _varint(n: int) -> bytes:
    if 0 <= n < _SMALL:
        return _SMALL_VARINTS[n]
    if n < 0:
        n += 1 << 64  # int64 negatives: ten-byte two's complement, as protobuf does
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = 1 << 14
_SMALL_VARINTS: List[bytes] = []
for _i in range(_SMALL):  # the hot path: ids, counts and lengths are mostly small
    _SMALL_VARINTS.append(bytes((_i,)) if _i < 0x80 else bytes(((_i & 0x7F) | 0x80, _i >> 7)))
del _i


def _f_varint(num: int, n: int) -> bytes:
    return _SMALL_VARINTS[num << 3] + _varint(n)


def _f_len(num: int, data: bytes) -> bytes:
    return _SMALL_VARINTS[num << 3 | 2] + _varint(len(data)) + data


def _f_double(num: int, x: float) -> bytes:
    return _SMALL_VARINTS[num << 3 | 1] + struct.pack("<d", x)


_STAT_KIND_FIELD = {"double": 2, "uint64": 3, "int64": 4, "str": 5, "bytes": 6, "ref": 7}


def _wire_stat(stat: Stat) -> bytes:
    mid, kind, value = stat
    out = _f_varint(1, mid) if mid else b""
    num = _STAT_KIND_FIELD[kind]
    # oneof members have explicit presence: written even when zero/empty
    if kind == "double":
        return out + _f_double(num, float(value))
    if kind in ("str", "bytes"):
        return out + _f_len(num, _as_bytes(value))
    return out + _f_varint(num, int(value))


def _wire_event(ev: Event, stat_cache: Dict[Stat, bytes]) -> bytes:
    mid, offset_ps, duration_ps, stats = ev
    parts = [_f_varint(1, mid) if mid else b"", b"\x10", _varint(offset_ps)]  # offset: oneof, always written
    if duration_ps:
        parts += (b"\x18", _varint(duration_ps))
    for st in stats:
        enc = stat_cache.get(st)
        if enc is None:  # real profiles repeat the same stats endlessly: encode each once
            enc = stat_cache[st] = _f_len(4, _wire_stat(st))
        parts.append(enc)
    body = b"".join(parts)
    return b"\x22" + _varint(len(body)) + body  # field 4 of XLine


def _wire_line(line: XLineModel) -> bytes:
    parts = []
    if line.id:
        parts.append(_f_varint(1, line.id))
    if line.name:
        parts.append(_f_len(2, line.name.encode()))
    if line.timestamp_ns:
        parts.append(_f_varint(3, line.timestamp_ns))
    cache: Dict[Stat, bytes] = {}
    parts.extend(_wire_event(ev, cache) for ev in line.events)
    if line.duration_ps:
        parts.append(_f_varint(9, line.duration_ps))
    if line.display_id:
        parts.append(_f_varint(10, line.display_id))
    if line.display_name:
        parts.append(_f_len(11, line.display_name.encode()))
    return b"".join(parts)


def _wire_map_entry(key: int, value: bytes) -> bytes:
    # map entries always carry both key and value (protobuf's own encoders do the same)
    return _f_varint(1, key) + _f_len(2, value)


def _wire_plane(plane: XPlaneModel) -> bytes:
    parts = []
    if plane.id:
        parts.append(_f_varint(1, plane.id))
    if plane.name:
        parts.append(_f_len(2, plane.name.encode()))
    parts.extend(_f_len(3, _wire_line(line)) for line in plane.lines)
    for k in sorted(plane.event_metadata):  # sorted keys = protobuf's deterministic map order
        meta = _f_varint(1, k) + _f_len(2, plane.event_metadata[k].encode())
        parts.append(_f_len(4, _wire_map_entry(k, meta)))
    for k in sorted(plane.stat_metadata):
        meta = _f_varint(1, k) + _f_len(2, plane.stat_metadata[k].encode())
        parts.append(_f_len(5, _wire_map_entry(k, meta)))
    parts.extend(_f_len(6, _wire_stat(s)) for s in plane.stats)
    return b"".join(parts)


def encode_xspace_wire(space: XSpaceModel) -> bytes:
    """Serialize an ``XSpaceModel`` with the hand-written encoder (no xprof needed)."""
    parts = [_f_len(1, _wire_plane(p)) for p in space.planes]
    parts += [_f_len(2, e.encode()) for e in space.errors]
    parts += [_f_len(3, w.encode()) for w in space.warnings]
    parts += [_f_len(4, h.encode()) for h in space.hostnames]
    return b"".join(parts)


# --- real protobuf classes, when they can be found ----------------------------------------------
_XPLANE_PB2_MODULES = (
    "tsl.profiler.protobuf.xplane_pb2",
    "xla.tsl.profiler.protobuf.xplane_pb2",
    "tensorflow.tsl.profiler.protobuf.xplane_pb2",
    "tensorflow.core.profiler.protobuf.xplane_pb2",
    "xprof.protobuf.xplane_pb2",
    "tensorboard_plugin_profile.protobuf.xplane_pb2",
)
_XPLANE_PROTO_NAME = b"tsl/profiler/protobuf/xplane.proto"


class XPlaneClasses:
    """The real ``XSpace`` family of message classes and where they came from."""

    def __init__(self, get: Callable[[str], Any], source: str, file_descriptor: Any):
        self.XSpace = get("XSpace")
        self.XPlane = get("XPlane")
        self.XLine = get("XLine")
        self.XEvent = get("XEvent")
        self.XStat = get("XStat")
        self.XEventMetadata = get("XEventMetadata")
        self.XStatMetadata = get("XStatMetadata")
        self.source = source
        self.file_descriptor = file_descriptor


def _descriptor_bytes_from_blob(blob: bytes) -> Optional[bytes]:
    """Cut the serialized ``FileDescriptorProto`` of xplane.proto out of a compiled library.

    protoc's C++ output embeds it verbatim; we walk its top-level fields from the ``name`` field
    and stop at the first byte that cannot continue a FileDescriptorProto.
    """
    start = blob.find(b"\n" + bytes([len(_XPLANE_PROTO_NAME)]) + _XPLANE_PROTO_NAME)
    if start < 0:
        return None
    pos, seen_name = start, False
    allowed = {1: 2, 2: 2, 3: 2, 4: 2, 5: 2, 6: 2, 7: 2, 8: 2, 9: 2, 10: 0, 11: 0, 12: 2, 13: 2, 14: 0}
    while pos < len(blob):
        tag, p = _read_varint(blob, pos)
        num, wt = tag >> 3, tag & 7
        if allowed.get(num) != wt or (num == 1 and seen_name):
            break
        seen_name = seen_name or num == 1
        if wt == 0:
            _, p = _read_varint(blob, p)
        else:
            n, p = _read_varint(blob, p)
            p += n
        if p > len(blob):
            break
        pos = p
    return blob[start:pos]


def _read_varint(buf: bytes, pos: int) -> Tuple[int, int]:
    result, shift = 0, 0
    while pos < len(buf) and shift < 70:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
    return -1, len(buf) + 1


def _module_file_exists(dotted: str) -> bool:
    """Whether ``a.b.c`` exists as a file, found without importing its parent packages
    (importing ``xprof`` would start its whole plugin)."""
    import importlib.util as iu

    top, _, rest = dotted.partition(".")
    try:
        spec = iu.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    return any(os.path.exists(os.path.join(loc, *rest.split(".")) + ".py")
               for loc in spec.submodule_search_locations)


def xplane_proto_classes() -> Optional[XPlaneClasses]:
    """Real protobuf classes for XSpace, or ``None`` if neither source is installed.

    Tries an importable ``xplane_pb2`` first; xprof 2.24 ships none, but its native library
    (``xprof/convert/profiler_plugin_c_api*``) embeds the compiled ``xplane.proto`` descriptor,
    which is loaded into a private descriptor pool.
    """
    import importlib
    import importlib.util as iu

    for name in _XPLANE_PB2_MODULES:
        if not _module_file_exists(name):
            continue
        try:
            mod = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - any import failure means "not this one"
            continue
        return XPlaneClasses(lambda n, m=mod: getattr(m, n), name, mod.DESCRIPTOR)
    try:
        spec = iu.find_spec("xprof")  # a top-level spec: does not import (and run) xprof
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    conv = os.path.join(list(spec.submodule_search_locations)[0], "convert")
    libs = sorted(f for f in os.listdir(conv) if f.startswith("profiler_plugin_c_api")) if os.path.isdir(conv) else []
    for lib in libs:
        with open(os.path.join(conv, lib), "rb") as fh:
            raw = _descriptor_bytes_from_blob(fh.read())
        if raw:
            from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

            fd = descriptor_pb2.FileDescriptorProto.FromString(raw)
            pool = descriptor_pool.DescriptorPool()  # private: never clashes with another copy
            pool.AddSerializedFile(raw)
            fdesc = pool.FindFileByName(fd.name)
            get = lambda n, p=pool, pkg=fd.package: message_factory.GetMessageClass(  # noqa: E731
                p.FindMessageTypeByName(f"{pkg}.{n}"))
            return XPlaneClasses(get, os.path.join(conv, lib), fdesc)
    return None


def encode_xspace_proto(space: XSpaceModel, classes: XPlaneClasses) -> bytes:
    """Serialize an ``XSpaceModel`` with real protobuf classes (deterministic map order)."""
    xs = classes.XSpace()

    def fill_stat(dst: Any, stat: Stat) -> None:
        mid, kind, value = stat
        dst.metadata_id = mid
        setattr(dst, f"{kind}_value", _as_bytes(value) if kind == "bytes" else value)

    for p in space.planes:
        xp = xs.planes.add(id=p.id, name=p.name)
        for line in p.lines:
            xl = xp.lines.add(id=line.id, name=line.name, timestamp_ns=line.timestamp_ns,
                              duration_ps=line.duration_ps, display_id=line.display_id,
                              display_name=line.display_name)
            for mid, off, dur, stats in line.events:
                xe = xl.events.add(metadata_id=mid, offset_ps=off, duration_ps=dur)
                for s in stats:
                    fill_stat(xe.stats.add(), s)
        for k, name in p.event_metadata.items():
            xp.event_metadata[k].id = k
            xp.event_metadata[k].name = name
        for k, name in p.stat_metadata.items():
            xp.stat_metadata[k].id = k
            xp.stat_metadata[k].name = name
        for s in p.stats:
            fill_stat(xp.stats.add(), s)
    xs.errors.extend(space.errors)
    xs.warnings.extend(space.warnings)
    xs.hostnames.extend(space.hostnames)
    return xs.SerializeToString(deterministic=True)


# --- the host CPU plane model -----------------------------------------------------------------
_TF_COMPUTE_OPS = (
    "sequential/conv2d/Conv2D:Conv2D", "sequential/conv2d/BiasAdd:BiasAdd", "sequential/conv2d/Relu:Relu",
    "sequential/max_pooling2d/MaxPool:MaxPool", "sequential/flatten/Reshape:Reshape",
    "sequential/dense/MatMul:MatMul", "sequential/dense/BiasAdd:BiasAdd", "sequential/dense/Relu:Relu",
    "sequential/dense_1/MatMul:MatMul", "sequential/dense_1/Softmax:Softmax",
    "sparse_categorical_crossentropy/SparseSoftmaxCrossEntropyWithLogits:SparseSoftmaxCrossEntropyWithLogits",
    "gradient_tape/sequential/dense_1/MatMul/MatMul:MatMul", "gradient_tape/sequential/dense/ReluGrad:ReluGrad",
    "gradient_tape/sequential/dense/MatMul/MatMul_1:MatMul",
    "gradient_tape/sequential/conv2d/Conv2D/Conv2DBackpropFilter:Conv2DBackpropFilter",
    "gradient_tape/sequential/max_pooling2d/MaxPool/MaxPoolGrad:MaxPoolGrad",
    "Adam/Adam/update/ResourceApplyAdam:ResourceApplyAdam",
    "Adam/Adam/update_1/ResourceApplyAdam:ResourceApplyAdam", "Adam/Adam/AssignAddVariableOp:AssignAddVariableOp",
    "sequential/conv2d/Conv2D/ReadVariableOp:ReadVariableOp",
)
_JAX_COMPUTE_OPS = (
    "fusion.3", "dot.2", "add_multiply_fusion.1", "reduce.7", "convolution.4", "broadcast_add_fusion",
    "subtract_multiply_fusion.2", "exponential_reduce_fusion", "copy.5", "transpose.1",
)


@dataclass
class _Flavor:
    compute_line: str
    helper_line: str
    step_event: str
    python_chain: Tuple[str, ...]
    ops: Tuple[str, ...]
    region: str


_FLAVORS = {
    "tf": _Flavor("tf_Compute", "tf_data_iterator_get_next", "train",
                  ("__inference_train_function_1178", "TFE_Py_ExecuteCancelable", "EagerExecute"),
                  _TF_COMPUTE_OPS, "ExecutorState::Process"),
    "jax": _Flavor("tf_XLAPjRtCpuClient", "tf_XLAEigen", "train",
                   ("PjitFunction(train_step)", "PjRtCpuLoadedExecutable::Execute", "ThunkExecutor::Execute"),
                   _JAX_COMPUTE_OPS, "ThunkExecutor::Execute"),
}


def _thread_id(rng: random.Random) -> int:
    """A signed 64-bit id like the hashed thread ids in real line names."""
    v = rng.getrandbits(64)
    return v - (1 << 64) if v >= 1 << 63 else v


def build_host_xspace(n_events: int, *, seed: int = 0, host: str = DEFAULT_HOST, flavor: str = "tf",
                      start_ns: int = DEFAULT_TIMESTAMP * 10**9, repository_path: str = "") -> XSpaceModel:
    """A host-only XSpace like TF 2.x / JAX CPU profiles: ``/host:CPU`` with a ``python`` line, two
    compute threads and a helper thread (about ``n_events`` events in all), and ``Task Environment``
    (profile start/stop time and options). JAX adds a ``/host:metadata`` plane."""
    fl = _FLAVORS[flavor]
    rng = random.Random(seed)
    cpu = XPlaneModel(name="/host:CPU")
    line_ts = 5000 + rng.randint(0, 999)  # real profilers normalize line times to the session start
    py = XLineModel(id=_thread_id(rng), name="python", display_name="python", timestamp_ns=line_ts)
    computes = []
    for _ in range(2):
        tid = _thread_id(rng)
        computes.append(XLineModel(id=tid, name=f"{fl.compute_line}/{tid}", display_name=f"{fl.compute_line}/{tid}",
                                   timestamp_ns=line_ts))
    hid = _thread_id(rng)
    helper = XLineModel(id=hid, name=f"{fl.helper_line}/{hid}", display_name=f"{fl.helper_line}/{hid}",
                        timestamp_ns=line_ts)
    ops_per_line = 12
    per_step = 1 + len(fl.python_chain) + 2 * (ops_per_line + 3) + 3
    n_steps = max(1, -(-max(1, n_events) // per_step))
    t = rng.randint(20, 60) * 1_000_000  # ps
    for step in range(n_steps):
        dur = rng.randint(3_000, 6_000) * 1_000_000  # 3-6 ms per step
        _python_events(cpu, py, fl, step, t, dur)
        for k, line in enumerate(computes):
            _compute_events(cpu, line, fl, rng, step, k, t + dur // 20, dur * 9 // 10, ops_per_line)
        _helper_events(cpu, helper, fl, rng, step, t, dur // 8)
        t += dur + rng.randint(50, 400) * 1_000_000
    cpu.lines = [py, *computes, helper]
    planes = []
    if flavor == "jax":
        meta = XPlaneModel(name="/host:metadata")
        meta.stats = [(meta.stat_id("cpu_version"), "str", "cpu"), (meta.stat_id("jax_version"), "str", "0.10.2"),
                      (meta.stat_id("jaxlib_version"), "str", "0.10.2"),
                      (meta.stat_id("process_id"), "int64", DEFAULT_PID)]
        planes.append(meta)
        cpu.stats = [(cpu.stat_id("process_id"), "int64", DEFAULT_PID)]
    planes.append(cpu)
    planes.append(_task_environment(start_ns, start_ns + (line_ts * 1000 + t) // 1000, repository_path))
    return XSpaceModel(planes=planes, hostnames=[host])


def _python_events(cpu: XPlaneModel, line: XLineModel, fl: _Flavor, step: int, t: int, dur: int) -> None:
    line.events.append((cpu.event_id(fl.step_event), t, dur,
                        ((cpu.stat_id("step_num"), "int64", step), (cpu.stat_id("_r"), "int64", 1))))
    for depth, name in enumerate(fl.python_chain, start=1):
        stats: Tuple[Stat, ...] = ()
        if depth == 1 and fl is _FLAVORS["tf"]:
            stats = ((cpu.stat_id("tf_function_call"), "ref", cpu.stat_id("notTraced-nonXla")),
                     (cpu.stat_id("tracing_count"), "int64", 1))
        line.events.append((cpu.event_id(name), t + depth * dur // 50, dur - 2 * depth * dur // 50, stats))


def _compute_events(cpu: XPlaneModel, line: XLineModel, fl: _Flavor, rng: random.Random, step: int, k: int,
                    t: int, dur: int, n_ops: int) -> None:
    corr = step * 4 + k + 1
    ev = line.events.append
    ev((cpu.event_id("ThreadpoolListener::StartRegion"), t, 0,
        ((cpu.stat_id("_ct"), "int64", 15), (cpu.stat_id("_c"), "int64", corr))))
    if fl.region == "ThunkExecutor::Execute":
        region_stats: Tuple[Stat, ...] = ((cpu.stat_id("run_id"), "int64", 596426472 + step),
                                          (cpu.stat_id("device_ordinal"), "int64", 0))
        op_stats: Tuple[Stat, ...] = ((cpu.stat_id("program_id"), "int64", 32),
                                      (cpu.stat_id("run_id"), "int64", 596426472 + step))
    else:
        region_stats = ((cpu.stat_id("id"), "int64", 1000 + step), (cpu.stat_id("iter_num"), "int64", 0))
        op_stats = ()
    ev((cpu.event_id(fl.region), t + 1_000_000, dur - 2_000_000, region_stats))
    slot = (dur - 4_000_000) // n_ops
    op_ids = [cpu.event_id(name) for name in fl.ops]
    first = step * 7 + k * 3
    rnd = rng.random
    for i in range(n_ops):
        ev((op_ids[(first + i) % len(op_ids)], t + 2_000_000 + i * slot,
            max(1_000, int(slot * (0.4 + 0.55 * rnd()))), op_stats))
    ev((cpu.event_id("ThreadpoolListener::Record"), t + dur - 1_000_000, 0,
        ((cpu.stat_id("_pt"), "int64", 15), (cpu.stat_id("_p"), "int64", corr))))


def _helper_events(cpu: XPlaneModel, line: XLineModel, fl: _Flavor, rng: random.Random, step: int,
                   t: int, dur: int) -> None:
    if fl is _FLAVORS["tf"]:
        names = ("IteratorGetNextOp::DoCompute", "Iterator::Root", "Iterator::Root::Prefetch")
        extra: Tuple[Stat, ...] = ((cpu.stat_id("element_size"), "int64", 100480),)
    else:
        names = ("ThreadpoolListener::StartRegion", "ynn_fusion.6", "ThreadpoolListener::StopRegion")
        extra = ((cpu.stat_id("_src"), "ref", cpu.stat_id("external/xla/xla/backends/cpu/runtime/thunk_executor.cc")),)
    for depth, name in enumerate(names):
        stats = ((cpu.stat_id("id"), "int64", 9212746023135174853 - step), (cpu.stat_id("iter_num"), "int64", 0)) + extra
        line.events.append((cpu.event_id(name), t + depth * dur // 10, dur - 2 * depth * dur // 10, stats))


def _task_environment(start_ns: int, stop_ns: int, repository_path: str) -> XPlaneModel:
    env = XPlaneModel(name="Task Environment")
    # ProfileOptions{version:1, device_type:2, include_dataset_ops:1, host_tracer_level:2...} as TF writes it
    options = b"\x08\x01\x10\x02\x18\x01(\x018\x01" + (
        _f_len(10, repository_path.encode()) if repository_path else b"")
    env.stats = [(env.stat_id("profile_start_time"), "uint64", start_ns),
                 (env.stat_id("profile_stop_time"), "uint64", stop_ns),
                 (env.stat_id("profile_options"), "bytes", options)]
    return env


def xspace_bytes(n_events: int, seed: int = 0, *, host: str = DEFAULT_HOST, flavor: str = "tf",
                 start_ns: int = DEFAULT_TIMESTAMP * 10**9, repository_path: str = "",
                 encoder: str = "wire") -> bytes:
    """Serialized host-CPU XSpace; ``encoder`` is ``"wire"`` (always available, the default so the
    bytes never depend on the environment), ``"proto"`` (real classes, else RuntimeError) or
    ``"auto"``."""
    model = build_host_xspace(n_events, seed=seed, host=host, flavor=flavor, start_ns=start_ns,
                              repository_path=repository_path)
    if encoder == "wire":
        return encode_xspace_wire(model)
    classes = xplane_proto_classes()
    if classes is None:
        if encoder == "proto":
            raise RuntimeError("no xplane protobuf classes found (install xprof)")
        return encode_xspace_wire(model)
    return encode_xspace_proto(model, classes)


def write_xplane(path: str, n_events: int, seed: int = 0, **kwargs: Any) -> int:
    """Write ``<host>.xplane.pb``: a host CPU XSpace the real xprof 2.24 plugin opens.

    Verified by ``tests/test_synth_demo.py``: it parses with the protobuf classes compiled into
    xprof and with xprof's C++ ``ProfileData``, and the real ``ProfilePlugin`` lists
    ``HOST_ONLY_TOOLS`` for it and serves ``overview_page`` and ``trace_viewer@``. Keyword
    arguments go to ``xspace_bytes``. Returns the size in bytes.
    """
    data = xspace_bytes(n_events, seed, **kwargs)
    with open(path, "wb") as fh:
        fh.write(data)
    return len(data)


# =============================================================================================
# Secondary Chrome traces of a session (JAX's <host>.trace.json.gz, perfetto_trace.json.gz)
# =============================================================================================
def _trace_event_strings(space: XSpaceModel, cpp: bool) -> Iterator[str]:
    """Chrome trace events of the host plane as xprof/JAX export them (pid 701 = ``/host:CPU``).

    ``cpp``: xprof's C++ exporter (compact, ``%.17g`` floats); otherwise Python's ``json.dumps``.
    Built as strings: this runs for every event of big sessions.
    """
    dump = _json_cpp if cpp else json.dumps
    num: Callable[[float], str] = (lambda x: format(x, ".17g")) if cpp else repr
    sep, col = ("," , ":") if cpp else (", ", ": ")
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        pid = 701
        yield dump({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": plane.name}})
        yield dump({"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": pid}})
        for i, line in enumerate(plane.lines, start=1):
            tid = line.id & 0xFFFFFFFF
            yield dump({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": line.name}})
            yield dump({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": i}})
        names = {k: json.dumps(v) for k, v in plane.event_metadata.items()}
        args_cache: Dict[Tuple[Stat, ...], str] = {}
        for line in plane.lines:
            head = f'{{"ph"{col}"X"{sep}"pid"{col}{pid}{sep}"tid"{col}{line.id & 0xFFFFFFFF}{sep}"ts"{col}'
            base_ps = line.timestamp_ns * 1000
            for mid, off, dur, stats in line.events:
                args = args_cache.get(stats)
                if args is None:
                    args = args_cache[stats] = _trace_args(plane, stats, dump, sep, col)
                yield (f'{head}{num((base_ps + off) / 1e6)}{sep}"dur"{col}{num(max(dur, 1) / 1e6)}'
                       f'{sep}"name"{col}{names[mid]}{args}}}')


def _trace_args(plane: XPlaneModel, stats: Tuple[Stat, ...], dump: Callable[[Any], str], sep: str, col: str) -> str:
    if not stats:
        return ""
    values = {plane.stat_metadata[s[0]]: (plane.stat_metadata[s[2]] if s[1] == "ref" else str(s[2]))
              for s in stats}
    return f'{sep}"args"{col}{dump(values)}'


def _json_cpp(obj: Any) -> str:
    """Compact JSON with C++-style ``%.17g`` floats, like xprof's own trace exporter."""
    if isinstance(obj, float):
        return format(obj, ".17g")
    if isinstance(obj, dict):
        return "{" + ",".join(json.dumps(k) + ":" + _json_cpp(v) for k, v in obj.items()) + "}"
    if isinstance(obj, list):
        return "[" + ",".join(_json_cpp(v) for v in obj) + "]"
    return json.dumps(obj)


def _write_chunked(write: Callable[[bytes], Any], items: Iterable[str], sep: str) -> None:
    buf: List[str] = []
    for item in items:
        buf.append(item)
        if len(buf) >= 4096:  # bounded memory, few compressor calls
            write((sep.join(buf) + sep).encode())
            buf.clear()
    if buf:
        write((sep.join(buf) + sep).encode())


def write_trace_json_gz(path: str, space: XSpaceModel) -> int:
    """``<host>.trace.json.gz`` as ``jax.profiler`` writes it (zlib gzip header: no name, mtime 0)."""
    comp = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: gzip container, OS byte = Unix
    with open(path, "wb") as fh:
        fh.write(comp.compress(b'{"displayTimeUnit":"ns","metadata":{"highres-ticks":true},"traceEvents":['))
        _write_chunked(lambda b: fh.write(comp.compress(b)), _trace_event_strings(space, cpp=True), ",")
        fh.write(comp.compress(b"{}]}"))
        fh.write(comp.flush())
    return os.path.getsize(path)


def write_perfetto_trace_json_gz(path: str, space: XSpaceModel, *, mtime: int = DEFAULT_TIMESTAMP) -> int:
    """``perfetto_trace.json.gz`` (``jax.profiler.trace(create_perfetto_trace=True)``): Python's
    ``json``/``gzip`` (file name in the header, level 9)."""
    with open(path, "wb") as raw, gzip.GzipFile(filename="perfetto_trace.json", mode="wb", fileobj=raw,
                                                compresslevel=9, mtime=mtime) as gz:
        gz.write(b'{"displayTimeUnit": "ns", "traceEvents": [')
        _write_chunked(gz.write, _trace_event_strings(space, cpp=False), ", ")
        gz.write(b"{}]}")
    return os.path.getsize(path)


# =============================================================================================
# Profile sessions
# =============================================================================================
def session_name_for(timestamp: int) -> str:
    """``YYYY_MM_DD_HH_MM_SS`` (UTC) as TF/JAX name profile sessions."""
    return time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime(timestamp))


def _session_timestamp(session_name: str) -> int:
    try:
        return calendar.timegm(time.strptime(session_name, "%Y_%m_%d_%H_%M_%S"))
    except ValueError:
        return DEFAULT_TIMESTAMP


def write_profile_session(run_dir: str, session_name: Optional[str] = None, host: str = DEFAULT_HOST,
                          n_events: int = 5000, with_caches: bool = False, *, seed: int = 0, flavor: str = "tf",
                          trace_json: bool = False, perfetto: bool = False,
                          cache_version: str = STALE_CACHE_VERSION, repository_path: str = "") -> List[str]:
    """``<run_dir>/plugins/profile/<session>/<host>.xplane.pb`` plus optional extras.

    * ``trace_json`` / ``perfetto``: JAX's secondary ``<host>.trace.json.gz`` / ``perfetto_trace.json.gz``.
    * ``with_caches``: what xprof 2.24 leaves after a session was viewed: ``.cached_tools.json`` (the
      real JSON, keyed on the xplane's mtime and size, so the plugin's cache is valid),
      ``cache_version.txt``, ``<host>.SSTABLE``, ``<host>.metadata.SSTABLE``, ``<host>.trie.SSTABLE``,
      ``ALL_HOSTS.op_stats_v2.pb`` and (TF) an empty ``NO_MODULE.hlo_proto.pb``. The binary caches
      are opaque filler, so ``cache_version`` must name an *older* xprof: the real plugin then treats
      them as stale and rebuilds them from the xplane. (With the current version it would read the
      filler and every tool answers 404 "No Data": verified with xprof 2.24.2, so that is refused.)

    Files get fixed mtimes (the session time). Returns the written paths.
    """
    ts = _session_timestamp(session_name) if session_name else DEFAULT_TIMESTAMP
    session_name = session_name or session_name_for(ts)
    sdir = os.path.join(run_dir, "plugins", "profile", session_name)
    os.makedirs(sdir, exist_ok=True)
    model = build_host_xspace(n_events, seed=seed, host=host, flavor=flavor, start_ns=ts * 10**9,
                              repository_path=repository_path)
    xplane = os.path.join(sdir, f"{host}.xplane.pb")
    with open(xplane, "wb") as fh:
        fh.write(encode_xspace_wire(model))
    written = [xplane]
    if trace_json:
        written.append(os.path.join(sdir, f"{host}.trace.json.gz"))
        write_trace_json_gz(written[-1], model)
    if perfetto:
        written.append(os.path.join(sdir, "perfetto_trace.json.gz"))
        write_perfetto_trace_json_gz(written[-1], model, mtime=ts)
    for p in written:
        os.utime(p, (ts, ts))
    if with_caches:
        if cache_version >= XPROF_VERSION:  # xprof's own (string) comparison
            raise ValueError(f"cache_version {cache_version!r} would make xprof read filler caches")
        written += _write_caches(sdir, host, xplane, seed=seed, cache_version=cache_version,
                                 mtime=ts + 3600)
    return written


def _write_caches(sdir: str, host: str, xplane: str, *, seed: int, cache_version: str,
                  mtime: int) -> List[str]:
    st = os.stat(xplane)
    tools = {"files": {os.path.basename(xplane): f"{int(st.st_mtime)}-{st.st_size}"},
             "tools": list(HOST_ONLY_TOOLS), "version": 1}
    rng = random.Random(seed ^ 0x5EED)
    size = st.st_size
    blobs = {
        ".cached_tools.json": json.dumps(tools, indent=2, sort_keys=True).encode(),
        "cache_version.txt": cache_version.encode(),
        # sizes ~ what xprof 2.24.2 writes for these xplanes (1.0-1.45x the xplane in real sessions)
        f"{host}.SSTABLE": _leveldb_like(rng, size * 6 // 10),
        f"{host}.metadata.SSTABLE": _leveldb_like(rng, size // 4),
        f"{host}.trie.SSTABLE": _leveldb_like(rng, size * 3 // 10),
        "ALL_HOSTS.op_stats_v2.pb": rng.randbytes(max(256, size // 10)),
        "NO_MODULE.hlo_proto.pb": b"",  # xprof writes it empty for sessions without HLO modules
    }
    out = []
    for name, data in blobs.items():
        path = os.path.join(sdir, name)
        with open(path, "wb") as fh:
            fh.write(data)
        os.utime(path, (mtime, mtime))
        out.append(path)
    return out


def _leveldb_like(rng: random.Random, n: int) -> bytes:
    """Opaque filler ending in LevelDB's table magic (real caches are LevelDB tables)."""
    n = max(64, n)
    return rng.randbytes(n - 8) + struct.pack("<Q", 0xDB4775248B80FB57)


# =============================================================================================
# PyTorch profiler traces (kineto Chrome trace JSON), streamed
# =============================================================================================
def torch_trace_name(host: str = DEFAULT_HOST, pid: int = DEFAULT_PID, ns: int = DEFAULT_TIMESTAMP * 10**9,
                     gz: bool = False) -> str:
    """``<host>_<pid>.<ns>.pt.trace.json[.gz]`` as ``tensorboard_trace_handler`` names traces."""
    return f"{host}_{pid}.{ns}.pt.trace.json" + (".gz" if gz else "")


_KINETO_BASE_NS = 1790857026000000000  # kineto's per-process time base, as in the real traces

# (name, children) forward tree of a small CNN; leaves get realistic tensor args
_FWD_LAYERS = (
    ("aten::conv2d", ("aten::convolution", "aten::_convolution", "aten::mkldnn_convolution", "aten::empty",
                      "aten::as_strided_", "aten::resize_")),
    ("aten::batch_norm", ("aten::_batch_norm_impl_index", "aten::native_batch_norm", "aten::empty_like",
                          "aten::empty_strided")),
    ("aten::relu", ("aten::clamp_min",)),
    ("aten::max_pool2d", ("aten::max_pool2d_with_indices",)),
    ("aten::linear", ("aten::t", "aten::transpose", "aten::as_strided", "aten::addmm", "aten::expand",
                      "aten::copy_", "aten::resolve_conj")),
)
_BWD = ("ConvolutionBackward0", "NativeBatchNormBackward0", "ReluBackward0", "MaxPool2DWithIndicesBackward0",
        "AddmmBackward0", "TBackward0")
_PY_FRAMES = (
    "torch/nn/modules/module.py(1773): _wrapped_call_impl", "torch/nn/modules/module.py(1784): _call_impl",
    "torch/nn/modules/conv.py(548): forward", "torch/nn/modules/conv.py(543): _conv_forward",
    "<built-in method conv2d of type object at 0x7fe6e1b3c8a0>", "torch/nn/modules/linear.py(134): forward",
    "<built-in function linear>", "torch/nn/functional.py(1704): relu", "<built-in method relu of type object>",
    "torch/optim/optimizer.py(485): wrapper", "torch/optim/sgd.py(105): step", "torch/_tensor.py(625): backward",
    "torch/autograd/__init__.py(354): backward", "<built-in method item of Tensor object at 0x7fe5f0d2b3e0>",
)


class _TorchStep:
    """One profiler step's cpu ops, flows, memory events and python frames (regenerable by seed)."""

    def __init__(self, step: int, seed: int, t0: float, n_layers: int, with_args: bool = True):
        rng = random.Random(seed * 1_000_003 + step)
        # args come from their own stream, so skipping them (memory/python passes) keeps timings equal
        self._args_rng = random.Random(seed * 1_000_003 + step + 500_000_000) if with_args else None
        self.ops: List[Tuple[str, str, float, float, str]] = []  # cat, name, ts, dur, args
        self.flows: List[Tuple[str, int, float]] = []  # ph, id, ts (after its op)
        self.mem: List[Tuple[float, int, int]] = []
        self.py: List[Tuple[str, float, float]] = []
        self.t0 = t0
        t = t0
        step_dur = rng.uniform(14_000, 18_000)
        self._annot(f"ProfilerStep#{step}", t, step_dur)
        t += rng.uniform(30, 60)
        for _ in range(4 * n_layers):  # dataloader item() chatter (the bulk of real traces)
            t = self._op_chain(rng, ("aten::select", "aten::as_strided"), t, fwd=False)
            t = self._op_chain(rng, ("aten::item", "aten::_local_scalar_dense"), t, fwd=False)
        fb_start = t
        self._annot("forward_backward", t, step_dur * 0.8)
        flow_ids = []
        for layer in range(n_layers):
            name, children = _FWD_LAYERS[layer % len(_FWD_LAYERS)]
            flow_ids.append((len(self.flows) // 2) + layer + 1 + step * 1000)
            self.flows.append(("s", flow_ids[-1], t))
            t = self._op_chain(rng, (name,) + children, t, fwd=True)
        for i, fid in enumerate(reversed(flow_ids)):
            bwd = _BWD[i % len(_BWD)]
            self.flows.append(("f", fid, t))
            t = self._op_chain(rng, (f"autograd::engine::evaluate_function: {bwd}", bwd, "aten::mm", "aten::sum"),
                               t, fwd=False)
            t = self._op_chain(rng, ("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
                                     "torch::autograd::AccumulateGrad", "aten::detach", "detach"), t, fwd=False)
        self._annot("optimizer_step", t, max(50.0, fb_start + step_dur * 0.95 - t))
        self._annot("Optimizer.step#SGD.step", t + 2, 40.0)
        for _ in range(n_layers):
            t = self._op_chain(rng, ("aten::add_",), t, fwd=False)
            t = self._op_chain(rng, ("aten::mul_",), t, fwd=False)
        self.end = t0 + step_dur
        total = 0
        for i, (_, _, ts, _, _) in enumerate(self.ops[::4]):
            nbytes = rng.choice((32, 256, 4096, 65536, 131072)) * (1 if i % 3 else -1)
            total = max(0, total + nbytes)
            self.mem.append((ts + 0.5, nbytes, total))
        depth_t = t0
        for i, (_, name, ts, dur, _) in enumerate(self.ops[::2]):
            frame = _PY_FRAMES[i % len(_PY_FRAMES)]
            self.py.append((frame, max(depth_t, ts - 1.0), dur + 2.0))
            depth_t = ts

    def _annot(self, name: str, ts: float, dur: float) -> None:
        self.ops.append(("user_annotation", name, ts, dur, ""))

    def _op_chain(self, rng: random.Random, names: Tuple[str, ...], t: float, *, fwd: bool) -> float:
        """A nested chain of ops (each inside the previous); returns the end time."""
        total = rng.uniform(5, 400) if len(names) > 1 else rng.uniform(0.5, 25)
        dur, ts = total, t
        for depth, name in enumerate(names):
            args = _shape_args(self._args_rng, fwd and depth == 0) if self._args_rng else ""
            self.ops.append(("cpu_op", name, ts, dur, args))
            ts += dur * 0.05 + 0.2
            dur *= 0.85
        return t + total + rng.uniform(0.5, 6)


def _shape_args(rng: random.Random, sequenced: bool) -> str:
    """The ``record_shapes`` arguments kineto attaches to cpu ops (without the id counters)."""
    c, h, w = rng.choice((3, 16, 32, 64)), rng.choice((8, 16, 32)), rng.choice((8, 16, 32))
    seq = f'"Sequence number": {rng.randint(1, 900)}, "Fwd thread id": 0, ' if sequenced else ""
    return (seq + '"Record function id": 0, "Concrete Inputs": ["", "", "[1, 1]", "False"], '
            '"Input type": ["float", "float", "ScalarList", "Scalar"], '
            f'"Input Strides": [[{c * h * w}, {h * w}, {w}, 1], [1], [], []], '
            f'"Input Dims": [[32, {c}, {h}, {w}], [16], [], []]')


@functools.lru_cache(maxsize=4096)
def _jstr(x: Any) -> str:
    """JSON of a (repeated) name or id; cached because the same few values recur endlessly."""
    return json.dumps(x)


class _Out:
    """Pretty (kineto's odd layout) or compact event writer into a text stream."""

    def __init__(self, fh: IO[str], pretty: bool):
        self.fh, self.pretty, self.first = fh, pretty, True

    def event(self, pretty: str, compact: str) -> None:
        if self.pretty:
            self.fh.write(pretty if self.first else ",\n" + pretty)
        else:
            self.fh.write(compact if self.first else ", " + compact)
        self.first = False


def _pretty_x(cat: str, name: str, pid: Any, tid: Any, ts: float, dur: float, args: str) -> Tuple[str, str]:
    pretty = (f'  {{\n    "ph": "X",\n    "cat": "{cat}",\n    "name": {_jstr(name)},\n'
              f'    "pid": {_jstr(pid)},\n    "tid": {_jstr(tid)},\n    "ts": {ts:.3f},\n'
              f'    "dur": {dur:.3f}\n    ,\n    "args": {{\n      {args}\n    }}\n  }}')
    compact = (f'{{"ph": "X", "cat": "{cat}", "name": {_jstr(name)}, "pid": {_jstr(pid)}, '
               f'"tid": {_jstr(tid)}, "ts": {ts:.3f}, "dur": {dur:.3f}, "args": {{{args}}}}}')
    return pretty, compact


def _pretty_meta(name: str, ts: float, pid: Any, tid: Any, key: str, value: Any) -> Tuple[str, str]:
    pretty = (f'  {{\n    "ph": "M",\n    "name": "{name}",\n    "ts": {ts:.3f},\n    "pid": {_jstr(pid)},\n'
              f'    "tid": {_jstr(tid)},\n    "args": {{\n      "{key}": {_jstr(value)}\n    }}\n  }}')
    compact = (f'{{"ph": "M", "name": "{name}", "ts": {ts:.3f}, "pid": {_jstr(pid)}, "tid": {_jstr(tid)}, '
               f'"args": {{"{key}": {_jstr(value)}}}}}')
    return pretty, compact


def write_torch_trace(path: str, n_steps: int = 3, seed: int = 0, gz: bool = False, pretty: bool = True, *,
                      host: str = DEFAULT_HOST, pid: int = DEFAULT_PID, first_step: int = 2, n_layers: int = 40,
                      start_ns: Optional[int] = None, trace_name: Optional[str] = None) -> int:
    """A PyTorch profiler (kineto) Chrome trace: header keys, ``ph:M`` metadata, ``ProfilerStep#N``
    user annotations, ``cpu_op`` events with ``record_shapes`` args, ``fwdbwd`` flow pairs,
    ``[memory]`` instant events, ``python_function`` frames, the ``Spans`` track and trailer.

    Streamed step by step (memory does not grow with ``n_steps``; ~0.9 MB per step pretty);
    ``gz`` wraps the stream in gzip like ``tensorboard_trace_handler(use_gzip=True)``.
    Returns the file size.
    """
    start_ns = start_ns if start_ns is not None else DEFAULT_TIMESTAMP * 10**9
    t0 = (start_ns - _KINETO_BASE_NS) / 1000.0  # kineto "ts" = µs since its time base
    trace_id = "%032X" % random.Random(seed).getrandbits(128)
    with _open_text(path, gz, start_ns // 10**9) as fh:
        _torch_header(fh, pretty, trace_id, host)
        out = _Out(fh, pretty)
        bg_tid = pid + 3
        for ph_name, tid, key, val in (("process_name", 0, "name", "python"), ("process_labels", 0, "labels", "CPU"),
                                       ("process_sort_index", 0, "sort_index", pid),
                                       ("thread_name", pid, "name", f"thread {pid} (python)"),
                                       ("thread_sort_index", pid, "sort_index", pid),
                                       ("thread_name", bg_tid, "name", f"thread {bg_tid} (python)"),
                                       ("thread_sort_index", bg_tid, "sort_index", bg_tid)):
            out.event(*_pretty_meta(ph_name, t0 + 150, pid, tid, key, val))
        starts = [t0 + 200 + i * 18_500 for i in range(n_steps)]
        ev_idx = _torch_ops_section(out, n_steps, seed, starts, first_step, n_layers, pid)
        ev_idx = _torch_memory_section(out, n_steps, seed, starts, first_step, n_layers, pid, ev_idx)
        end = _torch_python_section(out, n_steps, seed, starts, first_step, n_layers, pid, bg_tid, ev_idx)
        _torch_trailer(out, t0, end)
        fh.write(f'\n  ],"traceName": {json.dumps(trace_name or path)} }}' if pretty
                 else f'], "traceName": {json.dumps(trace_name or path)}}}')
    return os.path.getsize(path)


class _open_text:
    """A text stream into ``path``, gzip'd (header named like Python's gzip) when ``gz``."""

    def __init__(self, path: str, gz: bool, mtime: int):
        self.path, self.gz, self.mtime = path, gz, mtime

    def __enter__(self) -> IO[str]:
        self.raw = open(self.path, "wb")
        inner: IO[bytes] = self.raw
        if self.gz:
            name = os.path.basename(self.path)
            self.gzf = gzip.GzipFile(filename=name[:-3] if name.endswith(".gz") else name, mode="wb",
                                     fileobj=self.raw, compresslevel=9, mtime=self.mtime)
            inner = self.gzf
        self.text = io.TextIOWrapper(io.BufferedWriter(_NoClose(inner), 1 << 20), encoding="utf-8")
        return self.text

    def __exit__(self, *exc: Any) -> None:
        self.text.close()
        if self.gz:
            self.gzf.close()
        self.raw.close()


class _NoClose(io.RawIOBase):
    """Lets a TextIOWrapper be closed without closing the gzip/file underneath."""

    def __init__(self, inner: IO[bytes]):
        self.inner = inner

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.inner.write(b)
        return len(b)


def _torch_header(fh: IO[str], pretty: bool, trace_id: str, host: str) -> None:
    if pretty:  # kineto's exact indentation quirks, including the blank line with 4 spaces
        fh.write(' {\n    "schemaVersion": 1,\n    "deviceProperties": [],\n    \n'
                 f'      "trace_id": "{trace_id}",\n      "with_stack": 1,\n      "profile_memory": 1,\n'
                 f'      "record_shapes": 1,\n      "host_name": {json.dumps(host)},\n'
                 f'    "displayTimeUnit": "ms",\n    "baseTimeNanoseconds": {_KINETO_BASE_NS},\n'
                 '    "traceEvents": [\n    \n')
    else:
        fh.write(f'{{"schemaVersion": 1, "deviceProperties": [], "trace_id": "{trace_id}", "with_stack": 1, '
                 f'"profile_memory": 1, "record_shapes": 1, "host_name": {json.dumps(host)}, '
                 f'"displayTimeUnit": "ms", "baseTimeNanoseconds": {_KINETO_BASE_NS}, "traceEvents": [')


def _torch_ops_section(out: _Out, n_steps: int, seed: int, starts: List[float], first_step: int,
                       n_layers: int, pid: int) -> int:
    ev_idx = ext_id = 0
    for i in range(n_steps):
        st = _TorchStep(first_step + i, seed, starts[i], n_layers)
        flows = sorted(st.flows, key=lambda f: f[2])
        fi = 0
        for cat, name, ts, dur, args in st.ops:
            ext_id += 1
            full = f'"External id": {ext_id},' + (args + ', ' if args else '"Record function id": 0, ')
            out.event(*_pretty_x(cat, name, pid, pid, ts, dur, full + f'"Ev Idx": {ev_idx}'))
            ev_idx += 1
            while fi < len(flows) and flows[fi][2] <= ts:
                out.event(*_pretty_flow(flows[fi], pid))
                fi += 1
        for f in flows[fi:]:
            out.event(*_pretty_flow(f, pid))
    return ev_idx


def _pretty_flow(flow: Tuple[str, int, float], pid: int) -> Tuple[str, str]:
    ph, fid, ts = flow
    bp = '\n    , "bp": "e"' if ph == "f" else "\n    "
    pretty = (f'  {{\n    "ph": "{ph}",\n    "id": {fid},\n    "pid": {pid},\n    "tid": {pid},\n'
              f'    "ts": {ts:.3f},\n    "cat": "fwdbwd",\n    "name": "fwdbwd"{bp}\n  }}')
    compact = (f'{{"ph": "{ph}", "id": {fid}, "pid": {pid}, "tid": {pid}, "ts": {ts:.3f}, "cat": "fwdbwd", '
               f'"name": "fwdbwd"' + (', "bp": "e"}' if ph == "f" else "}"))
    return pretty, compact


def _torch_memory_section(out: _Out, n_steps: int, seed: int, starts: List[float], first_step: int,
                          n_layers: int, pid: int, ev_idx: int) -> int:
    addr = 94384608397376
    for i in range(n_steps):
        st = _TorchStep(first_step + i, seed, starts[i], n_layers, with_args=False)
        for ts, nbytes, total in st.mem:
            addr += 256
            args = (f'"Total Reserved": 0, "Total Allocated": {total}, "Bytes": {nbytes}, "Device Id": -1, '
                    f'"Device Type": 0, "Addr": {addr}, "finished": false, "Ev Idx": {ev_idx}')
            pretty = (f'  {{\n    "ph": "i",\n    \n    "cat": "cpu_instant_event",\n    "s": "t",\n'
                      f'    "name": "[memory]",\n    "pid": {pid},\n    "tid": {pid},\n    "ts": {ts:.3f}\n'
                      f'    ,\n    "args": {{\n      {args}\n    }}\n  }}')
            compact = (f'{{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": {pid}, '
                       f'"tid": {pid}, "ts": {ts:.3f}, "args": {{{args}}}}}')
            out.event(pretty, compact)
            ev_idx += 1
    return ev_idx


def _torch_python_section(out: _Out, n_steps: int, seed: int, starts: List[float], first_step: int,
                          n_layers: int, pid: int, bg_tid: int, ev_idx: int) -> float:
    py_id = 1
    out.event(*_pretty_x("python_function", "threading.py(1002): _bootstrap", pid, bg_tid, starts[0] - 100,
                         n_steps * 18_500.0, f'"Python parent id": null, "Python id": {py_id}, "Ev Idx": {ev_idx}'))
    ev_idx += 1
    end = starts[0]
    for i in range(n_steps):
        st = _TorchStep(first_step + i, seed, starts[i], n_layers, with_args=False)
        parent = None
        for frame, ts, dur in st.py:
            py_id += 1
            args = f'"Python parent id": {_jstr(parent)}, "Python id": {py_id}, "Ev Idx": {ev_idx}'
            out.event(*_pretty_x("python_function", frame, pid, pid, ts, dur, args))
            ev_idx += 1
            parent = py_id if py_id % 5 else None
        end = st.end
    return end


def _torch_trailer(out: _Out, t0: float, end: float) -> None:
    span_start = t0 + 100
    out.event(*_pretty_x("Trace", "PyTorch Profiler (0)", "Spans", "PyTorch Profiler", span_start,
                         end - span_start, '"Op count": 0'))
    out.event(*_pretty_meta("process_sort_index", span_start, "Spans", 0, "sort_index", 536870912))
    for name, pid, tid, ts in (("Iteration Start: PyTorch Profiler", "Traces", "Trace PyTorch Profiler", span_start),
                               ("Record Window End", "", "", end + 500)):
        pretty = (f'  {{\n    "ph": "i",\n    \n    "s": "g",\n    "name": "{name}",\n    "pid": "{pid}",\n'
                  f'    "tid": "{tid}",\n    "ts": {ts:.3f}\n    \n  }}')
        compact = (f'{{"ph": "i", "s": "g", "name": "{name}", "pid": "{pid}", "tid": "{tid}", "ts": {ts:.3f}}}')
        out.event(pretty, compact)
