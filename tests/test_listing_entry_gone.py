"""A name that goes between a folder's read and its lstat is not in the listing (the official CI
of e18e932: one of four shard workers started at once refused a run, "[Errno 2] No such file or
directory: '.scan-cache.…'", because its preflight listed the state folder while another worker
renamed its scan cache's temporary into place)."""
import os
import time

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.storage import store_posix
from tb_footprint_plugin.storage.paths import state_dir
from tb_footprint_plugin.storage.store_posix import PosixStore

OLD = time.time() - 86400


def _vanishing(monkeypatch, folder_of_interest, victim_name):
    """``os.scandir`` as the store calls it (on a folder's descriptor), but ``victim_name`` is removed after the folder was
    read and before its entries are looked at: the instant another process renames it away."""
    real = os.scandir

    class Gone:
        def __init__(self, fd):
            self._it = real(fd)
            self._entries = list(self._it)
            if os.path.samestat(os.stat(fd), os.stat(folder_of_interest)):
                for e in self._entries:
                    if e.name == victim_name:
                        os.unlink(os.path.join(folder_of_interest, victim_name))
                        hits.append(victim_name)

        def __enter__(self):
            return iter(self._entries)

        def __exit__(self, *exc):
            self._it.close()

    def scandir(arg=None):
        # the store lists a folder by its descriptor (a walk that follows no link); a path's
        # listing elsewhere (the disk-usage walk) is left as it is
        return Gone(arg) if isinstance(arg, int) else real(arg)

    hits = []
    monkeypatch.setattr(store_posix.os, "scandir", scandir)
    return hits


def test_a_name_gone_before_its_lstat_is_left_out_of_the_listing(tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "d").mkdir(parents=True)
    for n in ("a", ".scan-cache.x1", "b"):
        (root / "d" / n).write_bytes(b"x")
    hits = _vanishing(monkeypatch, str(root / "d"), ".scan-cache.x1")
    keys = [e.key for e in PosixStore(str(root)).list("d", every_key=True)]
    assert hits == [".scan-cache.x1"]  # the name was read, then went
    assert keys == ["d/a", "d/b"]


def test_a_reduce_whose_state_folder_loses_a_temporary_while_listed_reduces_the_run(tmp_path, monkeypatch):
    logdir = tmp_path / "logs"
    run = logdir / "run1"
    run.mkdir(parents=True)
    with synth.EventWriter(str(run), timestamp=1_700_000_000) as w:
        for step in range(20):
            w.scalar("loss", step, 1.0 / (step + 1))
    synth.write_profile_session(str(run), synth.session_name_for(1_700_000_000), "host", n_events=50, seed=1)
    for d, _dirs, files in os.walk(logdir):
        for f in files:
            os.utime(os.path.join(d, f), (OLD, OLD))
    state = state_dir(str(logdir))
    os.mkdir(state, 0o700)  # the state folder exists, as it does once another worker has started
    victim = ".scan-cache.another-worker"
    with open(os.path.join(state, victim), "wb") as f:
        f.write(b"[")
    hits = _vanishing(monkeypatch, state, victim)
    report = api.reduce_logdir(str(logdir), verify_backends=("python",), dry_run=False)
    assert hits == [victim]  # the state folder was listed while the temporary went
    assert [(o.run, o.status, o.code, o.reason) for o in report.outcomes if o.status != Outcome.VERIFIED] == []
    assert report.ok
