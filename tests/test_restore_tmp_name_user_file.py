"""Review J7 S3: a restore's temporary name beside the target is its own, never a user's file.

The name carries a random token (journaled by the restore), is made only where nothing stands
(O_EXCL), and only a file this process made is ever removed; recovery of a killed restore removes
exactly the temporary its journal names, not another file that looks like one."""
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


@pytest.mark.parametrize("vault_format", ["compressed", "hardlink"])
def test_a_users_file_at_the_old_temporary_name_survives_a_restore(tmp_path, vault_format):
    """``<dir>/.footprint-restore-<pid>-<sha12>`` was this process's temp name: a user's file
    there was taken for a crashed attempt's leftover and removed (compressed: ``create_new``;
    hardlink: ``copy_new``)."""
    logdir = tmp_path / "logdir"
    path = image_run(logdir / "run")
    original = path.read_bytes()
    _age(logdir)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY,
                            vault_format=vault_format)
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    mine = logdir / "run" / f".footprint-restore-{os.getpid()}-{hashlib.sha256(original).hexdigest()[:12]}"
    mine.write_bytes(USER_BYTES)
    (o,) = api.restore(str(logdir))
    assert o.status == "restored", o.to_dict()
    assert path.read_bytes() == original
    assert mine.read_bytes() == USER_BYTES  # before the fix: gone
    assert sorted(n for n in os.listdir(logdir / "run") if n.startswith(".footprint-restore-")) == [mine.name]


def test_recovery_of_a_killed_restore_removes_only_the_temporary_its_journal_names(tmp_path):
    logdir = tmp_path / "logdir"
    path = image_run(logdir / "run")
    original = path.read_bytes()
    _age(logdir)
    before = user_files(logdir)
    assert api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY).ok
    sha12 = hashlib.sha256(original).hexdigest()[:12]
    lookalikes = [logdir / "run" / f".footprint-restore-{'ab' * 16}-{sha12}",
                  logdir / "run" / f".footprint-restore-4242-{sha12}"]
    for f in lookalikes:
        f.write_bytes(USER_BYTES)
    env = dict(ENV, TB_FOOTPRINT_FAILPOINTS="restore_copied=kill")
    code = "import sys; from tb_footprint_plugin import api; api.restore(sys.argv[1])"
    p = subprocess.run([sys.executable, "-c", code, str(logdir)], env=env, timeout=300)
    assert p.returncode == -signal.SIGKILL
    temps = {n for n in os.listdir(logdir / "run") if n.startswith(".footprint-restore-")}
    left = temps - {f.name for f in lookalikes}
    assert len(left) == 1, temps  # the killed attempt's temporary
    api.recover_logdir(str(logdir))
    assert path.read_bytes() == original
    for f in lookalikes:
        assert f.read_bytes() == USER_BYTES  # before the fix: removed as "leftovers"
    assert not (logdir / "run" / left.pop()).exists()  # the journaled one is gone
    after = user_files(logdir)
    assert {k: v for k, v in after.items() if not k.endswith(tuple(f.name for f in lookalikes))} == before


def test_a_users_file_at_the_old_late_records_temporary_name_survives_a_restore(tmp_path):
    """The late records a writer appended after the reduction go back beside the original
    through a temp file; its name was ``.footprint-restore-late-<pid>-<sha12>``, and a user's file
    there was removed as a leftover (``create_new``)."""
    from test_late_records import append_by_path

    logdir = tmp_path / "logdir"
    path = image_run(logdir / "run")
    original = path.read_bytes()
    _age(logdir)
    assert api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY).ok
    append_by_path(path, 1000, 3)
    mine = logdir / "run" / f".footprint-restore-late-{os.getpid()}-{hashlib.sha256(original).hexdigest()[:12]}"
    mine.write_bytes(USER_BYTES)
    (o,) = api.restore(str(logdir))
    assert o.status == "restored", o.to_dict()
    assert path.read_bytes() == original
    assert (logdir / "run" / (path.name + ".salvaged-001")).is_file()
    assert mine.read_bytes() == USER_BYTES  # before the fix: gone


KILLED_IN_LATE_RECORDS = """
import os, signal, sys
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import salvage
def kill(*a, **k):
    os.kill(os.getpid(), signal.SIGKILL)
salvage.copy_late_records = kill  # the late records' temp file is open, nothing in it yet
api.restore(sys.argv[1])
"""


def test_recovery_of_a_restore_killed_while_putting_late_records_back_removes_its_temp(tmp_path):
    from test_late_records import append_by_path

    logdir = tmp_path / "logdir"
    path = image_run(logdir / "run")
    original = path.read_bytes()
    _age(logdir)
    assert api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY).ok
    append_by_path(path, 1000, 3)
    p = subprocess.run([sys.executable, "-c", KILLED_IN_LATE_RECORDS, str(logdir)], env=ENV, timeout=300)
    assert p.returncode == -signal.SIGKILL
    (left,) = [n for n in os.listdir(logdir / "run") if n.startswith(".footprint-restore-late-")]
    api.recover_logdir(str(logdir))
    assert path.read_bytes() == original
    assert not (logdir / "run" / left).exists()
    assert not [n for n in os.listdir(logdir / "run") if n.startswith(".footprint-restore-")]
