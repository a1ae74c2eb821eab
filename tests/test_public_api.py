"""The documented Python API (``import tb_footprint_plugin as fp``) works in any call order.

Three verbs share their name with a subpackage (``scan``, ``plan``, ``verify``): once any module
below them is imported, Python's import system would bind the subpackage on the parent and
``fp.scan(logdir)`` would call a module. Each order runs in a fresh interpreter so that what was
imported before is exactly what the order imported.
"""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

SCRIPT = r'''
import json, os, sys
logdir, order = sys.argv[1], sys.argv[2].split(",")
import tb_footprint_plugin as fp
from tb_footprint_plugin import synth

run = os.path.join(logdir, "exp", "train")
with synth.EventWriter(run) as w:
    for s in range(30):
        w.scalar("loss", s, 1.0 / (s + 1))
synth.write_profile_session(run, synth.session_name_for(synth.DEFAULT_TIMESTAMP), n_events=800,
                            with_caches=True, seed=1)
for d, dirs, files in os.walk(logdir):
    for n in dirs + files:
        os.utime(os.path.join(d, n), (1795000000, 1795000000))

calls = {
    "scan": lambda: fp.scan(logdir),
    "plan": lambda: fp.plan(logdir, "lossless", quiet_period=0),
    "reduce_logdir": lambda: fp.reduce_logdir(logdir, policy="lossless", dry_run=False, quiet_period=0,
                                              verify_backends=("python",)),
    "verify": lambda: fp.verify(logdir, verify_backends=("python",)),
    "status": lambda: fp.status(logdir),
    "history": lambda: fp.history(logdir),
    "restore": lambda: fp.restore(logdir),
    "purge": lambda: fp.purge(logdir, yes=True),
}
out = []
for name in order:
    attr = getattr(fp, name)
    if not callable(attr) or type(attr).__name__ != "function":
        raise SystemExit(f"fp.{name} is {attr!r}, not the documented function")
    result = calls[name]()
    out.append([name, type(result).__name__])
    if name == "reduce_logdir":
        assert result.ok, [o.to_dict() for o in result.outcomes]
# every verb is still the function after everything above was imported
for name in ("scan", "plan", "verify", "history", "restore", "purge", "status", "reduce_logdir"):
    assert type(getattr(fp, name)).__name__ == "function", (name, getattr(fp, name))
from tb_footprint_plugin import scan, plan, verify, history
assert all(type(f).__name__ == "function" for f in (scan, plan, verify, history))
print(json.dumps(out))
'''

ORDERS = [
    "scan,plan,reduce_logdir,verify,history,status,restore,purge",
    "plan,scan,history,verify",
    "reduce_logdir,history,scan,plan,verify,restore",
    "history,verify,status,plan,scan",
    "status,restore,purge,reduce_logdir,scan,history,plan",
]


@pytest.mark.parametrize("order", ORDERS)
def test_documented_verbs_work_in_any_order(tmp_path, order):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "logdir"), order],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [name for name, _ in done] == order.split(",")
    kinds = dict(done)
    assert kinds.get("scan", "LogdirFootprint") == "LogdirFootprint"
    assert kinds.get("plan", "Plan") == "Plan"
    assert kinds.get("reduce_logdir", "ReduceReport") == "ReduceReport"
    assert kinds.get("history", "list") == "list"
    assert kinds.get("status", "dict") == "dict"


def test_submodules_of_the_verb_packages_still_import():
    """The verbs win over the attribute, but ``from pkg.sub import x`` still reaches the modules."""
    code = ("import tb_footprint_plugin as fp\n"
            "from tb_footprint_plugin.scan import categories, scanner\n"
            "from tb_footprint_plugin.plan import planner\n"
            "from tb_footprint_plugin.verify import compare\n"
            "import sys\n"
            "assert sys.modules['tb_footprint_plugin.scan.scanner'] is scanner\n"
            "assert scanner.scan is fp.scan\n"
            "assert callable(fp.plan) and callable(fp.verify)\n"
            "assert categories.__name__ == 'tb_footprint_plugin.scan.categories'\n")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _api_names_used_by(path: str) -> set:
    """Names a front-end module takes from ``tb_footprint_plugin.api``: ``api.<name>`` on a name
    bound to the api package, and ``from tb_footprint_plugin.api import <name>``."""
    import ast

    tree = ast.parse(open(path, encoding="utf-8").read())
    bound, used = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "tb_footprint_plugin":
            bound |= {a.asname or a.name for a in node.names if a.name == "api"}
        elif isinstance(node, ast.ImportFrom) and node.module == "tb_footprint_plugin.api":
            used |= {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            bound |= {a.asname for a in node.names if a.name == "tb_footprint_plugin.api" and a.asname}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
            used.add(node.attr)
    return used


def test_every_api_name_the_front_ends_use_is_there():
    """The api is a package of verb-group modules re-exported by ``api/__init__.py``: every name
    the CLI, the tab, the loader and the integrations take from it, and every name of its
    ``__all__``, is an attribute of ``tb_footprint_plugin.api`` (a re-export the split dropped
    would fail here, not in a user's hands)."""
    from tb_footprint_plugin import api

    pkg = os.path.join(REPO, "tb_footprint_plugin")
    front = [os.path.join(pkg, "cli.py"), os.path.join(pkg, "loader.py")]
    for sub in ("plugin", "integrations"):
        front += [os.path.join(pkg, sub, n) for n in sorted(os.listdir(os.path.join(pkg, sub))) if n.endswith(".py")]
    wanted = {}
    for path in front:
        for name in _api_names_used_by(path):
            wanted.setdefault(name, os.path.relpath(path, REPO))
    assert len(wanted) > 40  # the front ends do use the api (a parse that finds nothing proves nothing)
    missing = sorted(f"{name} (used by {where})" for name, where in wanted.items() if not hasattr(api, name))
    assert not missing, missing
    assert not [n for n in api.__all__ if not hasattr(api, n)]
    assert len(set(api.__all__)) == len(api.__all__)
