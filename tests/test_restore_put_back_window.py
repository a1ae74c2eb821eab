"""A restore puts an original back without losing what a writer makes at its path meanwhile
(invariant 1; ``swap.put_back``). Two windows, each opened by a hook at the instant between the
put-back's look and its place (``restore_copied``: the original's verified temporary is made,
not yet in its place), not by timing:

- the path was free at the look (the reduce removed the file): a file a writer makes there
  before the place was replaced by the original (a rename over it, or a copy after an unlink)
  and lost, never in the vault. Now the original takes the path create-only; the writer's file
  is looked at again and kept in the vault as displaced, listed by the restore;
- a file stood there (neither the original nor the reduced file): it was stored in the vault,
  then replaced; records a writer appended in between (reopening by name, appending, closing)
  were lost where the vault keeps a copy (a hard link's inode kept them, under the older
  content's name). Now the place happens only while the file is still what was stored; else
  its newer content is stored in its turn and listed.

On a folder that renames (its vault linking or copying) and on one that copies (a folder declaring
no atomic rename, ``folder_capabilities`` monkeypatched as ``test_put_back_strategy.py`` does)."""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
from pathlib import Path

import pytest

from test_vault_remote import make_logdir
from tb_footprint_plugin import api
from tb_footprint_plugin.engine import faults, swap, transaction
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.storage.store_posix import PosixStore

pytestmark = pytest.mark.usefixtures("disarm_faults")

FOLDER = PosixStore(os.sep).capabilities
CAPS = {
    "renames-linking-vault": FOLDER,
    "renames-copying-vault": dataclasses.replace(FOLDER, hard_link=False),
    "copies": dataclasses.replace(FOLDER, rename_atomic=False, hard_link=False),
}

WRITER = b"a writer's profile, written again while the run came back\n" * 50
APPENDED = b"records the writer appended after the put-back stored the file\n" * 50


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _reduced(tmp_path, monkeypatch, caps):
    """A logdir whose profiles the archive policy removed; (logdir, run a's profile path, its
    original bytes, the reduce's op id); the folder declares ``caps`` from the restore on."""
    logdir = make_logdir(tmp_path)
    prof = next((logdir / "a").rglob("*.xplane.pb"))
    original = prof.read_bytes()
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    op = next(o.op_id for o in rep.outcomes if o.run == "a" and o.op_id)
    assert not prof.exists(), "the archive policy removes the profile"
    for mod in (transaction, swap):
        monkeypatch.setattr(mod, "folder_capabilities", lambda: caps)
    return logdir, prof, original, op


def _listed_displaced(logdir: Path, sha: str) -> bool:
    """Whether the vault keeps ``sha`` and a manifest (a restore's, a rollback's) lists it as displaced."""
    vault = Context(str(logdir)).vault
    named = [d for m in vault.manifests() for d in m.get("displaced", [])
             if d.get("sha256") == sha]
    return bool(named) and vault.has_blob(sha) and vault.check_blob(sha)


@pytest.mark.parametrize("caps", list(CAPS.values()), ids=list(CAPS))
def test_a_file_made_at_a_free_path_before_the_place_is_kept(tmp_path, monkeypatch, caps):
    logdir, prof, original, op = _reduced(tmp_path, monkeypatch, caps)
    made = []

    def writer():
        if not made and not prof.exists():
            made.append(prof)
            prof.write_bytes(WRITER)  # after the look found the path free, before the place

    faults.arm("restore_copied", writer)
    outs = api.restore(str(logdir), op=op)
    faults.disarm_all()
    assert made, "the put-back never reached its place"
    assert prof.read_bytes() == original, [o.to_dict() for o in outs]
    assert _listed_displaced(logdir, _sha(WRITER)), "the writer's file is nowhere: replaced by the original"


@pytest.mark.parametrize("caps", list(CAPS.values()), ids=list(CAPS))
def test_records_appended_between_the_store_and_the_place_are_kept(tmp_path, monkeypatch, caps):
    logdir, prof, original, op = _reduced(tmp_path, monkeypatch, caps)
    prof.parent.mkdir(parents=True, exist_ok=True)
    prof.write_bytes(WRITER)  # the profiler wrote the file again after the reduce
    appended = []

    def writer():
        if not appended:
            appended.append(prof)
            with open(prof, "ab") as f:  # reopened by name, appended, closed: between two flushes
                f.write(APPENDED)

    faults.arm("restore_copied", writer)
    outs = api.restore(str(logdir), op=op)
    faults.disarm_all()
    assert appended, "the put-back never reached its place"
    assert prof.read_bytes() == original, [o.to_dict() for o in outs]
    assert _listed_displaced(logdir, _sha(WRITER + APPENDED)), "the appended records were lost"


