"""The deterministic demo logdir: a realistic mix of TF 2 / Keras 3, Keras 2, TF1, PyTorch and JAX
runs in which profile data is the bulk of the bytes (as in real profiled logdirs).

``python -m tb_footprint_plugin.demo DIR [--seed N] [--scale X] [--overwrite]``

Why one module: it is one command, ``tb-footprint demo``: the seven run builders (half its lines)
and the rule of what in a folder is the demo's, which ``--overwrite`` removes (the marker's
digests, the staging folder's mark, the state folder only when all it records is the demo's).
Split, the second part would be a module of its own at the demo's layer used by nothing else.
"""
from __future__ import annotations

import argparse
import errno
import json
import math
import os
import random
import shutil
import stat
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from tb_footprint_plugin import synth
from tb_footprint_plugin.codes import Finding, Outcome
from tb_footprint_plugin.scan import categories
from tb_footprint_plugin.storage import jsondoc
from tb_footprint_plugin.storage.files import matches, sha256_file
from tb_footprint_plugin.storage.paths import DEMO_MARKER, state_dir
from tb_footprint_plugin.storage.private import why_not_ours
from tb_footprint_plugin.storage.regular import open_regular, read_capped

MARKER = DEMO_MARKER
_STAGING = ".footprint-demo-staging"
_HOST = "demo-host"
_T0 = 1795990000  # every timestamp below is an offset from this fixed instant
_FAKE_ROOT = "/srv/footprint-demo"  # paths embedded in files never depend on the target dir


@dataclass(frozen=True)
class _Run:
    """What a run builder gets: where to write, and its deterministic seed, scale and start time."""

    root: str  # the staging logdir
    rel: str  # the run's path relative to the logdir ("mnist/baseline")
    seed: int
    scale: float
    ts: int

    @property
    def dir(self) -> str:
        return os.path.join(self.root, *self.rel.split("/"))

    def session(self, sub: str, dt: int, n_events: int, seed: int, **kw: Any) -> List[str]:
        """A profile session under ``<run>/<sub>``; embedded paths use a fixed fake root."""
        run_dir = os.path.join(self.dir, sub) if sub else self.dir
        return synth.write_profile_session(
            run_dir, synth.session_name_for(self.ts + dt), _HOST, n_events, seed=seed,
            repository_path=f"{_FAKE_ROOT}/{self.rel}" + (f"/{sub}" if sub else ""), **kw)


Builder = Callable[[_Run], List[str]]


# --- helpers ----------------------------------------------------------------------------------
def _n(base: float, scale: float, minimum: int = 1) -> int:
    """``base`` scaled, never below ``minimum``."""
    return max(minimum, int(round(base * scale)))


def _finish(w: synth.EventWriter) -> str:
    """Close a writer and stamp the file with its last wall time (deterministic mtimes)."""
    w.close()
    t = int(w.wall_time)
    os.utime(w.path, (t, t))
    return w.path


def _loss_curve(rng: random.Random, step: int, total: int, start: float = 2.3, floor: float = 0.05) -> float:
    return floor + (start - floor) * math.exp(-4.0 * step / max(1, total)) + rng.uniform(-0.03, 0.03)


# --- Keras 3 (profile inside train/) and Keras 2 (profile at the run root) ---------------------
def _keras_train(run: str, seed: int, scale: float, ts: int, *, epochs: int = 5, lr: float = 1e-3) -> List[str]:
    rng = random.Random(seed)
    layers = ["small_cnn/conv1", "small_cnn/conv2", "small_cnn/fc1", "small_cnn/logits"]
    steps_per_epoch = _n(120, scale)
    w = synth.EventWriter(run, timestamp=ts, host=_HOST, pid=25000 + seed % 1000, index=0, tick=0.004)
    w.graph_summary("keras", 0, synth.keras_model_config(6), "graph_keras_model")
    total = epochs * steps_per_epoch
    for epoch in range(epochs):
        for b in range(steps_per_epoch):
            step = epoch * steps_per_epoch + b + 1
            loss = _loss_curve(rng, step, total)
            w.scalar("batch_loss", step, loss)
            w.scalar("batch_accuracy", step, max(0.0, min(1.0, 1.0 - loss / 2.5)))
            if step == 6:  # profile_batch's traced step: the graph + run metadata summary
                w.graph_summary("batch_6", 6, synth.make_run_metadata(30, seed=seed, with_graph=True)
                                .SerializeToString(deterministic=True), "graph_run_metadata_graph")
        w.scalar("epoch_loss", epoch, _loss_curve(rng, (epoch + 1) * steps_per_epoch, total))
        w.scalar("epoch_accuracy", epoch, min(1.0, 0.5 + 0.1 * epoch))
        w.scalar("epoch_learning_rate", epoch, lr)
        for i, layer in enumerate(layers):
            for part in ("kernel", "bias"):
                values = [rng.gauss(0, 0.1 / (1 + epoch)) for _ in range(400 if part == "kernel" else 32)]
                w.histogram(f"{layer}/{part}/histogram", epoch, values)
                shape = (3, 3) if (part == "kernel" and i == 0) else (32, 16) if part == "kernel" else (1, 16)
                w.image(f"{layer}/{part}/image", epoch, synth.make_png(*shape, seed=seed + epoch * 10 + i,
                                                                     channels=1), *shape)
    return [_finish(w)]


