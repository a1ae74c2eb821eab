"""Profile sessions: XSpace (``xplane.pb``) model and encoders, secondary Chrome traces, caches.

Why one module: one profile session as test data — the XSpace model, its
two encoders of the same model (the hand-written wire form, always available, and the protobuf
classes when installed) and the files written beside it (Chrome traces, caches) describe the same
session with the same ids and timestamps; only the demo command, tests and benches use it.
"""
from __future__ import annotations

import calendar
import gzip
import json
import os
import random
import struct
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from tb_footprint_plugin.synth.common import (
    DEFAULT_HOST,
    DEFAULT_PID,
    DEFAULT_TIMESTAMP,
    HOST_ONLY_TOOLS,
    STALE_CACHE_VERSION,
    XPROF_VERSION,
    as_bytes,
)

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
        return out + _f_len(num, as_bytes(value))
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
        setattr(dst, f"{kind}_value", as_bytes(value) if kind == "bytes" else value)

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


