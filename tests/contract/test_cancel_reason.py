"""A reduction its own batch's cancel (Ctrl-C, SIGTERM, the tab's Cancel) rolled back is said in one
reason on every store (``recovery_rules.CANCELLED_REASON``, code ``interrupted``): in its outcome
and in its change-log line. A bucket's said ``Cancelled``'s own words ("cancelled before the commit
point") where a disk's said the recovery rule's; the user's files are as they were."""
import pytest

from contract_stores import KINDS, buckets  # noqa: F401 - the bucket fixture
from test_recovery_rules import place  # noqa: F401 - the fixture: a fresh logdir on each store
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.context import CancelToken
from tb_footprint_plugin.engine.recovery_rules import CANCELLED_REASON

pytestmark = pytest.mark.usefixtures("disarm_faults")


@pytest.mark.parametrize("kind", KINDS)
def test_a_cancelled_reduction_says_the_one_reason(kind, place):
    url, files = place(kind)
    before = files()
    token = CancelToken()
    faults.arm("reduce.backup", token.cancel)  # the cancel comes while its backups are made
    rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0,
                            verify_backends=("python",), cancel=token)
    faults.disarm_all()
    (o,) = rep.outcomes
    assert (o.status, o.code, o.reason) == (Outcome.ROLLED_BACK, Failure.INTERRUPTED, CANCELLED_REASON), o.to_dict()
    lines = [e for e in api.history(url) if e.get("op_id") == o.op_id]
    assert [(e.get("code"), e.get("reason")) for e in lines] == [(Failure.INTERRUPTED, CANCELLED_REASON)], lines
    assert files() == before
