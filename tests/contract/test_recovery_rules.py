"""What a recovery answers and writes, the same on a folder and the three bucket servers
(``engine.recovery_rules``: the disk's ``engine.recovery`` and the bucket's ``engine.bucket_recover``
are its two layouts). A reduce killed before its swap (at its journal, its backups, its
verification: on a bucket before or after its manifest is written) is rolled back, one killed inside its swap
after a passed verification is finished; either way the outcome is the one rule's (action, code
``recovered``, kind ``reduce``, the run it settled with its sizes, known on every store: a
rolled-back run as big as it was), the user's files are exactly as before or as the reduce leaves them, a rollback's change-log
line is written once with the one reason and code, and a second start settles nothing more."""
import os
import uuid

import pytest

from conftest import tree_hashes
from contract_stores import KINDS, buckets  # noqa: F401 - the bucket fixture
from helpers_crash import Killed, kill
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Failure, Finding, Outcome, Recovery
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.recovery_rules import INTERRUPTED_REASON, REDUCE

RUN = "exp"
STATE = ".tb-footprint"
#: killed before its swap (rolled back) and inside it, verification passed (finished), on every store
KILLED_AT = {"reduce.journal": Recovery.ROLLED_BACK, "reduce.backup": Recovery.ROLLED_BACK,
             "reduce.verify": Recovery.ROLLED_BACK, "reduce.mid_swap": Recovery.COMPLETED}


@pytest.fixture(autouse=True)
def _disarm():
    yield
    faults.disarm_all()


def _logdir(root):
    with synth.EventWriter(str(root / RUN)) as w:
        w.hparams({"lr": 0.1}, ["acc"])
        for s in range(300):
            w.histogram("weights", s, [(i, i + 1, (i * s) % 5) for i in range(8)])
            if s % 50 == 0:
                w.scalar("acc", s, s / 300)
    session = root / RUN / "plugins" / "profile" / "2026_01_01_00_00_00"
    session.mkdir(parents=True)
    (session / "host.xplane.pb").write_bytes(os.urandom(3000))
    old = 1_700_000_000
    for d, dirs, files in os.walk(root):
        for n in files + dirs:
            os.utime(os.path.join(d, n), (old, old))


@pytest.fixture
def place(request, tmp_path):
    """(url, files()) of a fresh logdir on the store kind asked for."""

    def make(kind):
        root = tmp_path / "logs"
        root.mkdir()
        _logdir(root)
        if kind == "posix":
            def files():
                return {k: v for k, v in tree_hashes(root).items() if v != "dir" and not k.startswith(STATE)}
            return str(root), files
        bucket = request.getfixturevalue("buckets")(kind)
        prefix = f"rr-{uuid.uuid4().hex[:8]}"
        url = bucket.upload(root, prefix)

        def files():
            return {k: v for k, v in bucket.hashes(prefix).items() if not k.startswith(STATE)}
        return url, files

    return make


def _reduce(url):
    return api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",))


@pytest.mark.parametrize("step", sorted(KILLED_AT))
@pytest.mark.parametrize("kind", KINDS)
def test_a_killed_reduction_is_settled_and_said_by_the_one_rule(kind, step, place):
    url, files = place(kind)
    original = files()
    faults.arm(step, kill)
    with pytest.raises(Killed):
        _reduce(url)
    faults.disarm_all()

    outs = [o for o in api.recover_logdir(url) if o.kind == REDUCE]
    assert len(outs) == 1, outs
    o = outs[0]
    action = KILLED_AT[step]
    assert (o.action, o.code, o.run) == (action, Finding.RECOVERED, RUN), o
    [ran] = o.runs
    assert (ran["run"], ran["op_id"]) == (RUN, o.op_id)
    assert isinstance(ran["bytes_before"], int) and ran["bytes_before"] > 0, ran
    if action == Recovery.ROLLED_BACK:
        assert ran["bytes_after"] == ran["bytes_before"]
        assert files() == original  # every original as it was, what was staged gone
    else:  # finished: the run as the reduce leaves it
        assert 0 < ran["bytes_after"] < ran["bytes_before"]
        assert files() != original
    lines = [e for e in api.history(url) if e.get("op_id") == o.op_id]
    if action == Recovery.ROLLED_BACK:
        assert [(e["outcome"], e["reason"], e["code"], e["before"], e["after"]) for e in lines] == \
            [(Outcome.ROLLED_BACK, INTERRUPTED_REASON, Failure.INTERRUPTED, ran["bytes_before"], ran["bytes_before"])], \
            lines
    # a second start finds nothing of it left, and writes no second line
    assert not [x for x in api.recover_logdir(url) if x.op_id == o.op_id]
    assert [e for e in api.history(url) if e.get("op_id") == o.op_id] == lines
    assert not api.status(url)["unfinished_operations"]
