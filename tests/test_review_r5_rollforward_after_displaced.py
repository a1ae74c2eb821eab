"""Review R5 F2 (older than this landing): a recovery's rollback appended no 'rollback' record, so
a rollback killed after a put-back that displaced newer bytes (a profiler writing a removed file
again) left a journal the NEXT start rolled forward — the file removed again and its new bytes
only in the vault, named by no manifest. The recovery records its rollback first (as a rollback in
process does), and a journal holding ``displaced`` records is never rolled forward."""
import hashlib

import pytest

from helpers_crash import Killed, kill, killed_after_a_displacing_put_back
from test_vault_remote import make_logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.context import Context

pytestmark = pytest.mark.usefixtures("disarm_faults")

LATE = b"the profiler wrote this profile again after the swap " * 500


def test_a_recovery_rollback_killed_after_displacing_is_rolled_back_again_and_names_them(tmp_path):
    logdir = make_logdir(tmp_path)
    prof = next((logdir / "a").rglob("*.xplane.pb"))
    original = prof.read_bytes()
    late_sha = hashlib.sha256(LATE).hexdigest()
    # 1. killed right after the swap: verified + swap records, no commit
    faults.arm("reduce.swap", kill)
    with pytest.raises(Killed):
        api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    faults.disarm_all()
    assert not prof.exists(), "the archive policy removes the profile at the swap"
    # 2. the profiler writes the file again before the next start
    prof.parent.mkdir(parents=True, exist_ok=True)
    prof.write_bytes(LATE)
    # 3. the next start: roll_forward refuses (changed), rollback displaces LATE, journals it,
    #    puts the original back ... killed
    with killed_after_a_displacing_put_back() as seen:
        api.recover_logdir(str(logdir))
    assert seen and prof.read_bytes() == original
    # 4. the start after
    api.recover_logdir(str(logdir))
    vault = Context(str(logdir)).vault
    named = [m["op_id"] for m in vault.manifests() for d in m.get("displaced", []) if d.get("sha256") == late_sha]
    st = api.status(str(logdir))
    assert prof.read_bytes() == original  # rolled back again, not forward over it
    assert vault.has_blob(late_sha) and named  # before: a nameless blob
    assert not [p for p in st["problems"] if "orphan" in str(p.get("code", ""))], st["problems"]
