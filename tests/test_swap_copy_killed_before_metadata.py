"""The reduce's own copy + delete swap killed after a staged file's last byte and before its mode,
mtime and owner (review R19 F1, its P3): on a folder declaring no atomic rename
(``swap.apply_swap`` → ``placement.put_in_place`` → ``placement.copy_over``), a SIGKILL between ``copy_new``'s bytes and
``finish_new_file`` left the reduced file with a new file's mode (0600), the kill's time and
root as owner; the next start rolled the swap forward on matching content and only deleted the
temporary, so the reduced file kept them for good (a user's own run unreadable to them). Now the
swap resumed gives it the staged file's mode, mtime and owner, as an uninterrupted swap does."""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap

from conftest import copy_real
from test_late_records import ENV
from test_put_back_killed_before_metadata import _give_all, snapshot
from test_put_back_strategy import _spy, leftovers
from tb_footprint_plugin import api

CHILD = textwrap.dedent("""
    import dataclasses, os, signal, sys
    from tb_footprint_plugin import api
    from tb_footprint_plugin.engine import placement, swap, transaction
    from tb_footprint_plugin.storage import files
    from tb_footprint_plugin.storage.store_posix import PosixStore

    caps = dataclasses.replace(PosixStore(os.sep).capabilities, rename_atomic=False, hard_link=False)
    for mod in (transaction, swap):
        mod.folder_capabilities = lambda: caps
    logdir, out = sys.argv[1:3]
    state = {"in": []}
    real_over, real_finish = placement.copy_over, files.finish_new_file

    def over(tmp, final, *a, **kw):
        state["in"].append((tmp, final))
        try:
            return real_over(tmp, final, *a, **kw)
        finally:
            state["in"].pop()

    def finish(fo, *a, **kw):
        if state["in"]:
            tmp, final = state["in"][-1]
            with open(out, "w") as f:
                f.write(f"{os.lstat(tmp).st_mtime_ns} {final}")
            os.kill(os.getpid(), signal.SIGKILL)  # every staged byte at the name, nothing else set
        return real_finish(fo, *a, **kw)

    placement.copy_over, files.finish_new_file = over, finish
    # root on a user's logdir takes its runs as an admin does (review R10 F8: another user's run is
    # left alone unless asked)
    api.reduce_logdir(logdir, policy="archive", dry_run=False, verify_backends=("python",), include_others_runs=True)
    sys.exit(3)  # not killed
""")


def test_a_swap_copy_killed_before_its_metadata_is_finished_with_the_staged_files(tmp_path, monkeypatch):
    killed, clean = copy_real("tf", tmp_path / "killed"), copy_real("tf", tmp_path / "clean")
    for d in (killed, clean):
        _give_all(d)
    _spy(monkeypatch)  # the same folder, declaring no rename, for the clean reduce and the next start
    done = [o.status for o in api.reduce_logdir(str(clean), policy="archive", dry_run=False, verify_backends=("python",),
                                                include_others_runs=True).outcomes if o.op_id]
    assert done and all(s == "verified" for s in done), done
    out = tmp_path / "killed_at"
    p = subprocess.run([sys.executable, "-c", CHILD, str(killed), str(out)], env=ENV, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr[-3000:])
    staged_ns, path = out.read_text().split(" ", 1)
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600  # the window: the bytes there, no mode yet
    rel = os.path.relpath(path, killed)
    api.recover_logdir(str(killed))
    assert api.reduce_logdir(str(killed), policy="archive", dry_run=False, verify_backends=("python",),
                             include_others_runs=True).ok
    got, want = snapshot(killed), snapshot(clean)
    assert got[rel][1] == int(staged_ns)  # the staged file's mtime, as the copy gives it
    assert got[rel][:1] + got[rel][2:] == want[rel][:1] + want[rel][2:]  # bytes, mode, owner
    assert {k: v[2:] for k, v in got.items()} == {k: v[2:] for k, v in want.items()}
    assert not leftovers(killed)
    assert not api.unfinished(str(killed))["unfinished_operations"]
