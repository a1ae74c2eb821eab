"""A purge chooses by one rule and says what it kept in one shape on every store (issue #26 item
2, ``engine.purge_rules``): the filters (op, run, op ids, older than) pick the same operations on a
folder and on the three bucket servers, and a ``kept`` row carries the same fields everywhere
(``op_id``, ``run``, ``kind``, ``bytes`` — what stays in the vault —, ``code``, ``detail``)."""
from contract_stores import KINDS, buckets, logdir_on, reduced_and_retired  # noqa: F401 - fixtures

import pytest

from tb_footprint_plugin import api


KEPT_FIELDS = {"op_id", "run", "kind", "bytes", "code", "detail"}


def _ops(url: str) -> dict:
    return {m["run"]: m["op_id"] for m in api.operations(url)}


@pytest.mark.parametrize("store", KINDS)
def test_the_filters_choose_the_same_operations_on_every_store(store, reduced_and_retired):
    url = reduced_and_retired(store)
    ops = _ops(url)
    assert set(ops) == {"exp", "old"}, ops

    def chosen(**how):
        rep = api.purge(url, **how)  # a preview: nothing deleted
        assert rep.dry_run and rep.kept == [], rep.to_dict()
        return sorted(o["run"] for o in rep.ops)

    assert chosen() == ["exp", "old"]
    assert chosen(run="exp") == ["exp"]
    assert chosen(runs=["old"]) == ["old"]
    assert chosen(op=ops["old"]) == ["old"]
    assert chosen(op_ids=[ops["exp"]]) == ["exp"]
    assert chosen(op_ids=[]) == []
    assert chosen(older_than=3600) == []  # both finished moments ago
    assert chosen(older_than=0) == ["exp", "old"]
    # a purged operation is never chosen again
    rep = api.purge(url, yes=True, run="exp")
    assert [o["run"] for o in rep.ops] == ["exp"], rep.to_dict()
    assert chosen() == ["old"]


@pytest.mark.parametrize("store", KINDS)
def test_a_kept_row_has_the_same_fields_on_every_store(store, reduced_and_retired):
    """A cancel before the intent keeps every chosen operation: each row says its kind and the
    bytes it keeps in the vault, as on a disk (a bucket's rows had no kind and 0 bytes)."""
    url = reduced_and_retired(store)
    ops = _ops(url)
    token = api.CancelToken()
    rep = api.purge(url, yes=True, cancel=token, progress=lambda step, fraction: token.cancel())
    assert rep.ops == [] and rep.freed_bytes == 0, rep.to_dict()
    rows = sorted(rep.kept, key=lambda k: k["run"])
    assert [set(k) for k in rows] == [KEPT_FIELDS, KEPT_FIELDS], rows
    assert [(k["run"], k["op_id"], k["kind"], k["code"]) for k in rows] == [
        ("exp", ops["exp"], "reduce", "interrupted"), ("old", ops["old"], "retire", "interrupted")], rows
    assert all(isinstance(k["bytes"], int) and k["bytes"] > 0 for k in rows), rows
    # nothing of a kept row went: a purge now takes both
    rep = api.purge(url, yes=True)
    assert sorted(o["run"] for o in rep.ops) == ["exp", "old"] and rep.kept == [], rep.to_dict()


def test_a_manifest_with_no_finish_time_is_never_old_enough():
    """``finished_at`` is untrusted (null in a manifest the one schema reads): ``--older-than``
    passes it over rather than fail the whole purge (a disk's filter raised TypeError; a
    bucket's took it as finished now)."""
    from tb_footprint_plugin.engine.purge_choice import PurgeFilter

    m = {"op_id": "o1", "run": "a", "kind": "reduce", "finished_at": None, "backup_purged": False}
    assert not PurgeFilter(now=200.0, older_than=10.0).admits(m)
    assert PurgeFilter(now=200.0).admits(m) and PurgeFilter(now=200.0, older_than=0.0).admits(m)
    assert not PurgeFilter(now=200.0, older_than=10.0).admits(dict(m, finished_at=True))
    assert PurgeFilter(now=200.0, older_than=10.0).admits(dict(m, finished_at=150.0))


@pytest.mark.parametrize("store", KINDS)
def test_the_originals_lost_for_good_are_counted_on_every_store(store, reduced_and_retired):
    """What the confirmation says is lost for good (``originals_lost``, each row's ``originals``)
    is one rule: a run not restored has its originals only in the backups a purge deletes — a
    reduction's removed file as a retired run's files (a bucket said 0 for a reduction, and 0 in
    all); a restored run loses nothing."""
    url = reduced_and_retired(store)
    rep = api.purge(url)
    rows = {o["run"]: o["originals"] for o in rep.ops}
    assert rows == {"exp": 1, "old": 1} and rep.originals_lost == 2, rep.to_dict()
    (r,) = api.restore(url, run="exp")
    assert r.status == "restored", r.to_dict()
    # a disk's restore may have let its backup go already; a bucket keeps its copies until purge
    rep = api.purge(url)
    assert {o["run"]: o["originals"] for o in rep.ops if o["run"] == "old" or o["originals"]} == {"old": 1} \
        and rep.originals_lost == 1, rep.to_dict()
    rep = api.purge(url, yes=True)
    assert rep.originals_lost == 1 and "old" in [o["run"] for o in rep.ops], rep.to_dict()
