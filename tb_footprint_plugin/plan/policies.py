"""Named reduction policies and custom rules over the scan's categories.

A policy says, per category of file, what happens to it: kept, deleted (backed up first) or
compressed. Scalars, hparams and text can never be selected by any rule: ``validate`` refuses
a policy that tries, and event files are never deleted by a file-level rule.
"""
from __future__ import annotations

import sys
import os
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from tb_footprint_plugin.plan.rules import Rules, TraceOptions
from tb_footprint_plugin.scan import categories as cat
from tb_footprint_plugin.storage import jsondoc

KEEP, DELETE, COMPRESS = "keep", "delete", "compress"

#: File-level categories a rule may name (event-file record categories are content-level).
FILE_CATEGORIES = (
    cat.PROFILE_XPLANE,
    cat.PROFILE_CACHE,
    cat.PROFILE_SECONDARY,
    cat.PROFILE_TOOL_OUTPUTS,
    cat.PROFILE_OTHER,
    cat.TORCH_TRACE,
    cat.PLUGIN_ASSETS,
    cat.CHECKPOINTS,
    cat.OTHER,
)


@dataclass
class Policy:
    """What a reduction does. ``file_rules`` maps a file category to keep/delete/compress."""

    name: str
    description: str
    file_rules: Dict[str, str] = field(default_factory=dict)
    #: keep only the newest N profile sessions (and N newest torch traces per worker); None = all
    keep_latest: Optional[int] = None
    #: delete secondary traces and old-format tool outputs only when their session still has an
    #: xplane (lossless tiers): without one they are the session's only profile data
    secondary_only_with_xplane: bool = True
    #: gzip plain ``*.pt.trace.json`` files that are kept
    compress_torch: bool = False
    #: content-level rules for event files and traces (see transforms; None = files kept as is)
    content: Dict[str, object] = field(default_factory=dict)

    def rule(self, category: str) -> str:
        return self.file_rules.get(category, KEEP)

    def to_dict(self) -> dict:
        return asdict(self)

    def content_lines(self) -> List[Tuple[str, str]]:
        """(verb, what) for each content-level rule, as ``policies`` lists them beside the file
        rules: a policy says everything it may do, rewrites of event files and traces included."""
        c = self.content or {}
        out = []
        ds = c.get("downsample")
        if ds:
            view = "the default dashboard's view" if ds == "default_view" else "what the dashboard shows"
            out.append(("rewrite", f"event files: keep {view} of images, audio, histograms, PR curves"))
        for plugin, n in sorted((c.get("keep_per_tag") or {}).items()):
            out.append(("rewrite", f"event files: keep {n} {plugin} per tag"))
        if c.get("dedupe_graphs"):
            out.append(("rewrite", "event files: drop byte-identical repeated graphs"))
        if c.get("strip_large_graph_attrs"):
            out.append(("rewrite", "event files: drop graph attribute values too large to show"))
        if c.get("strip_run_metadata"):
            out.append(("rewrite", "event files: drop run metadata"))
        trace = c.get("trace") or {}
        if any(trace.values()):
            out.append(("rewrite", "PyTorch traces: slimmed (" + ", ".join(sorted(k for k, v in trace.items() if v))
                        + ")"))
        return out


class PolicyError(ValueError):
    """A policy that cannot be used, with the reason."""


def _lossless() -> Policy:
    return Policy(
        name="lossless",
        description=(
            "Delete xprof's regenerable caches, and the secondary trace files and old-format tool "
            "outputs (*.overview_page.pb, *.tensorflow_stats.pb, ...) of a session that has an "
            "xplane.pb, from which the profile plugin builds every tool; gzip PyTorch traces (content identical); rewrite "
            "event files that hold byte-identical repeated graphs without the repeats no backend "
            "displays. Every dashboard shows exactly what it showed before."
        ),
        file_rules={cat.PROFILE_CACHE: DELETE, cat.PROFILE_SECONDARY: DELETE, cat.PROFILE_TOOL_OUTPUTS: DELETE},
        compress_torch=True,
        content={"dedupe_graphs": True},
    )


def _keep_latest(n: int = 1) -> Policy:
    p = _lossless()
    p.name = "keep-latest" if n == 1 else f"keep-latest={n}"
    p.keep_latest = n
    p.description = (
        f"Lossless, plus keep only the newest {n} profile session(s) per run and the newest {n} "
        "PyTorch trace file(s) per worker; older sessions are removed as whole directories."
    )
    return p


