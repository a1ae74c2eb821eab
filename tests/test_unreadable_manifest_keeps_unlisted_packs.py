"""Review R24 F1 (HIGH): a disk vault's pack index object lost while a piece of the operation log
(both copies) does not decode. Status says "a manifest may have been on it: every backup of the
vault is kept meanwhile", yet the next reduce's batch end swept the pack no index lists: the gap
rule (``vault_packs.pack_index_gaps``) turned "every blob" (``EveryBlob``) into a set of the digests
it knew, found none missing, and let the merge delete the only copy of run x's originals. Now,
while a manifest may be unreadable, no pack is deleted as a leftover, and the gap is said."""
import glob
import os
import time

import pytest

from tb_footprint_plugin import api, codes, demo
from tb_footprint_plugin.storage.paths import state_dir

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _garble(path):
    b = bytearray(open(path, "rb").read())
    for i in range(20, len(b) - 10, 7):
        b[i] ^= 0x5A
    with open(path, "wb") as f:
        f.write(bytes(b))


def test_no_pack_is_swept_while_an_operation_log_piece_that_may_hold_a_manifest_does_not_read(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tmp_path / "demo"
    demo.generate_demo(str(root), scale=0.05)
    runs = [r["name"] for r in api.scan(str(root)).to_dict()["runs"]]
    x, y, z = "jax_profile", next(r for r in runs if r.startswith("mnist")), "tf_summary_mix"
    assert {x, z} <= set(runs), runs
    sd = state_dir(str(root))
    (o,) = api.reduce_logdir(str(root), runs=[x], policy="archive", dry_run=False, quiet_period=0,
                             verify_backends=("python",)).outcomes
    assert o.status == codes.Outcome.VERIFIED, o.reason
    index = glob.glob(os.path.join(sd, "packs", "index", "*.json"))
    packs = glob.glob(os.path.join(sd, "packs", "data", "*", "*.pack"))
    segments = glob.glob(os.path.join(sd, "oplog", "segments", "*"))
    assert len(index) == 1 and packs and segments, (index, packs, segments)
    (o,) = api.reduce_logdir(str(root), runs=[y], policy="archive", dry_run=False, quiet_period=0,
                             verify_backends=("python",)).outcomes
    assert o.status == codes.Outcome.VERIFIED, o.reason
    # x's operation-log piece garbled in both copies, x's pack index object lost, its pack past the grace
    for seg in segments:
        for folder in ("segments", "twins"):
            p = os.path.join(sd, "oplog", folder, os.path.basename(seg))
            if os.path.exists(p):
                _garble(p)
    os.unlink(index[0])
    old = time.time() - 2 * 3600
    for p in packs:
        os.utime(p, (old, old))
    problems = api.status(str(root))["problems"]
    assert any(p["code"] == "damaged_line" for p in problems), problems

    (o,) = api.reduce_logdir(str(root), runs=[z], policy="archive", dry_run=False, quiet_period=0,
                             verify_backends=("python",)).outcomes
    assert o.status == codes.Outcome.VERIFIED, o.reason
    assert all(os.path.exists(p) for p in packs), "the batch end swept the pack only a lost index object listed"
    problems = api.status(str(root))["problems"]
    assert any("no pack is deleted as a leftover" in str(p.get("detail")) for p in problems), problems
