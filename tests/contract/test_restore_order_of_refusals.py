"""A restore refuses in one order and says one thing, on every store (issue #26, r24 task B):

- the run's lock first, then its backups (``putback.backups_refusal``): another process's
  restore or reduce may be changing the vault until the lock is held, so a check made before it
  can be stale. A run another host holds whose backup is gone is ``skipped``/``locked`` on a
  folder and the three bucket servers (a disk checked its backups before its lock and said
  ``backup_damaged``, a bucket ``locked``);
- a writer met before anything is put back is a skip (``putback.writer_met``), as a reduce and a
  retirement say: a folder's file held open for writing is ``skipped``/``open_for_writing``,
  nothing changed (it said ``failed``). A bucket has no writer to meet before its put-back (no
  store tells an object open for writing, and a restore asks no quiet period): an object a
  writer puts at an original's key is kept, its original named as not put back
  (test_restore_put_back_window_buckets)."""
import os
import subprocess
import sys

from contract_stores import KINDS, buckets, hold_by_another_host, logdir_on, reduced_and_retired  # noqa: F401 - fixtures

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome, Skip
from tb_footprint_plugin.storage.stores import open_store

PROFILE = "exp/plugins/profile/2026_01_01_00_00_00/host.xplane.pb"


def _reduction(url: str) -> str:
    (m,) = api.restorable(url, run="exp")
    return m["op_id"]


def _keys(st) -> list:
    return sorted((e.key, e.size) for e in st.list(every_key=True))


def _user_keys(st) -> list:
    return [k for k in _keys(st) if not k[0].startswith(".tb-footprint")]


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
def test_a_locked_run_whose_backup_is_gone_says_locked(store, reduced_and_retired):
    url = reduced_and_retired(store)
    op = _reduction(url)
    _lose_backup(store, url, op)
    hold_by_another_host(store, url, "exp")
    st = open_store(url)
    before = _user_keys(st)

    (o,) = api.restore(url, op=op)
    assert (o.status, o.code, o.op_id) == (Outcome.SKIPPED, Skip.LOCKED, op), o.to_dict()
    assert "another-host" in o.reason, o.reason
    assert _user_keys(st) == before


def test_a_writer_met_before_anything_is_put_back_is_a_skip(reduced_and_retired):
    url = reduced_and_retired("posix")
    op = _reduction(url)
    event = next(k for k, _ in _user_keys(open_store(url)) if k.startswith("exp/") and "tfevents" in k)
    holder = subprocess.Popen([sys.executable, "-c", "import sys; f = open(sys.argv[1], 'ab'); "
                               "print('open', flush=True); sys.stdin.read()", os.path.join(url, event)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        before = _user_keys(open_store(url))
        (o,) = api.restore(url, op=op)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert (o.status, o.code, o.op_id) == (Outcome.SKIPPED, Skip.OPEN_FOR_WRITING, op), o.to_dict()
    assert f"pid {holder.pid}" in o.reason, o.reason
    assert _user_keys(open_store(url)) == before
    (o,) = api.restore(url, op=op)
    assert o.status == Outcome.RESTORED, o.to_dict()
