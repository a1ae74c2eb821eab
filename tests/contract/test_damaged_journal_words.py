"""A journal recovery will not replay because it is damaged is refused in one sentence on every
store (issue #26, ``recovery_rules.damaged_journal``): the file named (a disk's path, a bucket's
URL), what is damaged (a disk's line, a bucket's object, read whole), and what is left as it is
(``NOT_REPLAYED``); a bucket's status names it in the same words. The journal is left as it is."""
from contract_stores import KINDS, buckets, logdir_on, scalar_runs_on  # noqa: F401 - fixtures

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Recovery
from tb_footprint_plugin.engine.recovery_rules import NOT_REPLAYED
from tb_footprint_plugin.storage.stores import open_store

OP = "20260101T000000-d4d4d4"


@pytest.fixture
def logdir(scalar_runs_on):
    def make(store):
        url = scalar_runs_on(store, runs=("a", "b"), steps=1)
        rep = api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0)  # the state made
        assert rep.ok, rep.to_dict()
        return url
    return make


@pytest.mark.parametrize("store", KINDS)
def test_a_damaged_journal_is_refused_in_one_sentence_naming_it(store, logdir):
    url = logdir(store)
    st = open_store(url)
    key = f".tb-footprint/journal/{OP}" + (".jsonl" if store == "posix" else ".json")
    st.put(key, b"{not json\n")
    name = f"{url.rstrip('/')}/{key}"

    outs = [o for o in api.recover_logdir(url) if o.op_id == OP]
    assert [(o.action, o.code) for o in outs] == [(Recovery.REFUSED, Finding.DAMAGED_FILE)], [vars(o) for o in outs]
    detail = outs[0].detail
    assert detail.startswith(f"{name}: ") and detail.endswith(f"; {NOT_REPLAYED}"), detail
    assert "damaged" in detail, detail
    assert st.read_all(key) == b"{not json\n"  # left as it is
    # status names it in recover's words on every store (a disk's finding names it in ``path``,
    # a bucket's in ``file``)
    (p,) = [p for p in api.status(url)["problems"] if name in (p.get("path"), p.get("file"))]
    assert (p["code"], p["detail"]) == (Finding.DAMAGED_FILE, detail), p


def test_a_disk_journal_without_its_begin_record_status_says_recovers_words(logdir, tmp_path):
    """A disk's journal holding records but no begin record: status said 'journal has no begin
    record; not replayed by ...', recover its own sentence; now both say recover's."""
    url = logdir("posix")
    key = f".tb-footprint/journal/{OP}.jsonl"
    open_store(url).put(key, b'{"type": "backup", "op_id": "%s"}\n' % OP.encode())
    name = f"{url.rstrip('/')}/{key}"
    (p,) = [p for p in api.status(url)["problems"] if p.get("path") == name]
    outs = [o for o in api.recover_logdir(url) if o.op_id == OP]
    assert [(o.action, o.code) for o in outs] == [(Recovery.REFUSED, Finding.DAMAGED_FILE)], [vars(o) for o in outs]
    assert "no begin record" in outs[0].detail and outs[0].detail.startswith(f"{name}: "), outs[0].detail
    assert (p["code"], p["detail"]) == (Finding.DAMAGED_FILE, outs[0].detail), p
