"""PyTorch profiler traces (kineto Chrome trace JSON), streamed."""
from __future__ import annotations

import functools
import gzip
import io
import json
import os
import random
from typing import Any, IO, List, Optional, Tuple

from tb_footprint_plugin.synth.common import DEFAULT_HOST, DEFAULT_PID, DEFAULT_TIMESTAMP

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
