"""A reduce's pins stay until its commit: the verification's scratch views have a folder of their own.

The views a rewritten run's verification reads through were made in the operation's own folder of
the vault (``tmp/<op>``) and removed with it — pins included. From that verification to the commit,
a purge or compaction in another process sharing the vault saw no pin on the run's backups, the
blobs the swap was about to make the only copy of its originals (a purge of another logdir whose
reduction shares a backup could delete it). The views now live in ``tmp/<op>/views``.
"""
from __future__ import annotations

import os

from conftest import copy_real
from tb_footprint_plugin import api
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.storage import throttle


def test_a_rewriting_reduce_keeps_its_pins_until_its_swap(tmp_path, monkeypatch):
    """The verification's scratch views lived in the operation's own vault folder and were removed
    with it, pins included: from the verification to the commit of a run whose event file is
    rewritten, a purge in another process sharing the vault saw no pin on its backups. Every
    backup is pinned when the first file in place is replaced."""
    logdir = copy_real("tf/summary_mix", tmp_path / "logdir")
    vault = Context(str(logdir)).vault
    at_swap: list = []
    real_replace = throttle.replace

    def replace(src, dst, *a, **kw):
        if not at_swap and str(dst).startswith(str(logdir) + os.sep) and ".tb-footprint" not in str(dst):
            ops = vault.pinned_ops()
            at_swap.append({op: sorted(os.listdir(os.path.join(vault.tmp, op, "pins"))) for op in ops})
        return real_replace(src, dst, *a, **kw)

    real_exchange = throttle.exchange

    def exchange(a, b, *args, **kw):  # an in-place rewrite takes its original's place by an exchange (R28 F3)
        if not at_swap and os.path.basename(str(a)).startswith(".footprint-"):
            ops = vault.pinned_ops()
            at_swap.append({op: sorted(os.listdir(os.path.join(vault.tmp, op, "pins"))) for op in ops})
        return real_exchange(a, b, *args, **kw)

    monkeypatch.setattr(throttle, "replace", replace)
    monkeypatch.setattr(throttle, "exchange", exchange)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    rewritten = [o for o in rep.outcomes if any("tfevents" in f for f in o.created_files)]
    assert rewritten, "the fixture's event file should be rewritten by archive"
    (m,) = [m for m in vault.manifests() if m["op_id"] == rewritten[0].op_id]
    assert at_swap, "no file in place was replaced"
    assert sorted({f["sha256"] for f in m["files"]}) == at_swap[0].get(m["op_id"]), at_swap