def test_a_writer_at_every_look_is_refused_and_nothing_is_lost(tmp_path, monkeypatch):
    """A path taken again before each place: the put-back gives up after ``PUT_BACK_LOOKS`` looks,
    leaves the writer's last file in place and each earlier one in the vault; the restore stops
    half way naming the writer as the cause (``open_for_writing``; it said ``interrupted``, review
    R5 F5) and is finished by the next start (the writer gone), the last one displaced in its turn."""
    logdir, prof, original, op = _reduced(tmp_path, monkeypatch, CAPS["renames-copying-vault"])
    written = []

    def writer():
        data = b"write %d\n" % len(written) * 100
        written.append(data)
        with contextlib.suppress(FileNotFoundError):
            prof.unlink()
        prof.write_bytes(data)

    faults.arm("restore_copied", writer)
    outs = api.restore(str(logdir), op=op)
    faults.disarm_all()
    assert [(o.status, o.code) for o in outs] == [("failed", "open_for_writing")], [o.to_dict() for o in outs]
    assert "once the writer has stopped" in outs[0].reason, outs[0].reason
    assert len(written) == swap.PUT_BACK_LOOKS
    assert prof.read_bytes() == written[-1]  # the last one, left as it is
    vault = Context(str(logdir)).vault
    assert all(vault.check_blob(_sha(d)) for d in written[:-1])  # every other one kept
    api.recover_logdir(str(logdir))
    assert prof.read_bytes() == original
    assert all(_listed_displaced(logdir, _sha(d)) for d in written)


