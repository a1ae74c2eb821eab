"""Event files: the protos that go into them and ``EventWriter``, in the shapes real writers use."""
from __future__ import annotations

import io
import json
import os
import random
import struct
import wave
from typing import Any, IO, List, Mapping, Optional, Sequence, Union

from tensorboard.compat.proto import config_pb2, event_pb2, graph_pb2, meta_graph_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

from tb_footprint_plugin.synth.common import (
    DEFAULT_HOST,
    DEFAULT_PID,
    DEFAULT_TIMESTAMP,
    FILE_VERSION,
    TB_SOURCE_WRITER,
    TF_SOURCE_WRITER,
    as_bytes,
)

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
        g = make_graph_def(n_nodes, seed=seed)
        rm.partition_graphs.add().CopyFrom(g)
        # where TF2's trace_export puts the traced graph, and what TensorBoard's Graphs tab draws
        # for a tagged run-metadata graph (graphs_plugin merges the pre-optimization graphs)
        rm.function_graphs.add().pre_optimization_graph.CopyFrom(g)
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


class FastRecordWriter(RecordWriter):
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
        self._records = FastRecordWriter(self._file)
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
            vals += [bytes(wav), as_bytes(label)]
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
        data = graph if isinstance(graph, (bytes, bytearray)) else graph.SerializeToString(deterministic=True)
        self.write_event(event_pb2.Event(wall_time=self._wall(wall_time), graph_def=bytes(data)))

    def meta_graph_def(self, meta: Union[bytes, meta_graph_pb2.MetaGraphDef],
                       wall_time: Optional[float] = None) -> None:
        """``Event.meta_graph_def`` (TF1 ``add_meta_graph``)."""
        data = meta if isinstance(meta, (bytes, bytearray)) else meta.SerializeToString(deterministic=True)
        self.write_event(event_pb2.Event(wall_time=self._wall(wall_time), meta_graph_def=bytes(data)))

    def run_metadata(self, tag: str, step: int, run_metadata: Union[bytes, config_pb2.RunMetadata],
                     wall_time: Optional[float] = None) -> None:
        """``Event.tagged_run_metadata`` (TF1 ``add_run_metadata``, torch ``add_graph``)."""
        data = (run_metadata if isinstance(run_metadata, (bytes, bytearray))
                else run_metadata.SerializeToString(deterministic=True))
        self.write_event(event_pb2.Event(
            wall_time=self._wall(wall_time), step=step,
            tagged_run_metadata=event_pb2.TaggedRunMetadata(tag=tag, run_metadata=bytes(data))))

    def graph_summary(self, tag: str, step: int, data: Union[bytes, str], plugin_name: str,
                      wall_time: Optional[float] = None) -> None:
        """The TF2 graph sub-plugin summaries (content ``"1"``): ``graph_keras_model`` (model JSON),
        ``graph_run_metadata`` / ``graph_run_metadata_graph`` (``trace_export`` RunMetadata)."""
        self.raw_value(tag, step, plugin_name, b"1", _string_tensor([as_bytes(data)], []), wall_time)

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