def _archive() -> Policy:
    return Policy(
        name="archive",
        description=(
            "For finished experiments: remove all profile data (xprof sessions, caches, secondary "
            "traces, old-format tool outputs, PyTorch traces); rewrite event files to keep exactly what TensorBoard's default "
            "dashboard shows of images, audio, histograms and PR curves, and drop byte-identical "
            "repeated graphs. Every graph and run-metadata tag stays. Scalars, hparams and text are "
            "never touched."
        ),
        file_rules={
            cat.PROFILE_XPLANE: DELETE,
            cat.PROFILE_CACHE: DELETE,
            cat.PROFILE_SECONDARY: DELETE,
            cat.PROFILE_TOOL_OUTPUTS: DELETE,
            cat.PROFILE_OTHER: DELETE,
            cat.TORCH_TRACE: DELETE,
        },
        secondary_only_with_xplane=False,
        # strip_large_graph_attrs stays opt-in: TensorBoard 2.21's Graphs dashboard asks the graph
        # route without limit_attr_size, so a node's info card would lose the dropped constants
        content={"dedupe_graphs": True, "downsample": "default_view"},
    )


BUILTIN = {"lossless": _lossless, "keep-latest": _keep_latest, "archive": _archive}
DEFAULT_POLICY = "archive"


def list_policies() -> List[Policy]:
    """The built-in policies, in increasing order of what they remove."""
    return [_lossless(), _keep_latest(1), _archive()]


def get_policy(spec) -> Policy:
    """A policy from a name (``archive``, ``keep-latest``, ``keep-latest=3``), a path to a
    JSON/TOML policy file, a dict, or a ``Policy``; validated."""
    if isinstance(spec, Policy):
        policy = spec
    elif isinstance(spec, dict):
        policy = policy_from_dict(spec)
    elif isinstance(spec, str) and spec.startswith("keep-latest="):
        try:
            n = int(spec.split("=", 1)[1])
        except ValueError:
            raise PolicyError(f"keep-latest needs a whole number: {spec!r}") from None
        policy = _keep_latest(n)
    elif isinstance(spec, str) and spec in BUILTIN:
        policy = BUILTIN[spec]()
    elif isinstance(spec, str) and os.path.isfile(spec):
        policy = policy_from_dict(_load_file(spec))
    else:
        names = ", ".join(BUILTIN)
        raise PolicyError(f"unknown policy {spec!r}: use one of {names}, keep-latest=N, or a JSON/TOML file")
    validate(policy)
    return policy


