"""The import graph points down only (docs/ARCHITECTURE.md, the layers of the package).

Every module's imports are read with ``ast`` — in-function imports included, since an
in-function import is exactly how an upward dependency hides — and each must land on the
importer's own layer or one below it. The front ends (``cli``, ``plugin``, ``loader``) never
import each other: they import only ``api`` (and layer 0; the loader also its few dependency-free
flag checks, ``LOADER_LIGHT``).

The module graph (every import, in-function ones included) has no cycle, same layer included,
and neither has the graph of the package's top-level parts (``transforms`` and ``verify`` never
import each other both ways). No module uses another module's private names (``from x import
_y``, or ``x._y`` on an imported package module): what is shared is public and documented.
"""
import ast
import functools
import os
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest

PKG = "tb_footprint_plugin"
ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), PKG)

#: module prefix (relative to the package) -> layer; the longest matching prefix wins.
LAYERS = {
    "": 0,  # the package itself: only the version, the API is re-exported lazily by name
    "codes": 0, "version": 0, "fmt": 0, "lazy": 0,
    "storage": 1,
    "scan": 2,
    "plan": 3,
    # TensorBoard's formats and readers: what both the rewrite and the verification read by
    "formats": 4,
    "transforms": 5, "verify": 5,
    "engine": 6,
    "api": 7,
    # test/demo data writers and the demo command sit beside the API: the engine never uses them
    "synth": 7, "demo": 7,
    "cli": 8, "plugin": 8, "loader": 8, "integrations": 8,
}
#: top-level module -> front end; ``loader`` (TensorBoard's entry point) is part of the plugin
FRONT_ENDS = {"cli": "cli", "plugin": "plugin", "loader": "plugin", "integrations": "integrations"}
#: subpackages named like a public verb (``fp.scan`` is the function, see the package docstring)
VERB_PACKAGES = ("scan", "plan", "verify")
#: only these may import the data writers (tests and benches do too; they are outside the package)
SYNTH_USERS = ("cli", "demo", "synth")
#: besides ``api``, what a front end may import: layer 0 and its own front end's modules
FRONT_END_MAY_IMPORT = ("", "api", "codes", "fmt", "version")
#: TensorBoard's entry point checks its flags at startup without the (heavy) API: these few
#: dependency-free modules only (``loader.py``'s docstring says why it must stay import-light)
LOADER_LIGHT = ("plan.policies", "storage.paths", "storage.remote")


@functools.lru_cache(maxsize=None)
def _nodes(source: str) -> tuple:
    """Every node of ``source``'s tree (``ast.walk`` order), parsed and walked once per process:
    the checks below read each module of the package several times and never change a tree."""
    return tuple(ast.walk(ast.parse(source)))


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
    for node in _nodes(source):
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
    for node in _nodes(source):
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
        elif (me in FRONT_ENDS and FRONT_ENDS.get(it) != FRONT_ENDS[me] and target not in FRONT_END_MAY_IMPORT
              and not (me == "cli" and it == "demo") and not (me == "loader" and target in LOADER_LIGHT)):
            out.append(f"{where}: a front end imports only the API (tb_footprint_plugin.api)")
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
    ("storage.files", "def f():\n    from tb_footprint_plugin.engine import vault\n", "layer 6 above"),
    ("scan.cache", "from tb_footprint_plugin.engine.journal import RunLock\n", "layer 6 above"),
    ("plan.content", "import tb_footprint_plugin.transforms.event_rewrite\n", "layer 5 above"),
    ("formats.views", "def f():\n    from tb_footprint_plugin.verify import compare\n", "layer 5 above"),
    ("engine.restore", "def f():\n    if True:\n        from tb_footprint_plugin.api import known_vaults\n",
     "layer 7 above"),
    ("engine.swap", "from ..api import verify\n", "layer 7 above"),
    ("cli", "from tb_footprint_plugin.plugin import routes\n", "front ends never import each other"),
    ("plugin.routes", "def f():\n    from tb_footprint_plugin.engine.context import CancelToken\n",
     "never the engine"),
    ("engine.transaction", "from tb_footprint_plugin import synth\n", "only the demo command"),
    ("cli", "def f():\n    from tb_footprint_plugin.plan.policies import list_policies\n", "imports only the API"),
    ("plugin.http", "from tb_footprint_plugin.scan.model import UNATTRIBUTED\n", "imports only the API"),
    ("loader", "from tb_footprint_plugin.scan import scanner\n", "imports only the API"),
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
    front = ("from tb_footprint_plugin import api\nfrom tb_footprint_plugin.api import categories\n"
             "from tb_footprint_plugin.codes import Skip\nfrom tb_footprint_plugin.fmt import human_bytes\n")
    assert violations("cli", front + "from tb_footprint_plugin.demo import generate_demo\n") == []
    assert violations("plugin.http", front + "from tb_footprint_plugin.plugin.security import Rejected\n") == []
    assert violations("loader", "def f():\n    from tb_footprint_plugin.storage.paths import is_within\n") == []


