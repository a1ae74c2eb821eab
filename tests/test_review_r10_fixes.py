"""Review R10's findings on this session's engine changes, each reproduced and fixed.

- F1 (defence): a plain blob that is a second name of a live file, which no transaction under way
  pins (an older version's leftover, a power cut's), is never adopted as it stands as another
  reduction's backup: it becomes a copy of its own first, so an in-place write to that live file
  cannot change the backup. (The transaction's own side, every backup record durable before the
  first link, is in test_reduce_syncs_before_swap.)
- F2: a verification killed midway leaves no scratch views behind once the next start rolled the
  run back (they moved to ``tmp/<op>/views``, which the rollback's clean-up did not look in).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import REPO, copy_real
from test_batch_compaction import DROP
from test_small_packs import small_runs, tree
from tb_footprint_plugin import api
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.storage.files import sha256_file


def test_a_blob_that_is_a_live_files_second_name_is_copied_before_it_is_adopted(tmp_path):
    logdir = small_runs(tmp_path / "logs", runs=2, files=1)
    (live,) = (logdir / "run00").rglob("*.xplane.pb")
    (twin,) = (logdir / "run01").rglob("*.xplane.pb")
    twin.write_bytes(live.read_bytes())  # the same bytes in the run the reduce takes
    os.utime(twin, (1_700_000_000, 1_700_000_000))
    before = tree(logdir)
    vault = Context(str(logdir)).vault
    vault.ensure()
    sha = sha256_file(str(live))
    blob = vault.blob_path(sha)
    os.makedirs(os.path.dirname(blob), mode=0o700, exist_ok=True)
    os.link(live, blob)  # an orphan: a second name of run00's live file, no record, no pin
    rep = api.reduce_logdir(str(logdir), policy=DROP, dry_run=False, quiet_period=0, verify_backends=("python",),
                            vault_format="hardlink", runs=["run01"])
    assert [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]
    assert os.stat(blob).st_ino != os.stat(live).st_ino  # its own bytes now
    with open(live, "r+b") as f:  # the user's tool writes into run00's file in place
        f.write(b"\x00" * 8)
    outs = api.restore(str(logdir))
    assert outs and all(o.status == "restored" for o in outs), [o.to_dict() for o in outs]
    rel = twin.relative_to(logdir).as_posix()
    assert tree(logdir)[rel] == before[rel]  # run01's file back byte for byte, whatever run00's became


_KILLED_IN_VERIFICATION = """
import os, signal, sys
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import checks
checks.verify_reduction = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
api.reduce_logdir(sys.argv[1], policy="archive", dry_run=False, verify_backends=("python",))
print("NOT KILLED")
"""


def test_a_verification_killed_midway_leaves_no_views_after_the_next_start(tmp_path):
    logdir = copy_real("tf/summary_mix", tmp_path / "logdir")
    before = tree(logdir)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _KILLED_IN_VERIFICATION, str(logdir)], env=env, timeout=300,
                       capture_output=True, text=True)
    assert p.returncode == -9, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    ctx = Context(str(logdir))
    (journal,) = [n for n in os.listdir(ctx.journal_dir) if n.endswith(".jsonl")]
    op = journal[: -len(".jsonl")]
    assert os.path.isdir(os.path.join(ctx.vault.tmp, op, "views"))  # what the kill left
    api.recover_logdir(str(logdir))
    assert not os.path.lexists(os.path.join(ctx.vault.tmp, op)), sorted(os.listdir(os.path.join(ctx.vault.tmp, op)))
    assert tree(logdir) == before
