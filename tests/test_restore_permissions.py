"""Review R16 F8: a restore this user cannot do is refused before the first file moves, as
reduce refuses ("directory not writable (permission denied)", ``refused``), naming the path;
and a permission error after the start is said as one (``permission_denied``, what to do), not
as an interruption "finished on the next start".

Permission checks need a non-root user: each step runs in a forked child that dropped to
``nobody`` (``test_scan.as_unprivileged``), over a logdir, state and vault owned by it. The
modules are loaded first by a cycle as root (the child cannot read the root-only venv)."""
import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, StoreError
from tb_footprint_plugin.engine import restore as restore_mod
from test_late_records import PY, image_run
from test_scan import as_unprivileged

pytestmark = pytest.mark.usefixtures("disarm_faults")
NOBODY = 65534


def VAULT(logdir):
    return str(logdir.parent / "vault")


def _state(path):
    st = path.stat()
    return hashlib.sha256(path.read_bytes()).hexdigest(), st.st_mtime_ns, stat.S_IMODE(st.st_mode)


@pytest.fixture
def reduced(tmp_path):
    """(logdir, run folder, event file, its original state) reduced by ``nobody``."""
    if os.geteuid() != 0:
        pytest.skip("needs root to act as another user")
    warm = tmp_path / "warm"  # every module the child needs, loaded as root
    image_run(warm / "run")
    assert api.reduce_logdir(str(warm), policy="archive", dry_run=False, verify_backends=PY).ok
    assert api.restore(str(warm))[0].status == "restored"
    api.status(str(warm))
    root = Path(tempfile.mkdtemp(prefix="tbfp-perm-", dir="/tmp"))
    os.chmod(root, 0o755)
    logdir = root / "logdir"
    run = logdir / "run"
    path = image_run(run)
    for d, _, fs in os.walk(root):
        for n in [d] + [os.path.join(d, f) for f in fs]:
            os.chown(n, NOBODY, NOBODY)
    was = _state(path)
    # reduced as root (its verification's servers are not started from a forked child), then
    # the state and vault given to nobody: the run, its backup and its records are nobody's
    rep = api.reduce_logdir(str(logdir), str(root / "vault"), policy="archive", dry_run=False, verify_backends=PY,
                            include_others_runs=True)
    assert rep.ok and rep.outcomes[0].status == "verified", [o.to_dict() for o in rep.outcomes]
    for d, ds, fs in os.walk(root):
        for n in [d] + [os.path.join(d, f) for f in fs + ds]:
            os.lchown(n, NOBODY, NOBODY)
    assert _state(path) != was
    yield logdir, run, path, was
    shutil.rmtree(root, ignore_errors=True)


def _as_nobody(root, fn):
    def go():
        os.environ["HOME"] = os.environ["XDG_CACHE_HOME"] = str(root)
        fn()
    as_unprivileged(go)


@pytest.mark.parametrize("how", ["read-only run folder", "unreadable event file"])
def test_a_restore_this_user_cannot_do_is_refused_before_anything_moves(reduced, how):
    logdir, run, path, was = reduced
    target = run if how == "read-only run folder" else path
    mode = stat.S_IMODE(target.stat().st_mode)
    reduced_state = _state(path)
    listing = sorted(os.listdir(run))

    def refused():
        os.chmod(target, 0o555 if target == run else 0)
        (o,) = api.restore(str(logdir), backup_dir=VAULT(logdir))
        assert o.status == "failed" and o.code == Failure.REFUSED, o.to_dict()
        want = "run: directory not writable (permission denied)" if target == run else \
            f"run/{path.name}: not readable (permission denied)"
        assert want in o.reason and "nothing was changed" in o.reason, o.reason
        assert api.recover_logdir(str(logdir), backup_dir=VAULT(logdir)) == []  # nothing unfinished was left
        os.chmod(target, mode)
        assert sorted(os.listdir(run)) == listing and _state(path) == reduced_state
        (o,) = api.restore(str(logdir), backup_dir=VAULT(logdir))  # once the mode is fixed: restored
        assert o.status == "restored", o.to_dict()

    _as_nobody(logdir.parent, refused)
    assert _state(path) == was and sorted(os.listdir(run)) == [path.name]


def test_a_permission_error_after_the_start_is_not_an_interruption(reduced, monkeypatch):
    """A folder made read-only between the check and the put-back (here: no check): the code
    says permission, the reason what to do; ``recover`` finishes it once the mode is fixed."""
    logdir, run, path, was = reduced
    monkeypatch.setattr(restore_mod, "access_refusal", lambda *a: None)

    def stopped():
        os.chmod(run, 0o555)
        (o,) = api.restore(str(logdir), backup_dir=VAULT(logdir))
        assert o.status == "failed" and o.code == StoreError.PERMISSION, o.to_dict()
        assert "interrupted" not in o.reason and "finished on the next start" not in o.reason
        assert "Permission denied" in o.reason and "tb-footprint recover" in o.reason, o.reason
        # a start meanwhile leaves it, saying why and what to do (not a bare errno)
        (r,) = api.recover_logdir(str(logdir), backup_dir=VAULT(logdir))
        assert r.action == "failed" and "this user may not change it" in r.detail, vars(r)
        os.chmod(run, 0o755)
        assert [r.action for r in api.recover_logdir(str(logdir), backup_dir=VAULT(logdir))] == ["completed"]

    _as_nobody(logdir.parent, stopped)
    assert _state(path) == was


def test_bringing_back_a_retired_run_into_a_read_only_folder_is_refused_before_anything_moves(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to act as another user")
    root = Path(tempfile.mkdtemp(prefix="tbfp-perm-", dir="/tmp"))
    try:
        os.chmod(root, 0o755)
        logdir = root / "logdir"
        path = image_run(logdir / "grp" / "train")
        was = _state(path)
        rule = api.retire_rule(runs=["grp/train"])
        rep = api.retire(str(logdir), rule, dry_run=False, backup_dir=VAULT(logdir), quiet_period=60)
        assert [o.status for o in rep.outcomes] == ["verified"], [o.to_dict() for o in rep.outcomes]
        for d, ds, fs in os.walk(root):
            for n in [d] + [os.path.join(d, f) for f in fs + ds]:
                os.lchown(n, NOBODY, NOBODY)
        grp = logdir / "grp"
        listing = sorted(os.listdir(grp))

        def refused():
            os.chmod(grp, 0o555)
            (o,) = api.restore(str(logdir), run="grp/train", backup_dir=VAULT(logdir))
            assert o.status == "failed" and o.code == Failure.REFUSED, o.to_dict()
            assert "grp: directory not writable (permission denied); nothing was changed" in o.reason, o.reason
            assert api.recover_logdir(str(logdir), backup_dir=VAULT(logdir)) == []
            assert sorted(os.listdir(grp)) == listing
            os.chmod(grp, 0o755)
            (o,) = api.restore(str(logdir), run="grp/train", backup_dir=VAULT(logdir))
            assert o.status == "restored", o.to_dict()

        _as_nobody(root, refused)
        assert _state(path) == was
    finally:
        shutil.rmtree(root, ignore_errors=True)