# --- cycles --------------------------------------------------------------------------------

#: (importer, imported) edges left out of the cycle check, each with why it cannot go yet.
CYCLE_ALLOWED: Dict[Tuple[str, str], str] = {
}


def import_graph() -> Dict[str, Set[str]]:
    """module -> the package's modules it imports (in-function imports included; ``from pkg.sub
    import name`` counts as importing the submodule ``pkg.sub.name`` when there is one)."""
    graph: Dict[str, Set[str]] = {}
    for rel, path in module_names():
        with open(path, encoding="utf-8") as f:
            found = imports_of(f.read(), rel, path.endswith("__init__.py"))
        graph[rel] = {t for _line, t in found if t != rel and (rel, t) not in CYCLE_ALLOWED}
    return graph


def find_cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Every strongly connected part of ``graph`` with more than one node, as one cycle through
    it (sorted for a stable message)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    parts: List[Set[str]] = []

    def visit(v: str) -> None:
        # iterative Tarjan: the graph is small, but recursion depth should not depend on it
        work = [(v, iter(sorted(graph.get(v, ()))))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        while work:
            node, children = work[-1]
            for w in children:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        part.add(w)
                        if w == node:
                            break
                    if len(part) > 1:
                        parts.append(part)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_in(graph, part) for part in sorted(parts, key=sorted)]


def _cycle_in(graph: Dict[str, Set[str]], part: Set[str]) -> List[str]:
    """One cycle through the smallest module of a strongly connected ``part`` (breadth first,
    so it is a shortest one)."""
    start = min(part)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for w in sorted(graph[node] & part):
            if w == start:
                return paths[node] + [start]
            if w not in paths:
                paths[w] = paths[node] + [w]
                queue.append(w)
    return sorted(part)  # unreachable for a strongly connected part


def package_graph(graph: Dict[str, Set[str]]) -> Dict[str, Set[str]]:
    """The same graph between the package's top-level parts (``verify``, ``transforms``, ...)."""
    out: Dict[str, Set[str]] = {}
    for a, targets in graph.items():
        out.setdefault(_top(a), set()).update(_top(t) for t in targets if _top(t) != _top(a))
    return out


def _show(cycles: List[List[str]]) -> str:
    return "\n".join(" -> ".join(c) for c in cycles)


def test_no_import_cycle_between_modules():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles (in-function imports included):\n" + _show(cycles)


def test_no_import_cycle_between_the_package_parts():
    cycles = find_cycles(package_graph(import_graph()))
    assert not cycles, "the package's parts import each other:\n" + _show(cycles)


def test_the_cycle_check_finds_a_cycle_hidden_in_a_function():
    graph = {"verify.compare": {"verify.dashboard", "scan.tfrecord"},
             "verify.dashboard": {"verify.pyside"}, "verify.pyside": {"verify.compare"},
             "scan.tfrecord": set(), "a": {"b"}, "b": set()}
    assert find_cycles(graph) == [["verify.compare", "verify.dashboard", "verify.pyside", "verify.compare"]]
    assert find_cycles(package_graph({"transforms.x": {"verify.y"}, "verify.y": {"transforms.z"},
                                      "transforms.z": set()})) == [["transforms", "verify", "transforms"]]
    src = "def f():\n    from tb_footprint_plugin.verify import compare\n"
    assert imports_of(src, "transforms.event_rewrite", False) == [(2, "verify.compare")]


