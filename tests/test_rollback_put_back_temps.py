"""Review R3 F3: a rollback killed while putting an original back left its full temporary copy
(``.footprint-restore-<token>-<sha12>``) in the run for good — its put-backs had no journaled
token, and the recovery's rollback put the file back under a new random name. The reduce's begin
record now carries the token; the recovery removes exactly the temporaries it names."""
import hashlib
import os
import signal
import subprocess
import sys

import pytest

from conftest import user_files
from test_livewriters import ENV, PY, _age, image_run
from tb_footprint_plugin import api

pytestmark = pytest.mark.usefixtures("disarm_faults")

USER_BYTES = b"the user's own notes, not a temp file of the tool"


def _temps(run_dir) -> set:
    return {n for n in os.listdir(run_dir) if n.startswith(".footprint-restore-")}


@pytest.mark.parametrize("vault_format", ["compressed", "hardlink"])
def test_a_rollback_killed_while_putting_back_leaves_no_temporary(tmp_path, vault_format):
    logdir = tmp_path / "logdir"
    path = image_run(logdir / "run")
    original = path.read_bytes()
    sha12 = hashlib.sha256(original).hexdigest()[:12]
    # a user's file that merely looks like a leftover: never touched
    lookalike = logdir / "run" / f".footprint-restore-{'cd' * 16}-{sha12}"
    lookalike.write_bytes(USER_BYTES)
    _age(logdir)  # the run is quiet (a file written just now would keep the reduce away)
    before = user_files(logdir)
    # the reduce fails after its swap (so the rollback puts the original back) and is killed
    # inside that put-back, its temporary copy made and not yet renamed
    env = dict(ENV, TB_FOOTPRINT_FAILPOINTS="reduce.swap=raise,restore_copied=kill")
    code = ("import sys; from tb_footprint_plugin import api; "
            "api.reduce_logdir(sys.argv[1], policy='archive', dry_run=False, verify_backends=('python',), "
            "vault_format=sys.argv[2])")
    p = subprocess.run([sys.executable, "-c", code, str(logdir), vault_format], env=env, timeout=300)
    assert p.returncode == -signal.SIGKILL
    left = _temps(logdir / "run") - {lookalike.name}
    assert len(left) == 1, left  # the killed put-back's temporary
    assert not path.exists() or path.read_bytes() != original  # killed before the rename
    api.recover_logdir(str(logdir))
    assert path.read_bytes() == original
    assert _temps(logdir / "run") == {lookalike.name}  # before the fix: the old temporary stayed
    assert lookalike.read_bytes() == USER_BYTES
    assert user_files(logdir) == before  # the original back, the lookalike as it was, nothing else
    # and the rolled-back run reduces cleanly afterwards
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY,
                            vault_format=vault_format)
    assert rep.ok, [o.to_dict() for o in rep.outcomes]


def test_a_forged_token_names_no_file(tmp_path):
    """The token comes from a journal (untrusted): one not of the shape this code writes is
    ignored, so it can never steer a removal."""
    from tb_footprint_plugin.engine.swap import put_back_token

    assert put_back_token({"tmp_token": "../../etc"}) is None
    assert put_back_token({"tmp_token": "ab" * 16 + "/x"}) is None
    assert put_back_token({"tmp_token": 7}) is None
    assert put_back_token({}) is None
    assert put_back_token({"tmp_token": "ab" * 16}) == "ab" * 16


def test_a_rollbacks_temporary_left_in_a_team_folder_is_named(tmp_path):
    """The same kill in a run folder others may write (review R28 F2's rule): the recovery cannot tell the
    killed put-back's temporary for its own there (a teammate could have moved a file of the user's to its
    predictable name), so it leaves it; its rollback's manifest names it (before: left unnamed)."""
    logdir = tmp_path / "logdir"
    path = image_run(logdir / "run")
    original = path.read_bytes()
    _age(logdir)
    os.chmod(logdir / "run", 0o777)
    env = dict(ENV, TB_FOOTPRINT_FAILPOINTS="reduce.swap=raise,restore_copied=kill")
    code = ("import sys; from tb_footprint_plugin import api; "
            "api.reduce_logdir(sys.argv[1], policy='archive', dry_run=False, verify_backends=('python',))")
    p = subprocess.run([sys.executable, "-c", code, str(logdir)], env=env, timeout=300)
    assert p.returncode == -signal.SIGKILL
    (left,) = _temps(logdir / "run")
    api.recover_logdir(str(logdir))
    assert path.read_bytes() == original
    assert _temps(logdir / "run") == {left}
    (m,) = [m for m in api.operations(str(logdir)) if m["kind"] == "reduce"]
    assert m["outcome"] == "rolled_back" and os.path.join("run", left) in m["reason"], m
