"""The local engine reaches its logdir through a ``Store`` (issue #26 item 2, r22 task C).

- A ``Context`` holds the logdir's ``PosixStore``, made once and only when asked.
- "The original is already in place" on a folder is ``putback.holds_original`` with no size
  (the store says it, from the file it opened): no link followed, no FIFO opened.
- A restore's release asks it through the logdir's store: a file reached through a folder
  swapped for a link is not taken for the original (before, ``files.matches`` followed the link,
  out of the logdir, and the vault's copy was let go on its word).
- ``interrupted.same_file`` keeps its rule: a folder on the way that is a link is followed only
  while it stays in the logdir (a guard: the same before and after).
"""
import hashlib
import os

from tb_footprint_plugin import api
from tb_footprint_plugin import synth as sp
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.interrupted import same_file
from tb_footprint_plugin.engine import putback
from tb_footprint_plugin.engine.vault import Vault
from tb_footprint_plugin.storage.paths import state_dir
from tb_footprint_plugin.storage.store_posix import PosixStore

DATA = bytes(range(256)) * 40
SHA = hashlib.sha256(DATA).hexdigest()


def test_a_context_makes_the_logdirs_store_once_and_only_when_asked(tmp_path):
    logdir = tmp_path / "logdir"
    ctx = Context(str(logdir))  # no logdir yet: a context that never asks touches nothing
    logdir.mkdir()
    store = ctx.store
    assert isinstance(store, PosixStore) and store.root == ctx.logdir
    assert ctx.store is store
    assert ctx.key("run/./a") == "run/a"


def test_the_original_in_place_on_a_folder_is_asked_through_the_store(tmp_path):
    root, outside = tmp_path / "logdir", tmp_path / "outside"
    (root / "run").mkdir(parents=True)
    outside.mkdir()
    (root / "run" / "f").write_bytes(DATA)
    (outside / "f").write_bytes(DATA)
    os.symlink(outside, root / "linked")
    os.symlink(root / "run" / "f", root / "run" / "lnk")
    os.mkfifo(root / "run" / "fifo")
    (root / "run" / "grown").write_bytes(DATA + b"more")
    (root / "run" / "short").write_bytes(DATA[:-1])
    store, f = PosixStore(str(root)), {"size": len(DATA), "sha256": SHA}
    holds_original, begins_with = putback.holds_original, getattr(putback, "begins_with", None)
    assert holds_original(store, "run/f", f)
    assert not holds_original(store, "linked/f", f)  # the same bytes, through a link: not in place
    assert not holds_original(store, "run/lnk", f)
    assert not holds_original(store, "run/fifo", f)
    assert not holds_original(store, "run/absent", f)
    assert not holds_original(store, "run", f)
    assert not holds_original(store, "run/grown", f)
    assert not holds_original(store, "run/short", f)
    assert not holds_original(store, "run/f", {"size": len(DATA), "sha256": "0" * 64})
    assert begins_with(store, "run/grown", len(DATA), SHA)
    assert not begins_with(store, "run/short", len(DATA), SHA)


DROP_PROFILES = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


def test_a_restore_lets_no_backup_go_on_the_word_of_a_file_reached_through_a_link(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = str(tmp_path / "logdir")
    with sp.EventWriter(os.path.join(root, "r0")) as w:
        for step in range(5):
            w.scalar("loss", step, 1.0 / (step + 1))
    session = os.path.join(root, "r0", "plugins", "profile", "2026_01_01_00_00_00")
    os.makedirs(session)
    sp.write_xplane(os.path.join(session, "host.xplane.pb"), 30, seed=1)
    with open(os.path.join(session, "host.xplane.pb"), "rb") as fh:
        sha = hashlib.sha256(fh.read()).hexdigest()
    sp.age(root)
    rep = api.reduce_logdir(root, policy=DROP_PROFILES, dry_run=False, vault_format="hardlink")
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED]
    moved = str(tmp_path / "elsewhere")

    def swap_for_a_link():  # once the originals are back and checked, before the release
        os.rename(os.path.join(root, "r0", "plugins"), moved)
        os.symlink(moved, os.path.join(root, "r0", "plugins"))

    faults.arm("restore.check", swap_for_a_link)
    try:
        outs = api.restore(root, run="r0")
    finally:
        faults.disarm_all()
    assert [o.status for o in outs] == [Outcome.RESTORED]
    # the file in the run's place is outside the logdir now: its backup is kept
    assert Vault(state_dir(root)).has_blob(sha)


def test_an_interrupted_reduces_file_is_followed_only_within_the_logdir(tmp_path):
    """A guard (the same before and after): ``same_file``'s rule, now over the logdir's store."""
    root, outside = tmp_path / "logdir", tmp_path / "outside"
    (root / "run").mkdir(parents=True)
    outside.mkdir()
    (root / "run" / "f").write_bytes(DATA)
    (outside / "f").write_bytes(DATA)
    os.symlink(root / "run", root / "inside")
    os.symlink(outside, root / "out")
    os.symlink(root / "run" / "f", root / "run" / "lnk")
    rec = {"size": len(DATA), "sha256": SHA}
    assert same_file(str(root), {**rec, "path": "run/f"})
    assert same_file(str(root), {**rec, "path": "inside/f"})  # a link that stays in the logdir
    assert not same_file(str(root), {**rec, "path": "out/f"})  # one that leads out of it
    assert not same_file(str(root), {**rec, "path": "run/lnk"})  # the file itself a link
    assert not same_file(str(root), {**rec, "path": "../outside/f"})
    assert not same_file(str(root), {**rec, "path": "run/f", "size": len(DATA) + 1})
