"""Content rules: what a policy's ``content`` section asks of event files and PyTorch traces.

Pure data and validation, shared by the plan (estimates, fidelity lines) and the transforms
(which apply them): nothing here reads a file or loads transform code.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

from tb_footprint_plugin.scan import categories as cat

DASHBOARD_EXACT = "dashboard_exact"
#: Exactly what the default reader shows (archive's default): the first step is not forced
#: into the reduced run when the default reader does not show it; a tag whose metadata sits
#: only on its first record gets it copied onto its first kept record. Verified with the
#: ``default_view_exact`` mode (Rust view identical, other backend a subset with the last step).
DEFAULT_VIEW = "default_view"
DEFAULT_VIEW_EXACT_MODE = "default_view_exact"
KEEP = "keep"
#: ``prepare_graph_for_ui``'s defaults (TensorBoard 2.21), the values the graphs route is asked
#: with: attribute values over this many bytes are listed under the key instead of sent.
LIMIT_ATTR_SIZE = 1024
LARGE_ATTRS_KEY = "_too_large_attrs"
#: Verification mode of the run graph when ``strip_large_graph_attrs`` dropped attribute
#: values: the graphs route's graph for that limit and key is identical.
GRAPH_ROUTE_IDENTICAL_MODE = "graph_route_identical"

#: Plugins never downsampled: protected ones, graphs and their sub-plugins, layouts.
NEVER_DOWNSAMPLE = frozenset(cat.PROTECTED_PLUGINS) | frozenset({
    "custom_scalars", "graphs", "graph_keras_model", "graph_run_metadata",
    "graph_run_metadata_graph", "graph_tagged_run_metadata", "projector", "",
})
#: Plugins dropped by ``strip_run_metadata``: step stats (performance data).
RUN_METADATA_PLUGINS = ("graph_tagged_run_metadata", "graph_run_metadata")
#: The Rust data server's default reservoir size per data class (``run.rs``).
RUST_CAPACITY = {"tensor": 100, "blob_sequence": 10}
#: Python's default storage (``data_ingester.DEFAULT_TENSOR_SIZE_GUIDANCE``), for the plan.
PYTHON_CAPACITY = {"histograms": 500, "images": 10, "audio": 10, "pr_curves": 100}
ALIASES = {"distributions": "histograms"}


@dataclass
class Rules:
    """Content rules for event files, from a policy's ``content`` dict.

    ``downsample``: ``"dashboard_exact"`` or ``"default_view"`` (every downsampleable plugin)
    or a dict plugin -> ``"dashboard_exact"`` | ``"default_view"`` | ``"keep"`` (key ``"*"``:
    the default for other plugins);
    ``keep_per_tag``: plugin -> N (overrides ``downsample`` for that plugin);
    ``strip_run_metadata``, ``dedupe_graphs``, ``strip_large_graph_attrs``: booleans.
    """

    per_plugin: Dict[str, object] = field(default_factory=dict)
    default: Optional[str] = None
    strip_run_metadata: bool = False
    dedupe_graphs: bool = False
    strip_large_graph_attrs: bool = False

    @classmethod
    def from_content(cls, content: Optional[dict]) -> "Rules":
        content = content or {}
        r = cls(strip_run_metadata=bool(content.get("strip_run_metadata")),
                dedupe_graphs=bool(content.get("dedupe_graphs")),
                strip_large_graph_attrs=bool(content.get("strip_large_graph_attrs")))
        ds = content.get("downsample")
        if ds is True or ds == DASHBOARD_EXACT:
            r.default = DASHBOARD_EXACT
        elif ds == DEFAULT_VIEW:
            r.default = DEFAULT_VIEW
        elif isinstance(ds, dict):
            for plugin, mode in ds.items():
                if mode in (True, DASHBOARD_EXACT):
                    mode = DASHBOARD_EXACT
                elif mode == DEFAULT_VIEW:
                    pass
                elif mode in (False, None, KEEP):
                    mode = KEEP
                else:
                    raise ValueError(f"downsample[{plugin!r}]: unknown mode {mode!r}")
                if plugin == "*":
                    r.default = None if mode == KEEP else mode
                else:
                    r.per_plugin[ALIASES.get(plugin, plugin)] = mode
        elif ds not in (None, False, KEEP):
            raise ValueError(f"downsample: unknown value {ds!r}")
        for plugin, n in (content.get("keep_per_tag") or {}).items():
            if not isinstance(n, int) or isinstance(n, bool) or n < 2:
                raise ValueError(f"keep_per_tag[{plugin!r}] must be a whole number ≥ 2 (first and last)")
            r.per_plugin[ALIASES.get(plugin, plugin)] = n
        return r

    @classmethod
    def from_params(cls, d: dict) -> "Rules":
        return cls(per_plugin=dict(d.get("per_plugin") or {}), default=d.get("default"),
                   strip_run_metadata=bool(d.get("strip_run_metadata")),
                   dedupe_graphs=bool(d.get("dedupe_graphs")),
                   strip_large_graph_attrs=bool(d.get("strip_large_graph_attrs")))

    def to_params(self) -> dict:
        return {"per_plugin": dict(self.per_plugin), "default": self.default,
                "strip_run_metadata": self.strip_run_metadata, "dedupe_graphs": self.dedupe_graphs,
                "strip_large_graph_attrs": self.strip_large_graph_attrs}

    def mode(self, plugin: str):
        """``"dashboard_exact"``, ``"default_view"``, an int cap, or None (kept as is)."""
        if plugin in NEVER_DOWNSAMPLE:
            return None
        m = self.per_plugin.get(plugin, self.default)
        return None if m in (None, KEEP) else m

    @property
    def active(self) -> bool:
        return bool(self.strip_run_metadata or self.dedupe_graphs or self.strip_large_graph_attrs
                    or self.default or any(v != KEEP for v in self.per_plugin.values()))


@dataclass
class TraceOptions:
    whitespace: bool = True
    drop_python_function: bool = False
    drop_memory: bool = False
    keep_steps: Optional[int] = None
    min_dur_us: Optional[float] = None

    @classmethod
    def from_dict(cls, d: Optional[dict]) -> "TraceOptions":
        d = dict(d or {})
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"trace: unknown option(s) {sorted(unknown)}")
        o = cls(**d)
        if o.keep_steps is not None and (not isinstance(o.keep_steps, int) or isinstance(o.keep_steps, bool)
                                         or o.keep_steps < 1):
            raise ValueError("trace.keep_steps must be a whole number ≥ 1 (or null)")
        if o.min_dur_us is not None and (isinstance(o.min_dur_us, bool)
                                         or not isinstance(o.min_dur_us, (int, float)) or o.min_dur_us < 0):
            raise ValueError("trace.min_dur_us must be a number ≥ 0 (or null)")
        return o

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> List[str]:
        out = []
        if self.whitespace:
            out.append("whitespace removed")
        if self.drop_python_function:
            out.append("python_function events dropped")
        if self.drop_memory:
            out.append("[memory] events dropped")
        if self.keep_steps is not None:
            out.append(f"only the first {self.keep_steps} ProfilerStep span(s) kept")
        if self.min_dur_us is not None:
            out.append(f"events shorter than {self.min_dur_us:g} µs dropped")
        return out