# --- private names -------------------------------------------------------------------------

#: "module:line-free description" of a private name used across modules -> why it stays for now.
PRIVATE_ALLOWED: Dict[str, str] = {}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(rel: str, source: str, is_package: bool = False) -> List[Tuple[int, str]]:
    """(line, ``"<module> uses <other>.<_name>"``) for each private name of another package
    module that ``source`` imports (``from x import _y``) or reads (``x._y`` where ``x`` is a
    name bound to an imported package module)."""
    here = rel.split(".") if rel else []
    pkg_parts = here if is_package else here[:-1]
    bound: Dict[str, str] = {}  # local name -> package module it is bound to
    out = []
    for node in _nodes(source):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg_parts[:len(pkg_parts) - (node.level - 1)] if node.level > 1 else pkg_parts
                mod = ".".join(base + (node.module.split(".") if node.module else []))
            else:
                mod = _rel(node.module or "")
                if mod is None:
                    continue
            for a in node.names:
                sub = f"{mod}.{a.name}" if mod else a.name
                if _exists(sub):
                    bound[a.asname or a.name] = sub
                elif _private(a.name) and mod != rel:
                    out.append((node.lineno, f"{rel} uses {mod}.{a.name}"))
        elif isinstance(node, ast.Import):
            for a in node.names:
                r = _rel(a.name)
                if r is not None and a.asname:
                    bound[a.asname] = r
    for node in _nodes(source):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in bound and _private(node.attr) and bound[node.value.id] != rel):
            out.append((node.lineno, f"{rel} uses {bound[node.value.id]}.{node.attr}"))
    return out


def test_no_private_name_is_used_across_modules():
    found, used = [], set()
    for rel, path in module_names():
        with open(path, encoding="utf-8") as f:
            for line, what in private_uses(rel, f.read(), path.endswith("__init__.py")):
                if what in PRIVATE_ALLOWED:
                    used.add(what)
                else:
                    found.append(f"{PKG}.{rel or '__init__'}:{line}: {what}")
    assert not found, "private names used across modules (make them public or move the code):\n" + \
        "\n".join(sorted(found))
    assert used == set(PRIVATE_ALLOWED), f"stale allow-list entries: {set(PRIVATE_ALLOWED) - used}"


def test_stale_cycle_allowances_are_removed():
    graph = {}
    for rel, path in module_names():
        with open(path, encoding="utf-8") as f:
            graph[rel] = {t for _line, t in imports_of(f.read(), rel, path.endswith("__init__.py"))}
    stale = [edge for edge in CYCLE_ALLOWED if edge[1] not in graph.get(edge[0], ())]
    assert not stale, f"allowed edges no longer imported: {stale}"


@pytest.mark.parametrize("source,expected", [
    ("from tb_footprint_plugin.engine.bucket import _State\n", "engine.bucket_rewrite uses engine.bucket._State"),
    ("def f():\n    from .bucket import _lock\n", "engine.bucket_rewrite uses engine.bucket._lock"),
    ("from tb_footprint_plugin.formats import views\nx = views._read_run_graph()\n",
     "engine.bucket_rewrite uses formats.views._read_run_graph"),
    ("from tb_footprint_plugin.engine import lease as L\ndef f():\n    return L._shard\n",
     "engine.bucket_rewrite uses engine.lease._shard"),
])
def test_the_private_check_catches_imports_and_attributes(source, expected):
    assert expected in [w for _l, w in private_uses("engine.bucket_rewrite", source)]


def test_the_private_check_accepts_own_and_public_names():
    src = ("from tb_footprint_plugin.engine.bucket import BucketVault, __doc__\n"
           "import os\nos._exit\n"
           "from tb_footprint_plugin.formats import views\nviews.read_view\n"
           "def _mine():\n    return _mine\n")
    assert private_uses("engine.bucket_rewrite", src) == []


