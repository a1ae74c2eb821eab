"""Review R16 F17: on a read-only filesystem the error named a relative path ('.tb-footprint'):
the state folder is made relative to its checked parent (``mkdir(dir_fd=)``, ``storage.private``),
and the system's error carried that relative name. Now it names the absolute path.
"""
from __future__ import annotations

import errno
import os
import subprocess

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.storage import private


def _run(logdir) -> None:
    from tb_footprint_plugin import synth

    with synth.EventWriter(str(logdir / "a")) as w:
        for s in range(20):
            w.scalar("loss", s, 1.0 / (s + 1))
    synth.write_profile_session(str(logdir / "a"), synth.session_name_for(synth.DEFAULT_TIMESTAMP), n_events=200,
                                with_caches=True, seed=1)
    for dirpath, dirnames, filenames in os.walk(logdir):
        for n in filenames + dirnames:
            os.utime(os.path.join(dirpath, n), (1_600_000_000, 1_600_000_000))


def test_a_state_folder_that_cannot_be_made_is_named_by_its_absolute_path(tmp_path, monkeypatch):
    """The refusal as the kernel gives it on a read-only disk (EROFS from ``mkdir(dir_fd=)``)."""
    real_mkdir = os.mkdir

    def read_only(path, mode=0o777, *, dir_fd=None):
        if dir_fd is not None:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        return real_mkdir(path, mode)

    logdir = tmp_path / "logdir"
    logdir.mkdir()
    monkeypatch.setattr(private.os, "mkdir", read_only)
    with pytest.raises(OSError) as got:
        private.ensure_private_dir(str(logdir / ".tb-footprint" / "journal"), str(logdir / ".tb-footprint"))
    assert got.value.errno == errno.EROFS
    assert got.value.filename == str(logdir / ".tb-footprint"), got.value
    assert str(logdir / ".tb-footprint") in str(got.value)


@pytest.fixture
def read_only_logdir(tmp_path):
    """A logdir seen through a read-only bind mount (root only; skipped where mounts are not allowed)."""
    src, ro = tmp_path / "src", tmp_path / "ro"
    src.mkdir()
    ro.mkdir()
    _run(src)
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    made = subprocess.run(["mount", "--bind", str(src), str(ro)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"no bind mount here: {made.stderr.decode(errors='replace').strip()}")
    try:
        if subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], capture_output=True).returncode != 0:
            pytest.skip("the bind mount could not be made read-only")
        yield ro
    finally:
        subprocess.run(["umount", str(ro)], capture_output=True)


def test_reduce_on_a_read_only_logdir_names_the_absolute_path(read_only_logdir):
    rep = api.reduce_logdir(str(read_only_logdir), policy="archive", dry_run=False, quiet_period=0,
                            verify_backends=("python",))
    (o,) = rep.outcomes
    assert o.status == "failed" and not rep.ok, o
    assert str(read_only_logdir / ".tb-footprint") in o.reason, o.reason
    assert "Read-only file system" in o.reason, o.reason
