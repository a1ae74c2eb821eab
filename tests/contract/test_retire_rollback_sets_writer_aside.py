"""A retirement's rollback that meets a writer's file at a retired path keeps both, on every store
(issue #26, the disk's rule): the original back at its path, the writer's file set aside beside it
as ``<path>.salvaged-001``, nothing else changed and nothing of the run left in the vault, so
TensorBoard shows every record. A bucket left the writer's object at the key and kept the
original in the vault only (manifest ``not_restored``). The same when the rollback is left to the
next start (``recover``), and when a rollback stopped after setting the writer's object aside is
run again (the ``.salvaged-001`` holding its bytes counts as set aside: no ``.salvaged-002``)."""
from contract_stores import KINDS, buckets, logdir_on, scalar_runs_on  # noqa: F401 - fixtures

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine import bucket_retire, faults, retire
from tb_footprint_plugin.storage.stores import open_store

pytestmark = pytest.mark.usefixtures("disarm_faults")

WRITER = b"a writer's new file, written while the original was in the vault\n"
FAILURE = "injected: the step failed"
STOPPED = "injected: the rollback could not write"


def _user(st) -> dict:
    return {e.key: st.read_all(e.key) for e in st.list(every_key=True) if not e.key.startswith(".tb-footprint")}


def _vault_keys_of(st, op_id: str) -> list:
    return [e.key for e in st.list(every_key=True) if e.key.startswith(".tb-footprint") and op_id in e.key
            and "/journal" not in e.key and "history" not in e.key and "changes" not in e.key]


def _retire_b_while_a_writer_writes(url: str, st, path: str):
    """Retire run ``b``; once every file of it is in the vault (a disk moved them, a bucket copied
    them) a writer writes ``path`` anew and the step fails: the retirement is rolled back."""
    def writer_then_fail():
        st.put(path, WRITER)
        raise OSError(FAILURE)

    faults.arm("retire.move", writer_then_fail)
    (o,) = [o for o in api.retire(url, api.retire_rule(runs=["b"]), dry_run=False, quiet_period=0).outcomes
            if o.run == "b"]
    faults.disarm_all()
    return o


def _both_kept(st, url: str, before: dict, path: str, op_id: str) -> None:
    assert _user(st) == {**before, f"{path}.salvaged-001": WRITER}
    assert api.retired(url) == []
    assert _vault_keys_of(st, op_id) == []


def _setup(store, scalar_runs_on):
    url = scalar_runs_on(store, runs=("a", "b"), steps=2)
    st = open_store(url)
    before = _user(st)
    (path,) = [k for k in before if k.startswith("b/")]
    return url, st, before, path


@pytest.mark.parametrize("store", KINDS)
def test_a_rollback_puts_the_original_back_and_sets_the_writers_file_beside_it(store, scalar_runs_on):
    url, st, before, path = _setup(store, scalar_runs_on)
    o = _retire_b_while_a_writer_writes(url, st, path)
    assert o.status == Outcome.ROLLED_BACK, o.to_dict()
    aside = f"{path}.salvaged-001".rsplit("/", 1)[-1]
    assert aside in o.reason, o.reason
    (line,) = [e for e in api.history(url) if e.get("op_id") == o.op_id]
    assert line["outcome"] == Outcome.ROLLED_BACK and aside in str(line.get("reason")), line
    _both_kept(st, url, before, path, o.op_id)


@pytest.mark.parametrize("store", KINDS)
def test_a_rollback_left_to_the_next_start_does_the_same(store, scalar_runs_on, monkeypatch):
    url, st, before, path = _setup(store, scalar_runs_on)

    def stop(*a, **kw):
        raise OSError(STOPPED)

    monkeypatch.setattr(retire, "rollback_retire", stop)
    monkeypatch.setattr(bucket_retire, "rollback", stop)
    o = _retire_b_while_a_writer_writes(url, st, path)
    assert (o.status, o.code) == (Outcome.FAILED, Failure.ROLLBACK_INCOMPLETE), o.to_dict()
    monkeypatch.undo()  # the next start, with nothing in its way
    api.recover_logdir(url)
    _both_kept(st, url, before, path, o.op_id)


@pytest.mark.parametrize("store", [k for k in KINDS if k != "posix"])
def test_a_rollback_stopped_after_setting_the_writers_object_aside_is_finished_once(store, scalar_runs_on,
                                                                                      monkeypatch):
    url, st, before, path = _setup(store, scalar_runs_on)
    real = bucket_retire._set_aside

    def set_aside_then_stop(*a, **kw):
        real(*a, **kw)
        raise OSError(STOPPED)  # the writer's object copied beside it, not yet deleted at its key

    monkeypatch.setattr(bucket_retire, "_set_aside", set_aside_then_stop)
    o = _retire_b_while_a_writer_writes(url, st, path)
    assert (o.status, o.code) == (Outcome.FAILED, Failure.ROLLBACK_INCOMPLETE), o.to_dict()
    assert _user(st) == {**before, path: WRITER, f"{path}.salvaged-001": WRITER}
    monkeypatch.undo()
    api.recover_logdir(url)
    _both_kept(st, url, before, path, o.op_id)


@pytest.mark.parametrize("store", [k for k in KINDS if k != "posix"])
def test_a_writer_that_writes_again_while_its_object_is_set_aside_loses_nothing(store, scalar_runs_on, monkeypatch):
    """The writer's object is deleted at the version copied aside only: one written again in
    between stays at the key, and is set aside in its turn, before the original goes back."""
    url, st, before, path = _setup(store, scalar_runs_on)
    real = bucket_retire._set_aside
    again = b"written again while the first was being set aside\n"

    calls = []

    def set_aside_then_write_again(*a, **kw):
        name = real(*a, **kw)
        calls.append(name)
        if len(calls) == 1:  # the writer writes again before its first object is deleted at the key
            st.put(path, again)
        return name

    monkeypatch.setattr(bucket_retire, "_set_aside", set_aside_then_write_again)
    o = _retire_b_while_a_writer_writes(url, st, path)
    assert o.status == Outcome.ROLLED_BACK, o.to_dict()
    assert _user(st) == {**before, f"{path}.salvaged-001": WRITER, f"{path}.salvaged-002": again}
    assert api.retired(url) == []
    assert _vault_keys_of(st, o.op_id) == []