def test_late_records_appended_between_the_store_and_the_place_go_back_once(tmp_path, monkeypatch):
    """An event file: a resumed job's records appended to the reduced file, and more appended by
    path while the restore puts its original back: every one of them goes back into the run beside
    the original, each once (what an earlier look set beside it is not set there again)."""
    from test_late_records import append_by_path, image_run, scalar_steps

    run = tmp_path / "logdir" / "run"
    path = image_run(run)
    original = path.read_bytes()
    rep = api.reduce_logdir(str(tmp_path / "logdir"), policy="archive", dry_run=False, verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == ["verified"], rep.to_dict()
    append_by_path(path, 1000)  # the resumed job's records land in the reduced file
    appended = []

    def writer():
        if not appended:
            appended.append(path)
            append_by_path(path, 2000)  # and more, while the original is being put back

    faults.arm("restore_copied", writer)
    (o,) = api.restore(str(tmp_path / "logdir"))
    faults.disarm_all()
    assert appended and o.status == "restored", o.to_dict()
    assert path.read_bytes() == original
    steps = scalar_steps(run)
    assert steps["late"] == [1000, 1001, 1002, 2000, 2001, 2002] and steps["loss"] == list(range(30))


def test_a_file_made_at_a_free_path_is_kept_when_the_backup_comes_from_a_remote_vault(tmp_path, s3_bucket):
    """The same window where the original is streamed from an offloaded vault (moto S3), whose
    check keeps a verified temporary for its put-back (``restore_staged``)."""
    from test_vault_remote import offload_all
    from tb_footprint_plugin.engine import remote_vault

    logdir = make_logdir(tmp_path)
    prof = next((logdir / "a").rglob("*.xplane.pb"))
    original = prof.read_bytes()
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    op = next(o.op_id for o in rep.outcomes if o.run == "a" and o.op_id)
    offload_all(logdir, s3_bucket.url("v"))
    remote_vault._stores.clear()
    made = []

    def writer():
        if not made and not prof.exists():
            made.append(prof)
            prof.write_bytes(WRITER)  # after the look found the path free, before the place

    faults.arm("restore_copied", writer)
    outs = api.restore(str(logdir), op=op)
    faults.disarm_all()
    assert made, "the put-back never looked at the path"
    assert prof.read_bytes() == original, [o.to_dict() for o in outs]
    assert _listed_displaced(logdir, _sha(WRITER)), "the writer's file is nowhere: replaced by the original"


@pytest.mark.parametrize("caps", list(CAPS.values()), ids=list(CAPS))
def test_a_rollback_keeps_a_file_made_at_a_free_path_before_the_place(tmp_path, monkeypatch, caps):
    """A rollback's put-back (a failure once the swap removed the profiles) has the same window."""
    logdir = make_logdir(tmp_path)
    prof = next((logdir / "a").rglob("*.xplane.pb"))
    original = prof.read_bytes()
    for mod in (transaction, swap):
        monkeypatch.setattr(mod, "folder_capabilities", lambda: caps)
    made = []

    def writer():
        if not made and not prof.exists():
            made.append(prof)
            prof.parent.mkdir(parents=True, exist_ok=True)
            prof.write_bytes(WRITER)  # after the look found the path free, before the place

    def fail():
        faults.arm("restore_copied", writer)
        raise RuntimeError("a failure after the swap")

    faults.arm("reduce.swap", fail)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    faults.disarm_all()
    assert made, "the put-back never reached its place"
    assert [o.status for o in rep.outcomes if o.run == "a"] == ["rolled_back"], rep.to_dict()
    assert prof.read_bytes() == original
    assert _listed_displaced(logdir, _sha(WRITER)), "the writer's file is nowhere: replaced by the original"


@pytest.mark.parametrize("caps", list(CAPS.values()), ids=list(CAPS))
def test_a_rollback_names_every_content_it_displaced_over_several_looks(tmp_path, monkeypatch, caps):
    """A rollback whose put-back looks more than once (a file made at the free path, then appended
    to before the next place) stores each content it found in the vault; its manifest names them
    all. It named only the last: the earlier one was journaled and in the vault, a blob no
    manifest names (review of b29e2e3)."""
    logdir = make_logdir(tmp_path)
    prof = next((logdir / "a").rglob("*.xplane.pb"))
    original = prof.read_bytes()
    for mod in (transaction, swap):
        monkeypatch.setattr(mod, "folder_capabilities", lambda: caps)
    steps = []

    def writer():
        steps.append(len(steps))
        if len(steps) == 1:  # the path found free: a writer makes the file before the place
            prof.parent.mkdir(parents=True, exist_ok=True)
            prof.write_bytes(WRITER)
        elif len(steps) == 2:  # stored as displaced: the writer appends before the next place
            with open(prof, "ab") as f:
                f.write(APPENDED)

    def fail():
        faults.arm("restore_copied", writer)
        raise RuntimeError("a failure after the swap")

    faults.arm("reduce.swap", fail)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    faults.disarm_all()
    assert len(steps) >= 3, steps
    assert [o.status for o in rep.outcomes if o.run == "a"] == ["rolled_back"], rep.to_dict()
    assert prof.read_bytes() == original
    for content in (WRITER, WRITER + APPENDED):
        assert _listed_displaced(logdir, _sha(content)), f"{len(content)} bytes displaced: no manifest names them"


def test_a_folder_on_the_path_swapped_for_a_link_before_the_place_is_not_followed(tmp_path, monkeypatch):
    """Invariant 4 (review R5 F8): the put-back's looks go through the logdir's store
    (``Store.version``), never a path followed. A file stood at the original's path (stored as
    displaced); between the look and the place its folder is moved out of the logdir and a link
    to it put in its stead. The put-back looked with ``os.lstat`` on the absolute path, followed
    the link, found the same file and renamed the original over it, outside the logdir. Now the
    link on the way is refused: nothing outside changes, the restore fails and says why."""
    logdir, prof, original, op = _reduced(tmp_path, monkeypatch, CAPS["renames-copying-vault"])
    prof.parent.mkdir(parents=True, exist_ok=True)
    prof.write_bytes(WRITER)  # something stands at the path: looked at, stored, then placed over
    outside = tmp_path / "outside"
    outside.mkdir()
    moved = []

    def swap_folder_for_a_link():
        if not moved:
            moved.append(outside / prof.parent.name)
            os.rename(prof.parent, moved[0])
            os.symlink(moved[0], prof.parent)

    faults.arm("restore_copied", swap_folder_for_a_link)
    outs = api.restore(str(logdir), op=op)
    faults.disarm_all()
    assert moved, "the put-back never reached its place"
    assert (moved[0] / prof.name).read_bytes() == WRITER, "the original was written outside the logdir"
    assert [o.status for o in outs] == ["failed"], [o.to_dict() for o in outs]
    assert "link" in outs[0].reason, outs[0].reason
    assert Context(str(logdir)).vault.check_blob(_sha(WRITER))  # what stood there is kept in the vault too


def _in_the_last_window(monkeypatch, prof: Path, then=None) -> list:
    """Append ``APPENDED`` to the file at ``prof`` once, exactly between the put-back's last look
    and the call that puts the original at ``prof`` (the rename over it, or the exchange with
    it: whichever this version makes), then make that call (and ``then()`` after it)."""
    from tb_footprint_plugin.storage import throttle

    done: list = []

    def wrap(real):
        def call(a, b, **kw):  # ``kw``: the folders' descriptors (``throttle.name_in``)
            if os.fspath(b) != str(prof) or done:
                return real(a, b, **kw)
            done.append(b)
            with open(prof, "ab") as f:  # reopened by name, appended, closed: after every check
                f.write(APPENDED)
            got = real(a, b, **kw)
            if then is not None:
                then()
            return got
        return call

    for name in ("replace", "exchange"):
        if hasattr(throttle, name):
            monkeypatch.setattr(throttle, name, wrap(getattr(throttle, name)))
    return done


@pytest.mark.parametrize("caps", [CAPS["renames-linking-vault"], CAPS["renames-copying-vault"]],
                         ids=["renames-linking-vault", "renames-copying-vault"])
def test_records_appended_between_the_last_look_and_the_rename_are_kept(tmp_path, monkeypatch, caps):
    """Review R5 F4: a record a writer appends after the put-back's last look, before the original
    takes the path, went with the replaced inode (the vault held the file as looked at). Now the
    original is exchanged with the file (``renameat2(RENAME_EXCHANGE)``), which is compared with
    the look after: grown, it is stored and listed too, and the path looked at again."""
    logdir, prof, original, op = _reduced(tmp_path, monkeypatch, caps)
    prof.parent.mkdir(parents=True, exist_ok=True)
    prof.write_bytes(WRITER)
    done = _in_the_last_window(monkeypatch, prof)
    outs = api.restore(str(logdir), op=op)
    assert done, "the put-back never reached its place"
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
    assert prof.read_bytes() == original
    assert _listed_displaced(logdir, _sha(WRITER + APPENDED)), "the records appended in the last window were lost"
    assert sorted(os.listdir(prof.parent)) == [prof.name]  # nothing left beside it


KILLED_AFTER_THE_PLACE = """
import os, signal, sys
from tb_footprint_plugin import api
from tb_footprint_plugin.storage import throttle
logdir, op, prof, appended = sys.argv[1:5]

def wrap(real):
    def call(a, b, **kw):
        if os.fspath(b) != prof:
            return real(a, b, **kw)
        with open(prof, "ab") as f:  # a writer's append after every check
            f.write(appended.encode())
        real(a, b, **kw)
        os.kill(os.getpid(), signal.SIGKILL)  # right after the original took the path
    return call

for name in ("replace", "exchange"):
    if hasattr(throttle, name):
        setattr(throttle, name, wrap(getattr(throttle, name)))
api.restore(logdir, op=op)
"""


def test_a_sigkill_right_after_the_exchange_then_recover_loses_nothing(tmp_path, monkeypatch):
    """A restore killed (SIGKILL, its own process) right after the original took the path, a
    writer having appended in the last window: what stood there, with the appended records, is at
    the exchange's name beside the path (a name the journaled token gives); the next start checks
    it against the vault, keeps its bytes, lists them and removes it. Before, the rename had
    dropped the inode and the appended records with it."""
    import signal
    import subprocess
    import sys

    from conftest import REPO

    logdir, prof, original, op = _reduced(tmp_path, monkeypatch, CAPS["renames-linking-vault"])
    monkeypatch.undo()  # the child runs on the folder's own capabilities
    prof.parent.mkdir(parents=True, exist_ok=True)
    prof.write_bytes(WRITER)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", KILLED_AFTER_THE_PLACE, str(logdir), op, str(prof),
                        APPENDED.decode()], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == -signal.SIGKILL, r.stdout[-2000:] + r.stderr[-2000:]
    assert prof.read_bytes() == original  # the original took the path before the kill
    beside = [n for n in os.listdir(prof.parent) if n != prof.name]
    assert [(prof.parent / n).read_bytes() for n in beside] == [WRITER + APPENDED], beside
    api.recover_logdir(str(logdir))
    assert prof.read_bytes() == original
    assert _listed_displaced(logdir, _sha(WRITER + APPENDED)), "the records appended in the last window were lost"
    assert sorted(os.listdir(prof.parent)) == [prof.name]  # the exchange's name settled and gone