def _load_file(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            raw = f.read()
        if path.endswith(".toml"):
            if sys.version_info >= (3, 11):
                import tomllib
            else:  # the same parser, as a package (an install requirement below 3.11)
                import tomli as tomllib
            return tomllib.loads(raw.decode("utf-8"))
        return jsondoc.loads(raw)
    except (OSError, ValueError) as e:
        raise PolicyError(f"cannot read policy file {path}: {e}") from e


def custom_policy(base: str, *, delete: Sequence[str] = (), keep: Sequence[str] = (),
                  keep_latest: Optional[int] = None, keep_per_tag: Optional[Dict[str, int]] = None):
    """``base`` refined by per-category rules: the policy spec both front ends build from a
    user's choices (CLI flags, the tab's form). Returns ``base`` itself when nothing refines it,
    else a policy dict for ``get_policy``. Arguments of the wrong shape raise ``PolicyError``
    (the tab's JSON is checked by the same rules as the CLI's flags)."""
    _check_custom(delete, keep, keep_latest, keep_per_tag)
    if not (delete or keep or keep_latest is not None or keep_per_tag):
        return base
    rules = {c: DELETE for c in delete}
    rules.update({c: KEEP for c in keep})
    d: dict = {"name": f"custom({base})", "base": base, "rules": rules}
    if keep_latest is not None:
        d["keep_latest"] = keep_latest
    if keep_per_tag:
        d["content"] = {"keep_per_tag": dict(keep_per_tag)}
    return d


def _count(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PolicyError(f"{what} must be a whole number ≥ 0, got {value!r}")
    return value


def _check_custom(delete, keep, keep_latest, keep_per_tag) -> None:
    """The shape of custom rules, wherever they come from."""
    for what, cats in (("delete", delete), ("keep", keep)):
        if isinstance(cats, str) or not isinstance(cats, (list, tuple)) or not all(isinstance(c, str) for c in cats):
            raise PolicyError(f"{what} must be a list of file categories (one of {', '.join(FILE_CATEGORIES)})")
        unknown = [c for c in cats if c not in FILE_CATEGORIES and c not in cat.PROTECTED_PLUGINS]
        if unknown:
            raise PolicyError(f"{what}: unknown file category {unknown[0]!r} (one of {', '.join(FILE_CATEGORIES)})")
    both = set(delete) & set(keep)
    if both:
        raise PolicyError(f"{sorted(both)[0]!r} is both deleted and kept; choose one")
    if keep_latest is not None:
        _count(keep_latest, "keep_latest")
    if keep_per_tag is not None:
        if not isinstance(keep_per_tag, dict):
            raise PolicyError("keep_per_tag must map a plugin name to a number of items, e.g. {\"images\": 5}")
        for plugin, n in keep_per_tag.items():
            if not isinstance(plugin, str) or not plugin:
                raise PolicyError(f"keep_per_tag: {plugin!r} is not a plugin name")
            _count(n, f"keep_per_tag[{plugin!r}]")


#: the keys a policy file may have at its top level (``policy_from_dict``)
POLICY_KEYS = frozenset({"name", "description", "base", "rules", "keep_latest", "secondary_only_with_xplane",
                         "compress_torch", "content"})


def policy_from_dict(d: dict) -> Policy:
    """Custom policy: ``{"name", "base": "lossless"|..., "rules": {category: action},
    "keep_latest": N, "compress_torch": bool, "content": {...}}``. An unknown key is refused (a
    typo'd ``base`` must not silently change what the policy does), as unknown content options are."""
    unknown = sorted(str(k) for k in d if k not in POLICY_KEYS)
    if unknown:
        raise PolicyError(f"unknown key(s) {unknown} in the policy (known: {', '.join(sorted(POLICY_KEYS))})")
    base_name = d.get("base")
    base = get_policy(base_name) if base_name else Policy(name="custom", description="")
    rules = dict(base.file_rules)
    for k, v in (d.get("rules") or {}).items():
        rules[k] = v
    return Policy(
        name=str(d.get("name", "custom")),
        description=str(d.get("description", base.description or "custom policy")),
        file_rules=rules,
        keep_latest=d.get("keep_latest", base.keep_latest),
        secondary_only_with_xplane=d.get("secondary_only_with_xplane", base.secondary_only_with_xplane),
        compress_torch=bool(d.get("compress_torch", base.compress_torch)),
        content=dict(base.content, **(d.get("content") or {})),
    )


def validate(policy: Policy) -> None:
    """Refuse rules that would touch protected data or name unknown categories/actions."""
    for category, action in policy.file_rules.items():
        if category in cat.PROTECTED_PLUGINS:
            raise PolicyError(f"policy {policy.name!r}: {category} can never be selected by a rule")
        if category not in FILE_CATEGORIES:
            raise PolicyError(
                f"policy {policy.name!r}: unknown file category {category!r} "
                f"(one of {', '.join(FILE_CATEGORIES)})"
            )
        if action not in (KEEP, DELETE, COMPRESS):
            raise PolicyError(f"policy {policy.name!r}: unknown action {action!r} for {category}")
        if action == COMPRESS and category != cat.TORCH_TRACE:
            raise PolicyError(f"policy {policy.name!r}: only torch_trace files can be compressed")
    if policy.keep_latest is not None and (not isinstance(policy.keep_latest, int) or policy.keep_latest < 0):
        raise PolicyError(f"policy {policy.name!r}: keep_latest must be a whole number ≥ 0")
    for plugin in (policy.content.get("keep_per_tag") or {}):
        if plugin in cat.PROTECTED_PLUGINS:
            raise PolicyError(f"policy {policy.name!r}: {plugin} can never be downsampled")
    try:
        Rules.from_content(policy.content)
        if policy.content.get("trace"):
            TraceOptions.from_dict(policy.content["trace"])
    except ValueError as e:
        raise PolicyError(f"policy {policy.name!r}: content: {e}") from None
