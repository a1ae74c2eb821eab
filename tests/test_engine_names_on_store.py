"""The engine names and reaches a bucket's objects through its ``ObjectStore`` (issue #26: a
repository blind to its store, restic's model): no engine module takes, imports or names the
store's client, ``RemoteFS``, but the one place that makes it, ``front_bucket.bucket_of`` (it
hands the engine the logdir's ``ObjectStore``, whose ``path``/``url_of``/``root``/``at`` give the
names the engine writes in its journals and manifests). Before, every ``engine/bucket_*.py``
function took a ``RemoteFS`` to build those names."""
import ast
from pathlib import Path

from test_scan_on_store import remote_fs_uses

ENGINE = Path(__file__).resolve().parents[1] / "tb_footprint_plugin" / "engine"
#: the module and function where the engine makes the store's client
MAKER = ("front_bucket.py", "bucket_of")


def _span(source: str, name: str) -> range:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return range(node.lineno, node.end_lineno + 1)
    return range(0)


def client_uses(path: Path) -> list:
    """``(line, text)`` of each use of the client in the engine module at ``path``, those of the
    function that makes it left out."""
    source = path.read_text(encoding="utf-8")
    allowed = _span(source, MAKER[1]) if path.name == MAKER[0] else range(0)
    found = set(remote_fs_uses(source, str(path)))
    found |= {(node.lineno, f"parameter {node.arg}") for node in ast.walk(ast.parse(source))
              if isinstance(node, ast.arg) and (node.arg == "rfs" or node.arg.endswith("_rfs"))}
    return sorted((n, t) for n, t in found if n not in allowed)


def test_the_checker_leaves_out_the_maker_alone(tmp_path):
    src = ("def bucket_of(url):\n    from x import RemoteFS\n    return RemoteFS(url)\n\n\n"
           "def other(rfs):\n    return rfs.path('a')\n")
    (tmp_path / "front_bucket.py").write_text(src)
    (tmp_path / "elsewhere.py").write_text(src)
    assert [n for n, _ in client_uses(tmp_path / "front_bucket.py")] == [6, 7]
    assert [n for n, _ in client_uses(tmp_path / "elsewhere.py")] == [2, 3, 6, 7]


def test_no_engine_module_takes_the_stores_client():
    found = {}
    for path in sorted(ENGINE.glob("*.py")):
        uses = client_uses(path)
        if uses:
            found[path.name] = uses
    assert not found, f"the engine takes the client below the Store (RemoteFS) here: {found}"
    source = (ENGINE / MAKER[0]).read_text(encoding="utf-8")
    made = [t for n, t in remote_fs_uses(source) if n in _span(source, MAKER[1])]
    assert "RemoteFS" in made  # the one place it is made still makes it