def _keras_validation(run: str, seed: int, scale: float, ts: int, *, epochs: int = 5) -> List[str]:
    rng = random.Random(seed + 7)
    w = synth.EventWriter(run, timestamp=ts, host=_HOST, pid=25000 + seed % 1000, index=1, tick=0.4)
    for epoch in range(epochs):
        loss = _loss_curve(rng, epoch + 1, epochs)
        it = (epoch + 1) * _n(120, scale)
        w.scalar("epoch_loss", epoch, loss)
        w.scalar("epoch_accuracy", epoch, min(1.0, 1.0 - loss / 2.5))
        w.scalar("evaluation_loss_vs_iterations", it, loss)
        w.scalar("evaluation_accuracy_vs_iterations", it, min(1.0, 1.0 - loss / 2.5))
    return [_finish(w)]


def _mnist(viewed: bool, lr: float) -> Builder:
    def build(r: _Run) -> List[str]:
        out = _keras_train(os.path.join(r.dir, "train"), r.seed, r.scale, r.ts, lr=lr)
        out += _keras_validation(os.path.join(r.dir, "validation"), r.seed, r.scale, r.ts + 1)
        # Keras 3: the profile session lives inside train/
        return out + r.session("train", 3, _n(90_000, r.scale, 500), r.seed, with_caches=viewed)
    return build


def _keras2(r: _Run) -> List[str]:
    out = _keras_train(os.path.join(r.dir, "train"), r.seed, r.scale * 0.6, r.ts, epochs=3)
    out += _keras_validation(os.path.join(r.dir, "validation"), r.seed, r.scale * 0.6, r.ts + 1, epochs=3)
    # Keras 2 profiles into <log_dir>/plugins/profile: the run root has no event file of its own
    return out + r.session("", 2, _n(90_000, r.scale, 500), r.seed)


