"""A restore refuses the same things before it starts on every store, with the same codes and
words (``putback.restore_refusal``, ``putback.backups_refusal``; a lock another holds is a skip,
as reduce and retire say it). On a folder and the three bucket servers:

- a reduction whose run is retired: refused (``restore_blocked``, "restore the retirement first");
  a bucket's restore put the profile back into the retired run's prefix;
- a reduction whose backup is gone: refused (``backup_damaged``) with no journal left; a bucket's
  started, failed on the copy and kept a journal it could never finish;
- a run another host holds: skipped (``locked``); a disk's said failed."""
import os

from contract_stores import KINDS, buckets, hold_by_another_host, logdir_on, reduced_and_retired  # noqa: F401 - fixtures

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome, Skip
from tb_footprint_plugin.storage.stores import open_store

PROFILE = "exp/plugins/profile/2026_01_01_00_00_00/host.xplane.pb"


def _reduction(url: str) -> str:
    (m,) = api.restorable(url, run="exp")
    return m["op_id"]


def _keys(st) -> list:
    return sorted((e.key, e.size) for e in st.list(every_key=True))


def _user_keys(st) -> list:
    return [k for k in _keys(st) if not k[0].startswith(".tb-footprint")]


def _journals(st) -> list:
    return [k for k, _ in _keys(st) if k.startswith(".tb-footprint/journal")]


@pytest.mark.parametrize("store", KINDS)
def test_a_reduction_of_a_retired_run_is_refused(store, reduced_and_retired):
    url = reduced_and_retired(store)
    op = _reduction(url)
    rep = api.retire(url, api.retire_rule(runs=["exp"]), dry_run=False, quiet_period=0)
    assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
    retirement = rep.outcomes[0].op_id
    st = open_store(url)
    before = _user_keys(st)

    (o,) = api.restore(url, op=op)
    assert (o.status, o.code, o.op_id) == (Outcome.FAILED, Failure.RESTORE_BLOCKED, op), o.to_dict()
    assert o.reason == f"run 'exp' is retired ({retirement}); restore the retirement first"
    assert _user_keys(st) == before  # nothing put into the retired run's place
    assert not any(k.startswith("exp/") for k, _ in before)


def _lose_backup(store: str, url: str, op: str) -> None:
    """The reduction's backup of the profile gone from the vault (a disk's pack, a bucket's object)."""
    st = open_store(url)
    if store == "posix":
        packs = [k for k, _ in _keys(st) if k.startswith(".tb-footprint/packs/data/")]
        assert len(packs) == 1, packs
        os.unlink(os.path.join(url, packs[0]))
        return
    backups = [k for k, _ in _keys(st) if k.startswith(f".tb-footprint/blobs/{op}/")]
    assert [k for k in backups if k.endswith("host.xplane.pb")], backups
    st.delete(backups)


@pytest.mark.parametrize("store", KINDS)
def test_a_reduction_whose_backup_is_gone_is_refused_before_it_starts(store, reduced_and_retired):
    url = reduced_and_retired(store)
    op = _reduction(url)
    _lose_backup(store, url, op)
    st = open_store(url)
    before = _user_keys(st)

    (o,) = api.restore(url, op=op)
    assert (o.status, o.code, o.op_id) == (Outcome.FAILED, Failure.BACKUP_DAMAGED, op), o.to_dict()
    assert o.reason.startswith("backup damaged or missing in ") and \
        f" for: {PROFILE}; nothing was changed" in o.reason, o.reason
    assert _user_keys(st) == before
    assert _journals(st) == []  # nothing left for the next start to finish
    # and a second asks the same, refused the same way (no journal in its way)
    (o2,) = api.restore(url, op=op)
    assert (o2.status, o2.code, o2.reason) == (o.status, o.code, o.reason)


@pytest.mark.parametrize("store", KINDS)
def test_a_restore_of_a_run_another_holds_is_skipped(store, reduced_and_retired):
    url = reduced_and_retired(store)
    op = _reduction(url)
    hold_by_another_host(store, url, "exp")
    st = open_store(url)
    before = _user_keys(st)

    (o,) = api.restore(url, op=op)
    assert (o.status, o.code, o.op_id) == (Outcome.SKIPPED, Skip.LOCKED, op), o.to_dict()
    assert "another-host" in o.reason, o.reason
    assert _user_keys(st) == before


@pytest.mark.parametrize("store", KINDS)
def test_a_retired_run_and_its_reduction_come_back_in_one_restore(store, reduced_and_retired):
    """Guard: the refusal asks what the store says now, not what the call read first (its retirement
    comes back first, then its reduction is no longer refused as of a retired run)."""
    url = reduced_and_retired(store)
    op = _reduction(url)
    rep = api.retire(url, api.retire_rule(runs=["exp"]), dry_run=False, quiet_period=0)
    assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()

    outs = api.restore(url, run="exp")
    assert [(o.status, o.op_id if o.status == Outcome.FAILED else None) for o in outs] == \
        [(Outcome.RESTORED, None), (Outcome.RESTORED, None)], [o.to_dict() for o in outs]
    assert PROFILE in [k for k, _ in _user_keys(open_store(url))]
    assert api.restorable(url, run="exp") == [] and op


@pytest.mark.parametrize("store", KINDS)
def test_a_purged_reduction_asked_by_its_op_id_is_refused(store, reduced_and_retired):
    """A reduction whose backup was purged, asked for by ``op=``: refused with the same code and
    words on every store (``restore_blocked``, "was purged"); a bucket left it out of what it
    would restore and said there was nothing to restore (a usage error, exit 2), as for an
    operation that does not exist."""
    url = reduced_and_retired(store)
    op = _reduction(url)
    rep = api.purge(url, yes=True, op=op)
    assert [r["op_id"] for r in rep.ops] == [op], rep.to_dict()
    st = open_store(url)
    before = _user_keys(st)

    (o,) = api.restore(url, op=op)
    assert (o.status, o.code, o.op_id) == (Outcome.FAILED, Failure.RESTORE_BLOCKED, op), o.to_dict()
    assert o.reason == f"the backup of {op} was purged; nothing to restore from", o.reason
    assert _user_keys(st) == before and not _journals(st)
