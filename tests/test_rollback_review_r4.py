"""Review R4 of this landing's rollback changes (reproduced, then fixed):

F1 — a rollback killed just after a put-back that found newer bytes in an original's place (a
profiler writing a file again after the swap) had stored them in the vault and put the original
over them, but named them only in the manifest it writes at its end: the next start's rollback
found the original in place and wrote a manifest without them — the bytes were kept as a nameless
blob ("orphan"), with no file, run or way back. They are now journaled (``displaced``) before the
original takes the path, and the recovery's manifest names them.

F2 — a put-back's temporary name comes from a token journaled in the begin record (d4d948f); an
entry that is not a regular file at that name (a dangling link, a folder) made every put-back under
it fail, so the run stayed reduced-and-unverified with its recovery failing at every start."""
import hashlib
import os
import signal
import subprocess
import sys

import pytest

from helpers_crash import killed_after_a_displacing_put_back
from test_livewriters import ENV, _age, image_run
from test_vault_remote import make_logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.context import Context

pytestmark = pytest.mark.usefixtures("disarm_faults")

LATE = b"the profiler wrote this profile again after the swap " * 500


@pytest.mark.parametrize("vault_format", ["compressed", "hardlink"])
def test_a_rollback_killed_after_displacing_newer_bytes_still_names_them(tmp_path, vault_format):
    logdir = make_logdir(tmp_path)
    prof = next((logdir / "a").rglob("*.xplane.pb"))
    late_sha = hashlib.sha256(LATE).hexdigest()

    def late_writer_then_fail():
        prof.parent.mkdir(parents=True, exist_ok=True)
        prof.write_bytes(LATE)
        raise RuntimeError("verification failed after the swap (simulated)")

    faults.arm("reduce.swap", late_writer_then_fail)
    with killed_after_a_displacing_put_back() as seen:
        api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",),
                          vault_format=vault_format)
    faults.disarm_all()
    assert seen and prof.read_bytes() != LATE  # the original took the path: the late bytes only in the vault
    api.recover_logdir(str(logdir))
    vault = Context(str(logdir)).vault
    assert vault.has_blob(late_sha)
    named = [m["op_id"] for m in vault.manifests() for d in m.get("displaced", []) if d.get("sha256") == late_sha]
    assert named  # before: a nameless blob
    st = api.status(str(logdir))
    assert not [p for p in st["problems"] if "orphan" in str(p.get("code", ""))], st["problems"]


@pytest.mark.parametrize("planted", ["dangling link", "folder"])
def test_an_entry_planted_at_the_journaled_temporary_name_does_not_block_the_rollback(tmp_path, planted):
    logdir = tmp_path / "logdir"
    path = image_run(logdir / "run")
    original = path.read_bytes()
    _age(logdir)
    env = dict(ENV, TB_FOOTPRINT_FAILPOINTS="reduce.swap=raise,restore_copied=kill")
    code = ("import sys; from tb_footprint_plugin import api; "
            "api.reduce_logdir(sys.argv[1], policy='archive', dry_run=False, verify_backends=('python',))")
    p = subprocess.run([sys.executable, "-c", code, str(logdir)], env=env, timeout=300)
    assert p.returncode == -signal.SIGKILL
    (name,) = [n for n in os.listdir(logdir / "run") if n.startswith(".footprint-restore-")]
    t = logdir / "run" / name
    os.unlink(t)
    if planted == "folder":
        t.mkdir()
    else:
        os.symlink("/nonexistent-target-of-a-planted-link", t)
    api.recover_logdir(str(logdir))
    assert path.read_bytes() == original  # before: EEXIST at every start, the original only in the vault
    assert not os.path.lexists("/nonexistent-target-of-a-planted-link")
