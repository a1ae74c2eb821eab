"""The engine reaches object stores through the ``Store`` interface only (issue #26, item 1): no
module under ``tb_footprint_plugin/engine/`` calls the object-store client below ``ObjectStore``
(``RemoteFS.ops``: ``_S3Ops``/``_GCSOps``/``_AzureOps``) any more, and ``BucketState`` offers no
way to it. Read with ``ast`` (as ``test_layering.py`` reads imports): an attribute ``.ops`` of a
``RemoteFS`` (a name or attribute ending in ``rfs``), or any ``X.ops.<one of the client's
methods>``, is a finding.
"""
import ast
from pathlib import Path

from tb_footprint_plugin.engine.bucket_objects import BucketState
from tb_footprint_plugin.storage.store_object import ObjectStore

ENGINE = Path(__file__).resolve().parents[1] / "tb_footprint_plugin" / "engine"
#: what the client below ``ObjectStore`` offers (``storage.remote._Ops`` and its subclasses)
CLIENT_METHODS = {"head", "put", "copy", "upload_file", "delete", "delete_coded", "retention", "check_absent"}
#: the client's own names: no engine module imports them
CLIENT_NAMES = {"ops_for", "_Ops", "_S3Ops", "_GCSOps", "_AzureOps"}


def _ends_in_rfs(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name == "rfs" or name.endswith("_rfs")


def client_uses(source: str, filename: str = "<module>") -> list:
    """``(line, text)`` of each use of the object-store client in ``source``."""
    tree = ast.parse(source, filename)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "ops" and _ends_in_rfs(node.value):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Attribute) and node.attr in CLIENT_METHODS and \
                isinstance(node.value, ast.Attribute) and node.value.attr == "ops":
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom) and node.module == "tb_footprint_plugin.storage.remote":
            found += [(node.lineno, f"import {a.name}") for a in node.names if a.name in CLIENT_NAMES]
    return sorted(set(found))


def test_the_checker_sees_each_way_to_the_client():
    src = ("from tb_footprint_plugin.storage.remote import ops_for, RemoteFS\n"
           "rfs.ops.copy(a, b)\nself.rfs.ops.head(p)\nx = st.ops\nx.ops.delete([p])\nv = src_rfs.ops\n"
           "vault.ops\nidx.ops.get(op)\nos.makedirs(vault.ops)\n")
    assert sorted({n for n, _ in client_uses(src)}) == [1, 2, 3, 5, 6]


def test_no_engine_module_calls_the_object_store_client():
    found = {}
    for path in sorted(ENGINE.rglob("*.py")):
        uses = client_uses(path.read_text(encoding="utf-8"), str(path))
        if uses:
            found[path.name] = uses
    assert not found, f"engine modules past the Store interface, onto RemoteFS.ops: {found}"


def test_bucket_state_offers_no_way_to_the_client():
    assert not hasattr(BucketState, "ops")


def test_a_store_s_failure_is_caught_and_coded_as_it_is():
    """The engine takes a ``Store`` call's ``StoreFailure`` itself (no translation into the
    client's ``RemoteError`` any more) and gives it the code the local engine gives the same
    failure: a refused key is ``refused``, a full store ``no_space``, any other ``store_error``."""
    from tb_footprint_plugin.codes import Failure, StoreError
    from tb_footprint_plugin.engine import bucket_objects
    from tb_footprint_plugin.engine.bucket_state import STORE_FAILURES, failure_code
    from tb_footprint_plugin.storage.store import StoreFailure

    assert not hasattr(bucket_objects, "as_client_error") and not hasattr(bucket_objects, "client_errors")
    assert STORE_FAILURES == (StoreFailure,)  # listings and ranged reads included: no RemoteError reaches it
    assert failure_code(StoreFailure(StoreError.UNSAFE_KEY, "a/../b", "refused")) == Failure.REFUSED
    assert failure_code(StoreFailure(StoreError.NO_SPACE, "k", "quota")) == Failure.NO_SPACE
    for code in (StoreError.PRECONDITION_FAILED, StoreError.NOT_FOUND, StoreError.STORE_ERROR):
        assert failure_code(StoreFailure(code, "k", "x")) == Failure.STORE_ERROR
    assert failure_code(StoreFailure(StoreError.LIST_FAILED, "", "a listing")) == Failure.STORE_ERROR


