"""What the txn tests watch of the one transaction driver (``engine.txn.run``)."""
from tb_footprint_plugin.engine import faults, txn


def observe_txn(monkeypatch, failpoints=()):
    """Wrap ``txn.run``: ``(seen, log)``, the transactions it runs (class names) and one log of
    each step the driver calls (``record:<step>`` for a record) interleaved with every failpoint
    of ``failpoints`` hit."""
    seen, log = [], []
    real = txn.run

    def spy(t, cancel, report=None):
        seen.append(type(t).__name__)
        for name in txn.STEPS + ("last_look",):
            orig = getattr(t, name)
            setattr(t, name, lambda *a, _o=orig, _n=name: (log.append(_n), _o(*a))[1])
        orig_record = t.record
        t.record = lambda step: (log.append(f"record:{step}"), orig_record(step))[1]
        return real(t, cancel, report)

    monkeypatch.setattr(txn, "run", spy)
    for name in failpoints:
        faults.arm(name, lambda n=name: log.append(n))
    return seen, log
