"""Review R12's findings on the bucket engine's move onto the Store interface, reproduced and fixed.

- F1: a journal whose staged key passes the prefix check but is no plain key (``<vault>/tmp/../x``)
  is refused by recovery with a code, and the journals after it are still settled: before, the
  Store raised ``ValueError`` out of ``recover`` and every verb that starts with it (reduce,
  restore, retire, recheck) raised until someone deleted the object by hand.
- F2: a journal object whose key holds a ``..`` segment (S3 keeps such a key as written) is
  refused with a code, not a ``ValueError`` out of ``recover``.
"""
import pytest

from test_trust_matrix import (STATE, Place, _bucket_journal, _event_rel, buckets, place, reduced_a,  # noqa: F401
                               template)
from tb_footprint_plugin import api


@pytest.mark.parametrize("place", ["s3", "gs", "az"], indirect=True)
def test_a_journal_naming_a_staged_key_with_dot_segments_is_refused_and_the_next_settled(place):
    p = place
    reduced_a(p)
    ev = _event_rel(p, "b").replace("b/", "a/", 1)
    vault = p.store_path(STATE)
    planted = "20260101T000000-eeeeee"
    files = [{"action": "rewrite", "path": ev, "final": ev,
              "backup": p.store_path(f"{STATE}/blobs/{planted}/x"), "size": 1,
              "version": "v", "checksums": {"md5": "AAAA"}, "backup_checksums": {"md5": "AAAA"},
              "tmp": f"{vault}/tmp/../x", "new_size": 1, "new_checksums": {"md5": "BBBB"}}]
    p.write(p.journal(planted), _bucket_journal(p, planted, files))
    after = "20260101T000000-ffffff"
    files2 = [{"action": "delete", "path": "a/nothing-here", "backup": p.store_path(f"{STATE}/blobs/{after}/a/nothing-here"),
               "size": 1, "version": "v", "checksums": {}}]
    p.write(p.journal(after), _bucket_journal(p, after, files2, step="backing_up"))
    outs = {o.op_id: o for o in api.recover_logdir(p.url)}
    assert outs[planted].action == "refused", vars(outs[planted])
    assert outs[after].action == "rolled_back", vars(outs[after])


@pytest.mark.parametrize("place", ["s3"], indirect=True)
def test_a_journal_key_with_dot_segments_is_refused(place):
    p = place
    reduced_a(p)
    p.write(f"{STATE}/journal/x/../20260101T000000-gggggg.json", _bucket_journal(p, "20260101T000000-gggggg", []))
    outs = api.recover_logdir(p.url)  # raised ValueError before
    assert not [o for o in outs if "gggggg" in o.op_id and o.action not in ("refused",)], [vars(o) for o in outs]