def test_the_state_of_a_client_is_reused_and_keeps_few_clients_alive():
    """``BucketState.of`` makes one ``BucketState`` per client and reuses it (its stores with it),
    without keeping every client it ever saw alive (a weak-keyed cache whose values hold their
    keys would: a long-lived plugin process opens a client per request)."""
    import gc
    import weakref

    from tb_footprint_plugin.engine import bucket_objects

    class Client(ObjectStore):  # what BucketState's constructor keeps: the store, nothing is requested
        def __init__(self):
            pass

    first = Client()
    assert BucketState.of(first) is BucketState.of(first)
    gone = weakref.ref(first)
    del first
    for _ in range(4 * bucket_objects.OF_KEPT):
        BucketState.of(Client())
    gc.collect()
    assert gone() is None


#: what reaches a store past the ``Store`` interface: ``RemoteFS``'s listings, ranged and whole
#: reads (on a receiver ending in ``rfs``), the fsspec filesystem's ``cat_file`` (on any receiver)
#: and the client's exception type, ``RemoteError``
PAST_THE_STORE_ANY = {"list_tree", "list_under", "cat_file"}
PAST_THE_STORE_RFS = {"open_ranged", "read_bytes", "read_range", "write_bytes", "upload_stream", "fs"}


def store_bypasses(source: str, filename: str = "<module>") -> list:
    """``(line, text)`` of each listing, read or ``RemoteError`` import that bypasses ``Store``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Attribute) and (node.attr in PAST_THE_STORE_ANY or
                                                node.attr in PAST_THE_STORE_RFS and _ends_in_rfs(node.value)):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom) and node.module == "tb_footprint_plugin.storage.remote":
            found += [(node.lineno, f"import {a.name}") for a in node.names if a.name == "RemoteError"]
        elif isinstance(node, ast.Attribute) and node.attr == "RemoteError":
            found.append((node.lineno, ast.unparse(node)))
    return sorted(set(found))


def test_the_bypass_checker_sees_each_way_past_the_store():
    src = ("from tb_footprint_plugin.storage.remote import RemoteError, RemoteFS\n"
           "rfs.list_tree(JOURNAL)\nself.rfs.list_under(p, r)\nrfs.fs.cat_file(p, start=0, end=1)\n"
           "vfs.open_ranged(k, n)\nrfs.read_bytes(k)\nst.read_bytes(p)\nremote.RemoteError\nrfs.path(k)\n")
    assert sorted({n for n, _ in store_bypasses(src)}) == [1, 2, 3, 4, 6, 8]


def test_the_bucket_engine_lists_and_reads_through_the_store_only():
    """Every listing and read of the engine goes through ``Store`` (``BucketState.listing``,
    ``tree``, ``read_range``, ``open_read``, ``read_bytes``; the front ends' usage listings
    included: ``front_bucket.py`` and ``usage.py`` listed with ``RemoteFS`` before), and only
    ``StoreFailure`` reaches its catch sites or leaves the engine: no module of ``engine/`` lists
    with ``RemoteFS``, reads with it or its filesystem, or imports ``RemoteError`` (the front ends
    raised it for a verb a bucket lacks before)."""
    found = {}
    for path in sorted(ENGINE.rglob("*.py")):
        uses = store_bypasses(path.read_text(encoding="utf-8"), str(path))
        if uses:
            found[path.name] = uses
    assert not found, f"engine modules listing or reading past the Store interface: {found}"


def test_a_verb_a_store_cannot_do_is_refused_with_the_stores_code():
    """A local verb asked of a bucket logdir is refused as a value with a ``codes.py`` code: the
    ``Store``'s ``StoreFailure`` ``StoreError.NOT_SUPPORTED`` (an ``OSError``: the CLI's exit 1 and
    its message unchanged), no longer the client's ``RemoteError``."""
    import pytest

    from tb_footprint_plugin.codes import StoreError
    from tb_footprint_plugin.engine.front import local_context
    from tb_footprint_plugin.storage.store import StoreFailure

    for logdir, backup_dir in (("s3://bucket/logs", None), ("gs://bucket/logs", "az://acct/vault")):
        with pytest.raises(StoreFailure) as e:
            local_context(logdir, backup_dir)
        assert e.value.code == StoreError.NOT_SUPPORTED and isinstance(e.value, OSError)
        assert str(e.value) == (f"{logdir}: this verb is not available on object storage (scan, plan, reduce, "
                                "retire, verify, restore, purge, status, history and operations are)")
