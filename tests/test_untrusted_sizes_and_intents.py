"""Review R4 F1 and F3: two pieces of untrusted state that raised out of a verb after this
session's moves, where they were values before.

- F1: a journal record whose ``size`` is no count of bytes (``5.0``, ``"5"``, None, -1) is not
  the file at its path (``putback.holds_original``, asked by ``interrupted.same_file``): it
  raised TypeError out of ``interrupted_state`` and so out of ``status``, ``scan``, ``plan``.
- F3: a purge intent in a vault's op log whose ``run`` is no name is one failed outcome of the
  start (``Finding.RECOVERY_FAILED``), never an exception out of every start."""
import hashlib
import os
import time

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Finding
from tb_footprint_plugin.engine import oplog
from tb_footprint_plugin.engine.interrupted import same_file
from tb_footprint_plugin.engine.putback import holds_original
from tb_footprint_plugin.storage.stores import open_store

OLD = time.time() - 7 * 86400
DROP = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


def test_a_record_whose_size_is_no_count_is_not_the_file(tmp_path):
    (tmp_path / "a").write_bytes(b"hello")
    sha = hashlib.sha256(b"hello").hexdigest()
    assert same_file(str(tmp_path), {"path": "a", "sha256": sha, "size": 5}) is True
    store = open_store(str(tmp_path))
    for size in (5.0, "5", None, -1, True):
        assert same_file(str(tmp_path), {"path": "a", "sha256": sha, "size": size}) is False
        assert holds_original(store, "a", {"path": "a", "sha256": sha, "size": size}) is False
        assert holds_original(store, "a", {"path": "a", "sha256": sha, "size": size}, 5) is False


def test_a_purge_intent_whose_run_is_no_name_fails_only_itself(tmp_path):
    logdir = tmp_path / "logs"
    run = logdir / "a"
    with synth.EventWriter(str(run)) as w:
        for step in range(5):
            w.scalar("loss", step, 1.0 / (step + 1))
    session = run / "plugins" / "profile" / "2026_01_01_00_00_00"
    session.mkdir(parents=True)
    (session / "host.xplane.pb").write_bytes(os.urandom(3000))
    for d, dirs, files in os.walk(run):
        for n in files + dirs:
            os.utime(os.path.join(d, n), (OLD, OLD))
    rep = api.reduce_logdir(str(logdir), policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
    (m,) = [m for m in api.operations(str(logdir)) if m["kind"] == "reduce"]
    oplog.append(m["vault"], m["op_id"], {"type": "purge", "run": 5, "blobs": []})
    outs = api.recover_logdir(str(logdir))  # raised AttributeError out of the start
    failed = [o for o in outs if o.code == Finding.RECOVERY_FAILED]
    assert failed, [vars(o) for o in outs]
    # the start went on: its backup is still restorable
    back = api.restore(str(logdir), run="a")
    assert [o.status for o in back] == ["restored"], [o.to_dict() for o in back]
