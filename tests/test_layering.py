"""The import graph points down only (docs/ARCHITECTURE.md, the layers of the package).

Every module's imports are read with ``ast`` — in-function imports included, since an
in-function import is exactly how an upward dependency hides — and each must land on the
importer's own layer or one below it. The front ends (``cli``, ``plugin``, ``loader``) never
import each other nor the engine: they go through ``api``.
"""
import ast
import os
from typing import Iterator, List, Optional, Tuple

import pytest

PKG = "tb_footprint_plugin"
ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), PKG)

#: module prefix (relative to the package) -> layer; the longest matching prefix wins.
LAYERS = {
    "": 0,  # the package itself: only the version, the API is re-exported lazily by name
    "codes": 0, "version": 0, "fmt": 0,
    "storage": 1,
    "scan": 2,
    "plan": 3,
    "transforms": 4, "verify": 4,
    "engine": 5,
    "api": 6,
    # test/demo data writers and the demo command sit beside the API: the engine never uses them
    "synth": 6, "demo": 6,
    "cli": 7, "plugin": 7, "loader": 7, "integrations": 7,
}
#: top-level module -> front end; ``loader`` (TensorBoard's entry point) is part of the plugin
FRONT_ENDS = {"cli": "cli", "plugin": "plugin", "loader": "plugin", "integrations": "integrations"}
#: subpackages named like a public verb (``fp.scan`` is the function, see the package docstring)
VERB_PACKAGES = ("scan", "plan", "verify")
#: only these may import the data writers (tests and benches do too; they are outside the package)
SYNTH_USERS = ("cli", "demo", "synth")


def _rel(module: str) -> Optional[str]:
    if module == PKG:
        return ""
    if module.startswith(PKG + "."):
        return module[len(PKG) + 1:]
    return None


def layer_of(rel: str) -> int:
    parts = rel.split(".") if rel else []
    for n in range(len(parts), -1, -1):
        key = ".".join(parts[:n])
        if key in LAYERS:
            return LAYERS[key]
    raise KeyError(f"{PKG}.{rel} has no layer: add it to LAYERS and to docs/ARCHITECTURE.md")


def _top(rel: str) -> str:
    return rel.split(".")[0] if rel else ""


def module_names() -> Iterator[Tuple[str, str]]:
    """(relative module name, path) of every module of the package."""
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for n in sorted(filenames):
            if not n.endswith(".py"):
                continue
            path = os.path.join(dirpath, n)
            parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join(parts), path


def imports_of(source: str, rel: str, is_package: bool) -> List[Tuple[int, str]]:
    """(line, imported module relative to the package) for every import of the package's own
    modules in ``source``, at any depth (functions, methods, conditionals)."""
    here = rel.split(".") if rel else []
    pkg_parts = here if is_package else here[:-1]
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for a in node.names:
                r = _rel(a.name)
                if r is not None:
                    out.append((node.lineno, r))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg_parts[:len(pkg_parts) - (node.level - 1)] if node.level > 1 else pkg_parts
                mod = ".".join(base + (node.module.split(".") if node.module else []))
            else:
                mod = _rel(node.module or "")
                if mod is None:
                    continue
            for a in node.names:
                # ``from pkg import sub`` imports the submodule when there is one
                sub = f"{mod}.{a.name}" if mod else a.name
                out.append((node.lineno, sub if _exists(sub) else mod))
    return out


def _exists(rel: str) -> bool:
    p = os.path.join(ROOT, *rel.split("."))
    return os.path.isfile(p + ".py") or os.path.isfile(os.path.join(p, "__init__.py"))


def violations(rel: str, source: str, is_package: bool = False) -> List[str]:
    """Every import of ``source`` (module ``rel``) that breaks a layering rule."""
    mine = layer_of(rel)
    out = []
    for node in ast.walk(ast.parse(source)):
        # ``import pkg.scan.x as y`` resolves ``pkg.scan`` as an attribute: that is the verb scan()
        if isinstance(node, ast.Import):
            for a in node.names:
                r = _rel(a.name) or ""
                if r.split(".")[0] in VERB_PACKAGES and "." in r:
                    out.append(f"{PKG}.{rel}:{node.lineno} `import {a.name}`: write `from ... import` "
                               f"({r.split('.')[0]} is also a public verb of the package)")
    for line, target in imports_of(source, rel, is_package):
        where = f"{PKG}.{rel or '__init__'}:{line} imports {PKG}.{target}"
        theirs = layer_of(target)
        if theirs > mine:
            out.append(f"{where}: layer {theirs} above its own layer {mine}")
        me, it = _top(rel), _top(target)
        if me in FRONT_ENDS and it in FRONT_ENDS and FRONT_ENDS[me] != FRONT_ENDS[it]:
            out.append(f"{where}: front ends never import each other")
        if me in FRONT_ENDS and it == "engine":
            out.append(f"{where}: a front end goes through api, never the engine")
        if it in ("synth", "demo") and me not in SYNTH_USERS:
            out.append(f"{where}: only the demo command uses the data writers")
    return out


def test_every_module_has_a_layer():
    for rel, _path in module_names():
        layer_of(rel)


def test_imports_point_down_only():
    found = []
    for rel, path in module_names():
        with open(path, encoding="utf-8") as f:
            found += violations(rel, f.read(), path.endswith("__init__.py"))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("rel,source,why", [
    ("storage.files", "def f():\n    from tb_footprint_plugin.engine import vault\n", "layer 5 above"),
    ("scan.cache", "from tb_footprint_plugin.engine.journal import RunLock\n", "layer 5 above"),
    ("plan.content", "import tb_footprint_plugin.transforms.event_rewrite\n", "layer 4 above"),
    ("engine.restore", "def f():\n    if True:\n        from tb_footprint_plugin.api import known_vaults\n",
     "layer 6 above"),
    ("engine.swap", "from ..api import verify\n", "layer 6 above"),
    ("cli", "from tb_footprint_plugin.plugin import routes\n", "front ends never import each other"),
    ("plugin.routes", "def f():\n    from tb_footprint_plugin.engine.context import CancelToken\n",
     "never the engine"),
    ("engine.transaction", "from tb_footprint_plugin import synth\n", "only the demo command"),
    ("api", "import tb_footprint_plugin.scan.categories as cat\n", "is also a public verb"),
])
def test_the_check_catches_an_upward_import(rel, source, why):
    assert any(why in v for v in violations(rel, source)), violations(rel, source)


def test_the_check_accepts_downward_and_same_layer_imports():
    src = ("from tb_footprint_plugin.storage.files import CHUNK\n"
           "from tb_footprint_plugin.scan import categories as cat\n"
           "from tb_footprint_plugin.codes import Skip\n"
           "def f():\n    from tb_footprint_plugin.plan.model import Action\n"
           "from .rules import Rules\n")
    assert violations("plan.content", src) == []
