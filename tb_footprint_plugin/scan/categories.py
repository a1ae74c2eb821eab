"""The category vocabulary: every byte of a logdir is given exactly one of these names.

File-level categories come from a file's name and place (``classify_file``); bytes inside
event files are split per record into summary-plugin categories by ``eventfile``.
"""
from __future__ import annotations

import fnmatch
import re
from typing import Optional

# --- file-level categories -------------------------------------------------------------
PROFILE_XPLANE = "profile_xplane"  # <host>.xplane.pb: what xprof reads
PROFILE_CACHE = "profile_cache"  # xprof's regenerable caches, rebuilt on the next view
PROFILE_SECONDARY = "profile_secondary"  # trace files xprof ignores when an xplane exists
#: per-tool outputs older profilers wrote beside (or instead of) the xplane: derived from it
PROFILE_TOOL_OUTPUTS = "profile_tool_outputs"
PROFILE_OTHER = "profile_other"  # anything else inside a profile session
PROFILE_EMPTY = "profile_empty"  # *.profile-empty stub event files
TORCH_TRACE = "torch_trace"  # *.pt.trace.json[.gz]
PLUGIN_ASSETS = "plugin_assets"  # <run>/plugins/<name>/... other than profile
CHECKPOINTS = "checkpoints"
OTHER = "other"
SYMLINK = "symlink"  # the link itself (lstat size); its target is never followed
#: Categories given to whole files by name and place (they hold no event records to count).
FILE_LEVEL = frozenset({PROFILE_XPLANE, PROFILE_CACHE, PROFILE_SECONDARY, PROFILE_TOOL_OUTPUTS, PROFILE_OTHER,
                        PROFILE_EMPTY, TORCH_TRACE, PLUGIN_ASSETS, CHECKPOINTS, OTHER, SYMLINK})

# --- event-file record categories (summary plugin names are used verbatim) --------------
SCALARS = "scalars"
HISTOGRAMS = "histograms"
IMAGES = "images"
AUDIO = "audio"
TEXT = "text"
HPARAMS = "hparams"
PR_CURVES = "pr_curves"
GRAPH_DEF = "graph_def"
META_GRAPH_DEF = "meta_graph_def"
TAGGED_RUN_METADATA = "tagged_run_metadata"
SESSION_LOG = "session_log"
FILE_VERSION = "file_version"
EVENTS_OTHER = "events_other"  # log_message, source_metadata, empty events
EVENTS_CORRUPT = "events_corrupt"  # bytes from a bad CRC to the end of the file
EVENTS_INCOMPLETE = "events_incomplete"  # a truncated final record (writer still running)

#: Plugins whose every point the tool promises never to change.
PROTECTED_PLUGINS = frozenset({SCALARS, HPARAMS, TEXT})

#: Categories that are profile data of some kind (the bulk of a profiled logdir).
PROFILE_CATEGORIES = frozenset(
    {PROFILE_XPLANE, PROFILE_CACHE, PROFILE_SECONDARY, PROFILE_TOOL_OUTPUTS, PROFILE_OTHER, PROFILE_EMPTY,
     TORCH_TRACE}
)

#: Human labels and a stable display order for legends.
#: The plugin a legacy ``Summary.Value`` field (the ``value`` oneof) stands for.
LEGACY_PLUGIN = {"simple_value": SCALARS, "histo": HISTOGRAMS, "image": IMAGES, "audio": AUDIO}

LABELS = {
    SCALARS: "scalars",
    HPARAMS: "hparams",
    TEXT: "text",
    HISTOGRAMS: "histograms",
    IMAGES: "images",
    AUDIO: "audio",
    PR_CURVES: "PR curves",
    GRAPH_DEF: "graph (GraphDef)",
    META_GRAPH_DEF: "meta graph",
    TAGGED_RUN_METADATA: "run metadata",
    "graph_keras_model": "Keras model graph",
    "graph_run_metadata": "graph run metadata",
    "graph_run_metadata_graph": "traced graph + run metadata",
    SESSION_LOG: "session log",
    FILE_VERSION: "file version",
    EVENTS_OTHER: "other events",
    EVENTS_CORRUPT: "corrupt event bytes",
    EVENTS_INCOMPLETE: "incomplete tail",
    PROFILE_XPLANE: "profile sessions (xplane)",
    PROFILE_CACHE: "xprof caches",
    PROFILE_SECONDARY: "secondary traces",
    PROFILE_TOOL_OUTPUTS: "profile tool outputs (old format)",
    PROFILE_OTHER: "other profile files",
    PROFILE_EMPTY: ".profile-empty stubs",
    TORCH_TRACE: "PyTorch traces",
    PLUGIN_ASSETS: "plugin assets",
    CHECKPOINTS: "checkpoints",
    SYMLINK: "symlinks",
    OTHER: "other files",
}


def label(category: str) -> str:
    """Human label of a category; custom summary plugins keep their own name."""
    return LABELS.get(category, category)


def is_event_file_name(name: str) -> bool:
    """TensorBoard's rule (``io_wrapper.IsTensorFlowEventsFile``): the basename contains 'tfevents'."""
    return "tfevents" in name