def test_every_subpackage_ships():
    """A new layer (``formats/``) is a new package: ``setup.py`` must list it, or an installed
    copy fails to import while the checkout works."""
    setup = os.path.join(os.path.dirname(ROOT), "setup.py")
    with open(setup, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    listed = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "packages" and isinstance(node.value, ast.List):
            listed = {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
    found = {PKG + ("." + rel if rel else "") for rel, path in module_names() if path.endswith("__init__.py")}
    assert found <= listed, f"packages missing from setup.py: {sorted(found - listed)}"


# --- long modules say why they are one ------------------------------------------------------

#: a module longer than this many lines says at its top why it is one module (issue #26 item 6)
LONG_MODULE_LINES = 500
#: the paragraph of the module docstring that says it
WHY_ONE_MODULE = "Why one module:"
#: long modules whose paragraph is still to be written, each with why it is not there yet (a
#: module whose owner is changing it gets its paragraph from the owner, as a docstring-only hunk).
WHY_PENDING: Dict[str, str] = {}


def says_why_one_module(source: str) -> bool:
    """Whether the module docstring of ``source`` has a paragraph starting ``Why one module:``."""
    doc = ast.get_docstring(_nodes(source)[0]) or ""
    return any(p.strip().startswith(WHY_ONE_MODULE) for p in doc.split("\n\n"))


def long_modules_without_why() -> Dict[str, int]:
    """Relative module name -> its line count, for every module over ``LONG_MODULE_LINES`` lines
    whose docstring does not say why it is one module."""
    out = {}
    for rel, path in module_names():
        with open(path, encoding="utf-8") as f:
            source = f.read()
        lines = source.count("\n")
        if lines > LONG_MODULE_LINES and not says_why_one_module(source):
            out[rel] = lines
    return out


def test_every_long_module_says_why_it_is_one_module():
    missing = long_modules_without_why()
    unexplained = {rel: n for rel, n in missing.items() if rel not in WHY_PENDING}
    assert not unexplained, (f"modules over {LONG_MODULE_LINES} lines: split them, or say at the top of the "
                             f"docstring why each is one module (a paragraph starting {WHY_ONE_MODULE!r}):\n"
                             + "\n".join(f"{PKG}.{rel}: {n} lines" for rel, n in sorted(unexplained.items())))
    stale = sorted(set(WHY_PENDING) - set(missing))
    assert not stale, f"WHY_PENDING entries that are short now or say why already: {stale}"


def test_the_why_check_reads_the_docstring_paragraph():
    assert says_why_one_module('"""Title.\n\nWhy one module: one format, one reader.\n"""\nx = 1\n')
    assert says_why_one_module('"""Title.\n\n    Why one module: indented the way docstrings are.\n"""\n')
    assert not says_why_one_module('"""Title: why one module is not said here."""\n')
    assert not says_why_one_module('x = 1\n# Why one module: a comment is not the docstring\n')
    assert not says_why_one_module('"""Title.\n\nIt says Why one module: mid-paragraph."""\n')


#: The API reaches an engine only through ``engine.front`` (``open_engine`` chooses it once): no
#: ``engine.bucket*`` module, and ``is_remote`` only where it reads URL syntax — ``api.common``
#: (a logdir's name in the shard partition: a URL as written, a path made absolute), ``api.survey``
#: (whether a folder is a logdir: a URL names no folder) — and the package's re-export.
API_URL_SYNTAX = ("api", "api.common", "api.survey")


def api_engine_choices() -> List[str]:
    """Every place an API module picks an engine itself instead of asking ``engine.front``."""
    out = []
    for rel, path in module_names():
        if _top(rel) != "api":
            continue
        with open(path, encoding="utf-8") as f:
            src = f.read()
        for line, target in imports_of(src, rel, path.endswith("__init__.py")):
            if target.split(".")[:2][-1].startswith("bucket") and target.startswith("engine."):
                out.append(f"{PKG}.{rel}:{line} imports {PKG}.{target}: open the engine with engine.front")
        if rel in API_URL_SYNTAX:
            continue
        for node in _nodes(src):
            if isinstance(node, ast.ImportFrom) and any(a.name == "is_remote" for a in node.names):
                out.append(f"{PKG}.{rel}:{node.lineno} imports is_remote: engine.front.open_engine chooses the engine")
    return out


def test_the_api_chooses_no_engine_itself():
    assert api_engine_choices() == []