# --- PyTorch: SummaryWriter + torch.profiler traces -------------------------------------------
def _resnet_torch(r: _Run) -> List[str]:
    run, seed, scale, ts = r.dir, r.seed, r.scale, r.ts
    rng = random.Random(seed)
    pid = 25684
    w = synth.EventWriter(run, timestamp=ts, host=_HOST, pid=pid, style="torch", tick=0.003)
    w.graph_def(synth.make_graph_def(60, seed=seed))  # torch add_graph: GraphDef + RunMetadata
    w.run_metadata("step1", 0, synth.make_run_metadata(2, seed=seed))
    steps = _n(300, scale, 10)
    params = ["conv1.weight", "conv1.bias", "bn1.weight", "conv2.weight", "fc1.weight", "fc2.weight"]
    for step in range(steps):
        loss = _loss_curve(rng, step, steps)
        w.legacy_simple_value("train/loss", step, loss)
        w.legacy_simple_value("train/accuracy", step, max(0.0, 1.0 - loss / 2.4))
        w.legacy_simple_value("train/lr", step, 0.05 * 0.8 ** (step // 50))
        w.legacy_simple_value("perf/step_time_ms", step, rng.uniform(9, 40))
        if step % 75 == 0:
            for p in params:
                w.legacy_histo(f"params/{p}", step, [rng.gauss(0, 0.1) for _ in range(300)])
                w.legacy_histo(f"grads/{p}", step, [rng.gauss(0, 0.01) for _ in range(300)])
        if step % 50 == 0:
            w.legacy_image("inputs", step, synth.make_png(128, 32, seed=seed + step, noise=255), 128, 32)
        if step % 100 == 0:
            w.text("notes/text_summary", step, f"step {step}: loss={loss:.4f}")
    out = [_finish(w)]
    # add_hparams writes a sub-run named by time.time()
    hp = synth.EventWriter(os.path.join(run, f"{ts + 3}.7669468"), timestamp=ts + 3, host=_HOST, pid=pid,
                           index=1, style="torch")
    hp.hparams({"lr": 0.05, "momentum": 0.9, "batch": 32, "arch": "SmallNet"},
               {"hparam/accuracy": 0.979, "hparam/final_loss": 0.0123})
    out.append(_finish(hp))
    for i in range(3):  # schedule(wait=1, warmup=1, active=3, repeat=3): steps 2-4, 7-9, 12-14
        ns = (ts + 1) * 10**9 + i * 92_490_000 + 836_083_456
        name = synth.torch_trace_name(_HOST, pid, ns)
        path = os.path.join(run, name)
        synth.write_torch_trace(path, _n(3, scale), seed + i, host=_HOST, pid=pid, first_step=2 + 5 * i,
                                start_ns=ns - 60_000_000, trace_name=f"{_FAKE_ROOT}/resnet_torch/{name}")
        os.utime(path, (ns // 10**9, ns // 10**9))
        out.append(path)
    return out


# --- JAX: no event files at all ---------------------------------------------------------------
def _jax(r: _Run) -> List[str]:
    n = _n(60_000, r.scale, 500)
    out = r.session("", 0, n, r.seed, flavor="jax", trace_json=True)
    return out + r.session("", 1, n, r.seed + 1, flavor="jax", trace_json=True, perfetto=True)


# --- TF 2 tf.summary of every kind + a TF1 FileWriter run --------------------------------------
def _summary_mix(r: _Run) -> List[str]:
    run, seed, scale, ts = r.dir, r.seed, r.scale, r.ts
    rng = random.Random(seed)
    w = synth.EventWriter(run, timestamp=ts, host=_HOST, pid=25654, tick=0.0005)
    w.hparams({"learning_rate": 0.003, "optimizer": "adam", "units": 128}, ["loss", "eval/accuracy"],
              trial_id="summary_mix-0", start_time_secs=ts)
    w.graph_def(synth.make_graph_def(30, seed=seed))
    w.graph_summary("step_fn_graph", 0, synth.make_run_metadata(30, seed=seed, with_graph=True)
                    .SerializeToString(deterministic=True), "graph_run_metadata_graph")
    w.graph_summary("step_fn_profile", 1, synth.make_run_metadata(30, seed=seed)
                    .SerializeToString(deterministic=True), "graph_run_metadata")
    steps = _n(1000, scale, 20)
    tags = ["loss", "accuracy", "learning_rate", "grad_norm", "throughput/examples_per_sec", "memory/host_mb"]
    for step in range(steps):
        loss = _loss_curve(rng, step, steps)
        for tag, v in zip(tags, (loss, 1 - loss / 2.4, 3e-3 * 0.99 ** (step // 10), rng.uniform(0.1, 3),
                                 rng.uniform(900, 1100), 800 + step * 0.01)):
            w.scalar(tag, step, v)
        if step % 50 == 0:
            w.scalar("eval/loss", step, loss * 1.1)
            w.scalar("eval/accuracy", step, 1 - loss / 2.2)
            w.text("notes", step, f"### step {step}\n* loss **{loss:.4f}**")
        if step % 20 == 0:
            for t in ("weights/w1", "weights/b1", "weights/w2"):
                w.histogram(t, step, [rng.gauss(0, 1) for _ in range(200)])
            w.pr_curve("pr/validation", step, [rng.random() < 0.5 for _ in range(64)],
                       [rng.random() for _ in range(64)], num_thresholds=21)
        if step % 100 == 0:
            w.image("samples/generated", step, [synth.make_png(32, 32, seed=step + k) for k in range(2)], 32, 32)
        if step % 250 == 0:
            w.audio("audio/tone", step, synth.make_wav(4000, seed=step, freq=220 + step), label="tone")
    return [_finish(w)] + r.session("", 1, _n(30_000, scale, 500), seed)


def _tf1_legacy(r: _Run) -> List[str]:
    run, seed, scale, ts = r.dir, r.seed, r.scale, r.ts
    rng = random.Random(seed)
    # TF1 FileWriter: no ".v2", metadata only on a tag's first value, SessionLog START, MetaGraphDef
    w = synth.EventWriter(run, timestamp=ts, host=_HOST, pid=19999, suffix="", metadata="first", tick=0.01)
    w.session_log_start(0)
    w.graph_def(synth.make_graph_def(25, seed=seed))
    w.meta_graph_def(synth.make_meta_graph_def(25, seed=seed))
    for step in range(_n(400, scale, 10)):
        w.legacy_simple_value("xent", step, _loss_curve(rng, step, 400))
        w.scalar("accuracy", step, rng.uniform(0.8, 1.0))
        if step % 100 == 0:
            w.legacy_histo("layer1/weights", step, [rng.gauss(0, 0.2) for _ in range(200)])
            w.legacy_image("input/image", step, synth.make_png(28, 28, seed=step, channels=1), 28, 28, colorspace=1)
            w.legacy_audio("input/audio", step, synth.make_wav(2000, seed=step))
            w.run_metadata(f"step{step}", step, synth.make_run_metadata(15, seed=step))
    w.log_message(400, "finished")
    return [_finish(w)]


#: (run path relative to the logdir, builder, seed, start-time offset) in generation order
_RUNS: Sequence[tuple] = (
    ("mnist/baseline", _mnist(viewed=True, lr=1e-3), 11, 0),
    ("mnist/lr_0.01", _mnist(viewed=False, lr=1e-2), 12, 600),
    ("keras2_cifar", _keras2, 13, 1200),
    ("resnet_torch", _resnet_torch, 14, 1800),
    ("jax_profile", _jax, 15, 2400),
    ("tf_summary_mix", _summary_mix, 16, 3000),
    ("tf1_legacy", _tf1_legacy, 17, 3600),
)


# --- safety: never touch what the demo did not write --------------------------------------------
#: what a marker records of each file (``digests``: name -> size and sha256) since version 2; a
#: version 1 marker named files only, and a name alone never lets a demo remove a file
_MARKER_VERSION = 2
#: the largest marker read (a demo's lists ~60 files in ~10 KB)
_MARKER_CAP = 4 << 20
#: inside the staging folder: what tells it from a folder of that name anyone else made
_STAGING_MARK = MARKER
Digest = Tuple[int, str]  # (size, sha256)


def _read_marker(target: str) -> Optional[Dict[str, Any]]:
    """The previous demo's marker, None when there is none. ``FileExistsError`` naming it when it
    cannot be the demo's own: not a regular file of this user that no one else may write (in a
    shared logdir anyone may create one at its top), unreadable, or of a version that recorded no
    digests."""
    path = os.path.join(target, MARKER)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    why, data = why_not_ours(st, want_dir=False), None
    if why is None:
        try:
            with open_regular(path) as fh:
                raw = read_capped(fh, _MARKER_CAP)
            data = jsondoc.loads(raw) if len(raw) <= _MARKER_CAP else None
        except (OSError, ValueError):
            pass
        if not (isinstance(data, dict) and isinstance(data.get("files"), list)):
            why = "is not a demo's marker that can be read"
        elif not isinstance(data.get("digests"), dict):
            why = ("records no file digests (an older version wrote it), so the demo cannot tell its files from "
                   "yours and removes none: remove the previous demo yourself, or write the demo to an empty folder")
    if why:
        raise FileExistsError(f"{path}: {why}; nothing was changed")
    return data


def _digests(marker: Dict[str, Any]) -> Dict[str, Digest]:
    """The (size, sha256) a marker records of each file; an entry of another form records nothing."""
    out: Dict[str, Digest] = {}
    for rel, d in marker.get("digests", {}).items():
        if isinstance(d, dict) and type(d.get("size")) is int and isinstance(d.get("sha256"), str):
            out[rel] = (d["size"], d["sha256"])
    return out


def _inside(target: str, rel: str) -> bool:
    full = os.path.realpath(os.path.join(target, rel))
    return full.startswith(os.path.realpath(target) + os.sep) and not os.path.isabs(rel)


def _clashes(target: str, files: Sequence[str], ours: Dict[str, os.stat_result]) -> List[str]:
    """The new demo's files that would land outside ``target`` or on a file the demo did not write."""
    return [f for f in files if not _inside(target, f) or (os.path.lexists(os.path.join(target, f)) and f not in ours)]


def _previous_files(target: str, marker: Dict[str, Any],
                    derived: Dict[str, Digest]) -> Tuple[Dict[str, os.stat_result], List[str]]:
    """What an overwrite removes of the previous demo: each file its marker lists, or one of the
    demo's reductions wrote (``derived``), that still holds the bytes recorded (name -> its lstat);
    and what it lists that holds anything else now (written to since, reduced with backups that
    stay, a folder, a link, or listed without a digest), which refuses the overwrite."""
    digests = _digests(marker)
    names = [r for r in marker["files"] if isinstance(r, str)] + sorted(derived)
    ours: Dict[str, os.stat_result] = {}
    changed: List[str] = []
    for rel in dict.fromkeys(names):
        if not _inside(target, rel):
            continue  # a tampered marker must not make us look outside the demo
        path = os.path.join(target, rel)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError:
            changed.append(rel)
            continue
        want = [d for d in (digests.get(rel), derived.get(rel)) if d]
        if stat.S_ISREG(st.st_mode) and any(st.st_size == n and matches(path, sha, n) for n, sha in want):
            ours[rel] = st
        else:
            changed.append(rel)
    return ours, changed


def _remove_previous(target: str, ours: Dict[str, os.stat_result], done: str = "nothing was changed") -> None:
    """Remove the files ``_previous_files`` found the demo's, then the folders they leave empty.
    Each is looked at again first: one replaced or written to since (its inode, size or mtime)
    refuses the overwrite before anything is removed; ``done`` says what was changed before."""
    moved = []
    for rel, st in ours.items():
        try:
            now = os.lstat(os.path.join(target, rel))
        except OSError:
            now = None
        if now is None or (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) != \
                (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns):
            moved.append(rel)
    if moved:
        raise FileExistsError(f"{os.path.join(target, moved[0])}: changed while the demo was being written "
                              f"({len(moved)} file(s)); {done}")
    dirs = set()
    for rel in ours:
        os.remove(os.path.join(target, rel))
        d = os.path.dirname(rel)
        while d:
            dirs.add(d)
            d = os.path.dirname(d)
    for d in sorted(dirs, key=lambda p: -p.count(os.sep)):
        try:
            os.rmdir(os.path.join(target, d))
        except OSError:
            pass  # not empty: someone else's files live there too


def _check_staging(staging: str) -> None:
    """``FileExistsError`` unless ``staging`` is absent or a staging folder this user's demo made
    (a real folder of ours, holding our mark): only then is what it holds an interrupted demo's,
    to remove."""
    try:
        why = why_not_ours(os.lstat(staging))
    except FileNotFoundError:
        return
    if why is None:
        try:
            why = why_not_ours(os.lstat(os.path.join(staging, _STAGING_MARK)), want_dir=False)
        except OSError:
            why = f"holds no {_STAGING_MARK}"
        why = why and f"its {_STAGING_MARK} {why}"
    if why:
        raise FileExistsError(f"{staging}: not a staging folder this demo made ({why}); nothing was changed: "
                              "remove it yourself")


def _make_staging(staging: str) -> None:
    """The staging folder (private to this user), with its mark."""
    os.mkdir(staging, 0o700)
    os.close(os.open(os.path.join(staging, _STAGING_MARK), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                     0o600))


def _rel_files(root: str) -> List[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for f in sorted(filenames):
            out.append(os.path.relpath(os.path.join(dirpath, f), root))
    return out


# --- summary ------------------------------------------------------------------------------------
def _runs_and_sessions(files: Sequence[str]) -> Dict[str, List[str]]:
    """TensorBoard runs (dirs with summary event files) and profile sessions as xprof names them."""
    runs, sessions = set(), set()
    for rel in files:
        parts = rel.split(os.sep)
        if categories.is_summary_event_file_name(parts[-1]):
            runs.add("/".join(parts[:-1]) or ".")
        for i in range(len(parts) - 3):
            if parts[i:i + 2] == ["plugins", "profile"]:
                sessions.add("/".join(parts[:i] + [parts[i + 2]]))
    return {"runs": sorted(runs), "profile_sessions": sorted(sessions)}


def _category(rel: str) -> str:
    parts = tuple(rel.split(os.sep))
    name = parts[-1]
    if categories.is_summary_event_file_name(name):
        return "event_files"
    return categories.classify_file(parts[:-1], name)


def summarize(target: str, files: Sequence[str]) -> Dict[str, Any]:
    """Bytes per category (event files lumped together) and the profile share, from lstat."""
    by_cat: Dict[str, int] = {}
    for rel in files:
        size = os.lstat(os.path.join(target, rel)).st_size
        cat = _category(rel)
        by_cat[cat] = by_cat.get(cat, 0) + size
    total = sum(by_cat.values())
    profile = sum(v for k, v in by_cat.items() if k in categories.PROFILE_CATEGORIES)
    return {"total_bytes": total, "profile_bytes": profile,
            "profile_share": profile / total if total else 0.0,
            "bytes_by_category": dict(sorted(by_cat.items()))}


# --- the entry points -----------------------------------------------------------------------------
#: what the demo writes at scale 1 (measured: 25.0 MB; it grows in proportion, 49.9 MB at 2)
DEMO_BYTES_AT_SCALE_1 = 25_000_000
#: room the demo leaves free on the disk it writes to (the reduce's vault and journal need some)
DEMO_FREE_MARGIN = 64 * 1024 * 1024


class NoSpaceForDemo(OSError):
    """The demo would not fit on the disk of its folder; nothing was written."""

    def __init__(self, target: str, why: str):
        super().__init__(errno.ENOSPC, why, target)

    def __str__(self) -> str:  # the folder and why, without OSError's "[Errno 28]"
        return f"{self.filename}: {self.strerror}"


def demo_bytes(scale: float) -> int:
    """About what ``generate_demo`` writes at ``scale`` (with a tenth to spare)."""
    return int(DEMO_BYTES_AT_SCALE_1 * max(scale, 0.05) * 1.1)


def generate_demo(target_dir: str, *, seed: int = 0, scale: float = 1.0, overwrite: bool = False) -> Dict[str, Any]:
    """Write the demo logdir into ``target_dir`` and return a summary: ``runs`` (TensorBoard runs),
    ``profile_sessions`` (as xprof names them), ``groups``, ``files``, ``total_bytes``,
    ``profile_bytes``, ``profile_share`` and ``bytes_by_category`` (event files lumped together).

    Deterministic: the same ``seed`` and ``scale`` give byte-identical files (and mtimes).
    Refuses a non-empty ``target_dir`` unless ``overwrite``; even then it removes only the files
    the previous demo recorded in ``.footprint-demo`` that still hold the bytes recorded there (size
    and sha256), or that the demo's own reductions wrote, and refuses (``FileExistsError`` naming a
    file, nothing changed) when one holds anything else or a new file would replace one the demo
    did not write. A state folder that stays (it records what the demo did not write) has the
    demo's own reductions restored after every such refusal, right before the removal. Files are
    generated in a staging directory first and moved into place at the end.
    """
    if scale <= 0:
        raise ValueError("scale must be > 0")
    target = os.path.abspath(target_dir)
    there = target
    while not os.path.isdir(there) and os.path.dirname(there) != there:
        there = os.path.dirname(there)
    need, free = demo_bytes(scale), shutil.disk_usage(there).free
    if need + DEMO_FREE_MARGIN > free:
        # said before anything is made: a large --scale would otherwise fill the disk half-way
        raise NoSpaceForDemo(target, f"a demo at scale {scale:g} writes about {need / 1e6:,.0f} MB; "
                                     f"{free / 1e6:,.0f} MB are free there (a smaller --scale fits)")
    os.makedirs(target, exist_ok=True)
    staging = os.path.join(target, _STAGING)
    _check_staging(staging)
    existing = [e for e in os.listdir(target) if e != _STAGING]
    if existing and not overwrite:
        raise FileExistsError(f"{target} is not empty (pass overwrite=True to replace a previous demo)")
    previous = _read_marker(target)
    ours: Dict[str, os.stat_result] = {}
    own: Optional[List[str]] = None  # the state stays: the demo's own reductions in it, undone last
    if previous:
        derived = _demo_state(target, _digests(previous))
        if derived is None:
            # the state stays (it holds what the demo did not write): the demo's own reductions in
            # it are restored, or they would count as freed what the new demo writes whole again
            # (review R17 F16). Only after every refusal (review R20 F1): until then their files
            # count as the demo's where they stand now (gone, or what the reduction wrote)
            own, derived = _demo_reductions(target, _digests(previous))
        ours, changed = _previous_files(target, previous, derived)
        if changed:
            raise FileExistsError(f"{len(changed)} file(s) the previous demo wrote hold other bytes now (written to, "
                                  f"or reduced with backups the vault keeps), e.g. {os.path.join(target, changed[0])}; "
                                  "nothing was changed")
    shutil.rmtree(staging, ignore_errors=True)  # ours (checked above): an interrupted demo's
    _make_staging(staging)
    built = os.path.join(staging, "logs")
    kept: Optional[str] = None
    try:
        groups = _build_all(built, seed, scale)
        files = _rel_files(built)
        clashes = _clashes(target, files, ours)
        if clashes:
            raise FileExistsError(f"{len(clashes)} demo file(s) would replace files the demo did not write, "
                                  f"e.g. {clashes[0]}; nothing was changed")
        digests = {}
        for rel in files:
            p = os.path.join(built, rel)
            digests[rel] = {"size": os.lstat(p).st_size, "sha256": sha256_file(p)}
        if previous:
            done = "nothing was changed"
            if own is not None:
                kept, undone = _restore_demo_reductions(target, own)
                if undone:
                    done = f"nothing else was changed (the demo's own {undone} reduction(s) were restored first)"
                # judged again as the files stand now the reductions are undone
                ours, changed = _previous_files(target, previous, {})
                clashes = changed or _clashes(target, files, ours)
                if clashes:
                    raise FileExistsError(f"{os.path.join(target, clashes[0])}: holds other bytes than the demo "
                                          f"wrote once the demo's own reductions were restored; {done}")
            _remove_previous(target, ours, done)
            _reset_state(target, _digests(previous))
        # the marker first: a demo killed while moving its files leaves each either in the staging
        # folder (ours, removed next time) or in place holding what the marker records
        tmp = os.path.join(staging, MARKER + ".next")
        # 0o644 whatever the umask: a marker others may write is not trusted next time
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644), "w",
                       encoding="utf-8") as fh:
            json.dump({"generator": "tb_footprint_plugin.demo", "version": _MARKER_VERSION, "seed": seed,
                       "scale": scale, "files": files, "digests": digests}, fh, indent=1)
        os.utime(tmp, (_T0, _T0))
        os.replace(tmp, os.path.join(target, MARKER))
        for rel in files:
            dst = os.path.join(target, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.replace(os.path.join(built, rel), dst)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {"target": target, "seed": seed, "scale": scale, "groups": groups, "files": len(files),
            **_runs_and_sessions(files), **summarize(target, files), "state_kept": kept}


def _demo_reductions(target: str, digests: Dict[str, Digest]) -> Tuple[List[str], Dict[str, Digest]]:
    """The kept reductions of the state folder whose backed-up files all held the bytes the marker
    records (the demo's own; op ids newest first), and the files they wrote (name -> (size,
    sha256)); changes nothing. ``FileExistsError`` when one of them lies under a newer kept
    reduction of its run that is not the demo's (it could not be restored without undoing that)."""
    from tb_footprint_plugin import api

    mans = {m.get("op_id"): m for m in api.operations(target)}
    own: List[str] = []
    wrote: Dict[str, Digest] = {}
    users: Dict[str, str] = {}  # run -> its newest kept reduction that is not the demo's
    for o in api.restorable(target):  # newest first
        m = mans.get(o["op_id"])
        if not _all_demos(m, digests):
            users.setdefault(o.get("run"), o["op_id"])
            continue
        if o.get("run") in users:
            raise FileExistsError(f"the demo's own reduction {o['op_id']} of run {o.get('run')!r} lies under a newer "
                                  f"one that is not the demo's ({users[o.get('run')]}); nothing was changed: "
                                  "restore that run yourself first")
        own.append(o["op_id"])
        for c in m.get("created") or []:
            if isinstance(c, dict) and isinstance(c.get("path"), str) and type(c.get("size")) is int \
                    and isinstance(c.get("sha256"), str):
                wrote[c["path"]] = (c["size"], c["sha256"])
    return own, wrote


def _restore_demo_reductions(target: str, ops: Sequence[str]) -> Tuple[str, int]:
    """Restore the demo's own reductions ``ops`` (``_demo_reductions``: newest first, so a run's
    older one comes after its newer; ``api.restore`` by op id); the others (a user's run's) stay as
    they are. Returns what the demo says of the state it keeps, and how many it restored.
    ``FileExistsError`` when one of them cannot be restored (its backups stay)."""
    from tb_footprint_plugin import api

    restored: List[str] = []
    for op in ops:
        outs = api.restore(target, op=op)
        bad = [o for o in outs if o.status != Outcome.RESTORED or o.code is not None]
        if bad:
            raise FileExistsError(f"the demo's own reduction {op} of {target} could not be restored "
                                  f"({bad[0].reason}); its backups stay in the vault"
                                  + (f"; restored first: {', '.join(restored)}" if restored else ""))
        restored.append(op)
    other = next((m for m in api.operations(target) if m.get("op_id") not in restored
                  and m.get("kind") in ("reduce", "retire")), None)
    what = (f"a retired run ({other.get('run')})" if other and other.get("kind") == "retire" else
            f"operations on {other.get('run')}" if other else "what the demo did not write")
    return (f"kept the vault and change log in {state_dir(target)}: they hold {what}"
            + (f"; the demo's own {len(restored)} reduction(s) were restored first" if restored else "")), len(restored)


def _all_demos(m: Optional[dict], digests: Dict[str, Digest]) -> bool:
    """Whether manifest summary ``m`` is a reduction whose every backed-up file held the bytes
    the marker records (a demo file's)."""
    files = m.get("files") if isinstance(m, dict) and m.get("kind") == "reduce" else None
    return bool(files) and all(isinstance(f, dict) and digests.get(f.get("path")) == (f.get("size"), f.get("sha256"))
                               for f in files)


def _demo_state(target: str, digests: Dict[str, Digest]) -> Optional[Dict[str, Digest]]:
    """Whether a new demo may start with an empty vault, journal, ledger and history: only when all
    the state folder records is the previous demo's. Every manifest a reduce (or a restore) whose
    backed-up files held the bytes the marker records (size and sha256), nothing set aside or
    salvaged, no run retired, no unfinished operation: then the files those reductions wrote
    (name -> (size, sha256)), the demo's too ({} without a state folder). None: the state stays
    (a backup of anything else is never deleted)."""
    state = state_dir(target)
    if not os.path.lexists(state):
        return {}
    from tb_footprint_plugin.engine.retire_tree import RETIRED
    from tb_footprint_plugin.engine.vault import Vault

    derived: Dict[str, Digest] = {}
    try:
        for sub in ("journal", RETIRED):  # an unfinished operation, a retired run's only copy
            if os.path.isdir(os.path.join(state, sub)) and os.listdir(os.path.join(state, sub)):
                return None
        vault = Vault(state)
        manifests = vault.manifests()  # the operation log's, and an older version's files
        if vault.unread or any(p.code not in (Finding.OTHER_USERS_STATE, Finding.LOGDIR_NOT_STICKY)
                               for p in vault.problems):
            return None  # a manifest that cannot be read may name anything: the state stays
        for m in manifests:
            if m.get("kind") not in ("reduce", "restore") or m.get("displaced") or m.get("salvaged"):
                return None
            if not all(digests.get(f.get("path")) == (f.get("size"), f.get("sha256")) for f in m.get("files", [])):
                return None
            for c in m.get("created") or []:
                if not isinstance(c["path"], str):
                    return None
                derived[c["path"]] = (c["size"], c["sha256"])
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        return None
    return derived


def _reset_state(target: str, digests: Dict[str, Digest]) -> None:
    """Remove the state folder when ``_demo_state`` says all it records is the previous demo's."""
    if os.path.isdir(state_dir(target)) and _demo_state(target, digests) is not None:
        shutil.rmtree(state_dir(target))


def _build_all(root: str, seed: int, scale: float) -> List[str]:
    for rel, build, run_seed, dt in _RUNS:
        build(_Run(root, rel, run_seed + 1000 * seed, scale, _T0 + dt))
    return [rel for rel, *_ in _RUNS]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tb_footprint_plugin.demo",
                                     description="Write the deterministic Footprint demo logdir.")
    parser.add_argument("target_dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--overwrite", action="store_true", help="replace a previous demo in target_dir")
    args = parser.parse_args(argv)
    try:
        summary = generate_demo(args.target_dir, seed=args.seed, scale=args.scale, overwrite=args.overwrite)
    except (FileExistsError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    mb = summary["total_bytes"] / 1e6
    print(f"wrote {summary['files']} files, {mb:.1f} MB to {summary['target']} "
          f"(profile data {summary['profile_share']:.0%})")
    for cat, n in summary["bytes_by_category"].items():
        print(f"  {categories.label(cat) if cat != 'event_files' else 'event files':<28} {n / 1e6:8.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