def is_summary_event_file_name(name: str) -> bool:
    """An event file that TensorBoard reads summaries from (not a ``.profile-empty`` stub)."""
    return is_event_file_name(name) and not name.endswith(".profile-empty")


_TORCH_TRACE_RE = re.compile(r"^(.*?)(\.\d+)?\.pt\.trace\.json(?:\.gz)?$")


def is_torch_trace_name(name: str) -> bool:
    """torch-tb-profiler's ``WORKER_PATTERN``: ``<worker>[.<span>].pt.trace.json[.gz]``."""
    return _TORCH_TRACE_RE.match(name) is not None


def torch_worker(name: str) -> Optional[str]:
    """The worker a PyTorch trace belongs to (``host_pid`` for ``host_pid.<ns>.pt.trace.json``)."""
    m = _TORCH_TRACE_RE.match(name)
    return m.group(1) if m else None


# xprof writes these next to the xplane when a session is viewed; all are rebuilt from the
# xplane (xprof/convert/repository.cc and profile_plugin.py name them).
_PROFILE_CACHE_PATTERNS = (
    ".cached_tools.json",
    "cache_version.txt",
    "*.SSTABLE",
    "*.op_stats_v2.pb",
    "*.op_stats.pb",
    "*.dcn_collective_stats.pb",
    "*.smart_suggestion.pb",
    "*.hlo_proto.pb",
)

# Trace exports xprof 2.24 does not read (it reads only *.xplane.pb / *.xplane.riegeli): JAX's
# Chrome / Perfetto traces of the same session.
_PROFILE_SECONDARY_PATTERNS = (
    "*.trace.json.gz",
    "*.trace.json",
    "perfetto_trace.json.gz",
    "*.perfetto_trace.json.gz",
)

# One file per tool and host, ``[<host>.]<tool suffix>``: what TensorFlow's profiler wrote before
# (and, up to TF 2.3, beside) the xplane, named by tensorboard-plugin-profile's ``TOOLS`` table
# (``profile_plugin.py``). That plugin lists a session's tools from these files only when the
# session has no xplane; with one, every tool is derived from the xplane instead, and xprof 2.2x
# reads only the xplane. So with an xplane they are derived copies; without one, the profile.
_PROFILE_TOOL_SUFFIXES = (
    "trace",  # trace_viewer: the legacy Trace proto
    "tracetable",  # trace_viewer@ (streaming) of the oldest plugins
    "op_profile.json",
    "input_pipeline.json",
    "input_pipeline.pb",
    "overview_page.json",
    "overview_page.pb",
    "memory_viewer.json",
    "pod_viewer.json",
    "tensorflow_stats.pb",
    "tf_stats.pb",
    "kernel_stats.pb",
    "memory_profile.json.gz",
    "memory_profile.json",
    "memory_profile.pb",
    "tf_data_bottleneck_analysis.json",
)
_PROFILE_TOOL_PATTERNS = tuple(p for s in _PROFILE_TOOL_SUFFIXES for p in (s, "*." + s))


def profile_tool_suffixes() -> tuple:
    """The per-tool file suffixes of older profilers (``<host>.<suffix>`` or a bare ``<suffix>``)."""
    return _PROFILE_TOOL_SUFFIXES


def classify_profile_file(name: str) -> str:
    """Category of a file inside a profile session directory ``plugins/profile/<session>/``."""
    if name.endswith(".xplane.pb") or name.endswith(".xplane.riegeli"):
        return PROFILE_XPLANE
    if any(fnmatch.fnmatchcase(name, p) for p in _PROFILE_CACHE_PATTERNS):
        return PROFILE_CACHE
    if any(fnmatch.fnmatchcase(name, p) for p in _PROFILE_SECONDARY_PATTERNS):
        return PROFILE_SECONDARY
    if any(fnmatch.fnmatchcase(name, p) for p in _PROFILE_TOOL_PATTERNS):
        return PROFILE_TOOL_OUTPUTS
    return PROFILE_OTHER


_CHECKPOINT_RE = re.compile(
    r"(^checkpoint$|\.ckpt(-\d+)?(\.|$)|\.index$|\.data-\d{5}-of-\d{5}$|\.pt$|\.pth$|\.safetensors$"
    r"|\.h5$|\.keras$|^saved_model\.pb$|\.msgpack$|\.orbax-checkpoint)"
)


def classify_file(rel_parts: tuple, name: str) -> str:
    """File-level category of a non-event file from its path parts relative to its run.

    ``rel_parts`` are the directory names between the run directory and the file.
    """
    if name.endswith(".profile-empty") and is_event_file_name(name):
        return PROFILE_EMPTY
    if is_torch_trace_name(name):
        return TORCH_TRACE
    for i in range(len(rel_parts) - 1):
        if rel_parts[i] == "plugins" and rel_parts[i + 1] == "profile":
            # plugins/profile/<session>/file: a session file; plugins/profile/file: stray
            return classify_profile_file(name) if len(rel_parts) >= i + 3 else PROFILE_OTHER
    if rel_parts and rel_parts[0] == "plugins":
        return PLUGIN_ASSETS
    if _CHECKPOINT_RE.search(name) or any(p in ("checkpoints", "variables") for p in rel_parts):
        return CHECKPOINTS
    return OTHER
