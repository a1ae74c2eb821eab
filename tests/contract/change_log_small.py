"""A change log with its limits made small, on a disk and on moto's S3: the fixture and the line
maker the roll-over tests share (``test_change_log_rollover``, ``test_change_log_seal_cut_short``)."""
import dataclasses
import json
import uuid

import pytest

from contract_stores import buckets  # noqa: F401 - the bucket fixture ``where`` asks for (test modules import it from here)
from tb_footprint_plugin.engine import history
from tb_footprint_plugin.storage import store_object
from tb_footprint_plugin.storage.store_object import ObjectStore

STATE = ".tb-footprint"
#: the limit both stores' change logs get here: a few dozen lines
LIMIT = 4096


def line(run: str, t: float) -> bytes:
    """One change-log line as the tool writes it (a verified reduce of ``run`` at ``t``)."""
    return (json.dumps({"time": t, "run": run, "op_id": f"{run}-{t}", "kind": "reduce", "outcome": "verified"},
                       sort_keys=True) + "\n").encode()


@pytest.fixture(params=["posix", "s3"])
def where(request, tmp_path, monkeypatch):
    """(kind, the store, the key of a log name, the change log) with a limit of ``LIMIT`` bytes on
    either store."""
    monkeypatch.setattr(history, "MAX_STATE_BYTES", LIMIT)
    # the bound a bucket declares for its appends (its change log takes it as its limit)
    monkeypatch.setattr(store_object, "BUCKET_CAPABILITIES",
                        dataclasses.replace(store_object.BUCKET_CAPABILITIES, append_limit=LIMIT))
    monkeypatch.setattr(store_object, "READ_ALL_LIMIT", LIMIT)
    if request.param == "posix":
        state = tmp_path / "logs" / STATE
        state.mkdir(parents=True)
        s = history.StateFolder(str(state))
        yield "posix", s, (lambda name: name), (lambda: history.disk_log(str(state)))
    else:
        s = ObjectStore(request.getfixturevalue("buckets")("s3").url(f"logs-{uuid.uuid4().hex[:8]}"))
        yield "s3", s, (lambda name: f"{STATE}/{name}"), (lambda: history.bucket_log(s))
        s.close()
