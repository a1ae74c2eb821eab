"""A CLI process pays at start-up only for what its verb uses.

Every ``tb-footprint VERB`` is a fresh interpreter that imports ``tb_footprint_plugin.api``; when
that import pulled in every verb group, every engine, the planner and numpy, it cost 0.3-0.8 s of
CPU before the verb did anything (a ``status`` of a tiny logdir, each of the suite's CLI
processes). The api and ``verify`` packages re-export their names lazily (PEP 562), and numpy is
imported by the functions that compute with it. Each check runs in a fresh interpreter, so what
it sees imported is exactly what that verb imported.
"""
import json
import os
import subprocess
import sys

import pytest

from tb_footprint_plugin import synth

from test_layering import layer_of  # the layers the package's imports must follow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: never needed by the verbs below: numpy (the parsers), gRPC and TensorBoard's app (the
#: verification), the object-store clients (a local logdir)
HEAVY = ("numpy", "grpc", "tensorboard.backend.application", "fsspec", "boto3", "google.cloud", "azure")

#: prints, as JSON, what the CLI verb given as its arguments imported (its own output goes to stderr)
VERB = r'''
import contextlib, json, sys
from tb_footprint_plugin import cli
with contextlib.redirect_stdout(sys.stderr):
    rc = cli.main(sys.argv[1:])
print(json.dumps({"rc": rc, "modules": sorted(sys.modules)}))
'''


def _imported(*args) -> dict:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", VERB, *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _heavy(modules) -> list:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("startup") / "logdir"
    for name in ("a", "b"):
        with synth.EventWriter(str(root / name)) as w:
            for s in range(20):
                w.scalar("loss", s, 1.0 / (s + 1))
    return root


def test_importing_the_api_imports_no_verb():
    code = ("import json, sys\nimport tb_footprint_plugin.api\n"
            "print(json.dumps(sorted(sys.modules)))")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    modules = json.loads(proc.stdout)
    assert _heavy(modules) == []
    ours = [m for m in modules if m.startswith("tb_footprint_plugin.")]
    # the package, its api package and layer 0 at most: no verb group, no engine, no scan
    assert not [m for m in ours if m.split(".")[1] in ("engine", "scan", "plan", "storage", "verify")], ours
    assert not [m for m in ours if m.startswith("tb_footprint_plugin.api.")], ours


@pytest.mark.parametrize("verb", ["status", "history"])
def test_a_read_only_verb_imports_nothing_heavy(logdir, verb):
    got = _imported(verb, logdir)
    assert got["rc"] == 0
    assert _heavy(got["modules"]) == []
    assert "tb_footprint_plugin.engine.front_local" in got["modules"]  # the verb did run its engine


def test_a_scan_served_from_its_cache_imports_no_parser(logdir):
    first = _imported("scan", logdir)
    assert first["rc"] == 0 and "numpy" in first["modules"]  # it read the event files
    again = _imported("scan", logdir)
    assert again["rc"] == 0
    assert "tb_footprint_plugin.scan.eventfile" not in again["modules"]
    assert _heavy(again["modules"]) == []


def test_policies_imports_neither_engine_nor_scanner():
    got = _imported("policies")
    assert got["rc"] == 0
    # (the failpoint check every verb makes first is ``engine.faults``, a module of its own)
    assert not [m for m in got["modules"] if m.startswith(("tb_footprint_plugin.engine.", "tb_footprint_plugin.scan."))
                and m != "tb_footprint_plugin.engine.faults" and m != "tb_footprint_plugin.scan.categories"]
    assert _heavy(got["modules"]) == []


def test_every_lazy_name_is_there_and_the_same_object():
    """Each name of the tables resolves to the object its module defines, the api's dir() lists
    them, ``from ... import`` reaches them, and a table names only modules at or below its
    package's layer (the layering test reads import statements, not these strings)."""
    import importlib

    from tb_footprint_plugin import api

    verify = importlib.import_module("tb_footprint_plugin.verify")  # (the package: fp.verify is the verb)

    for pkg, layer in ((api, layer_of("api")), (verify, layer_of("verify"))):
        table = pkg._WHERE
        assert len(table) > (100 if pkg is api else 10)
        for name, where in table.items():
            module = where[0] if isinstance(where, tuple) else "tb_footprint_plugin." + where
            attr = (where[1] if isinstance(where, tuple) else name)
            target = importlib.import_module(module)
            assert getattr(pkg, name) is (target if attr is None else getattr(target, attr)), name
            assert layer_of(module[len("tb_footprint_plugin."):]) <= layer, (pkg.__name__, name, module)
            assert name in dir(pkg)
    assert set(api.__all__) <= set(dir(api))
    from tb_footprint_plugin.api import check_failpoints, survey  # noqa: F401  (an alias, a verb group)
    from tb_footprint_plugin.engine.faults import check_env
    assert check_failpoints is check_env and survey is importlib.import_module("tb_footprint_plugin.api.survey")
    with pytest.raises(AttributeError):
        api.no_such_name  # noqa: B018
    with pytest.raises(ImportError):
        from tb_footprint_plugin.api import no_such_name  # noqa: F401
