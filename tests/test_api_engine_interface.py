"""The API reaches a logdir's state only through ``Engine`` (issue #26: the one interface between
the API and the engines, ``engine.front_base``): every attribute the API's modules take of an
engine (a name bound to ``open_engine(...)``, or that call itself) is one the interface declares.
Before, ``api.survey`` read a bucket engine's ``vault`` and a local engine's ``ctx`` and
``disk_in_use`` (neither on the interface) for a plan's disk-in-use figure, and chose between
them by ``eng.kind``, which is for what is reported only.
"""
import ast
from pathlib import Path

from tb_footprint_plugin.engine.front_base import Engine

API = Path(__file__).resolve().parents[1] / "tb_footprint_plugin" / "api"
DECLARED = set(dir(Engine)) | set(getattr(Engine, "__annotations__", {}))


def _opens_engine(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "open_engine"
               for n in ast.walk(node))


def engine_uses(source: str) -> list:
    """``(line, attribute)`` of each attribute ``source`` takes of an engine: of a name assigned
    from an expression that calls ``open_engine`` or a parameter named ``eng``/``engine``, and
    of an ``open_engine(...)`` call itself."""
    tree = ast.parse(source)
    names = {"eng", "engine"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _opens_engine(node.value):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        v = node.value
        if (isinstance(v, ast.Name) and v.id in names) or (
                isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "open_engine"):
            found.append((node.lineno, node.attr))
    return found


def test_the_checker_sees_an_engine_by_each_way_it_is_held():
    src = ("def f(engine=None):\n    e2 = engine or open_engine(x)\n    e2.ctx\n    engine.vault\n"
           "    open_engine(x).rfs\n    other.ctx\n")
    assert sorted(engine_uses(src)) == [(3, "ctx"), (4, "vault"), (5, "rfs")]


def test_the_api_takes_of_an_engine_only_what_the_interface_declares():
    past = {}
    for path in sorted(API.glob("*.py")):
        bad = [(line, a) for line, a in engine_uses(path.read_text(encoding="utf-8")) if a not in DECLARED]
        if bad:
            past[path.name] = sorted(bad)
    assert not past, f"engine attributes the Engine interface does not declare: {past}"


def test_each_engine_implements_the_in_use_figure():
    from tb_footprint_plugin.engine.front_bucket import BucketEngine
    from tb_footprint_plugin.engine.front_local import LocalEngine

    assert "in_use_after_scan" in Engine.__abstractmethods__
    for cls in (LocalEngine, BucketEngine):
        assert cls.in_use_after_scan is not Engine.in_use_after_scan, cls
