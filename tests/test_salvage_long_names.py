"""Review R16 F14: records set aside beside an event file named near NAME_MAX (255 bytes) get a
name that fits, so a restore that puts a writer's late records back never fails half-way with
ENAMETOOLONG (before: ``interrupted``, and every later start failed the same way).

The late records are written by a real process with TensorBoard's own ``RecordWriter``
(``test_late_records.append_by_path``)."""
import os

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.engine import salvage
from tb_footprint_plugin.engine.salvage import NAME_MAX, SALVAGE_SUFFIX, salvage_name
from tb_footprint_plugin.scan.categories import is_summary_event_file_name
from test_late_records import PY, append_by_path, image_run, scalar_steps

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _nbytes(name: str) -> int:
    return len(os.fsencode(os.path.basename(name)))


@pytest.mark.parametrize("base", [
    "events.out.tfevents." + "x" * 235,                     # 255 bytes, the review's
    "events.out.tfevents.1700000000.host." + "y" * 209,     # 245 bytes: 258 with the suffix
    "é" * 118 + ".tfevents.h",                               # multi-byte characters
    "events.out.tfevents." + "~" * 230,                     # 250 bytes, no character below '~' near the end
])
def test_a_salvage_name_fits_sorts_after_and_is_read_by_tensorboard(base):
    assert _nbytes(base) <= NAME_MAX
    names = [salvage_name(f"run/{base}", k) for k in (1, 2, 999, 1000)]
    for n in names:
        assert os.path.dirname(n) == "run"
        assert _nbytes(n) <= NAME_MAX, n
        assert os.path.basename(n) > base  # TensorBoard's Python loader moves forward to it
        assert is_summary_event_file_name(os.path.basename(n))
    assert len(set(names)) == 4
    # two long names sharing their first 240 bytes get two names
    other = base[:-1] + ("z" if base[-1] != "z" else "w")
    assert salvage_name(other, 1) != salvage_name(base, 1)


def test_a_short_name_keeps_the_plain_suffix():
    assert salvage_name("a/b/events.out.tfevents.1.h", 7) == "a/b/events.out.tfevents.1.h.salvaged-007"
    base = "events.out.tfevents." + "x" * (NAME_MAX - 20 - 13)  # exactly 255 with the suffix
    assert salvage_name(base, 1) == base + SALVAGE_SUFFIX + "001"


def _long_named_run(tmp_path):
    logdir = tmp_path / "logdir"
    run = logdir / "r"
    path = image_run(run)
    long = run / ("events.out.tfevents." + "x" * 235)  # 255 bytes
    assert _nbytes(long.name) == NAME_MAX
    st = path.stat()
    path.rename(long)
    os.utime(long, ns=(st.st_atime_ns, st.st_mtime_ns))
    original, mtime_ns, mode = long.read_bytes(), long.stat().st_mtime_ns, long.stat().st_mode
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY)
    assert rep.ok and rep.outcomes[0].status == "verified", [o.to_dict() for o in rep.outcomes]
    assert long.read_bytes() != original
    append_by_path(long, 1000)  # a resumed job appends to the reduced file
    return logdir, run, long, (original, mtime_ns, mode)


def _check_restored(run, long, was):
    original, mtime_ns, mode = was
    assert long.read_bytes() == original and long.stat().st_mtime_ns == mtime_ns and long.stat().st_mode == mode
    (salv,) = [n for n in os.listdir(run) if n != long.name]  # no staging file left in the run
    assert _nbytes(salv) <= NAME_MAX and salv > long.name
    steps = scalar_steps(run)
    assert steps["late"] == [1000, 1001, 1002] and steps["loss"] == list(range(30))
    return salv


def test_restore_of_a_255_byte_event_file_with_late_records(tmp_path):
    logdir, run, long, was = _long_named_run(tmp_path)
    (o,) = api.restore(str(logdir))
    assert o.status == "restored", o.to_dict()
    salv = _check_restored(run, long, was)
    assert salv in o.reason and "3 record(s)" in o.reason
    assert api.recover_logdir(str(logdir)) == []
    (kb,) = api.status(str(logdir))["kept_blobs"]
    assert kb["late_records_file"] == f"r/{salv}"


def test_a_restore_left_half_way_by_the_old_naming_is_finished_by_the_next_start(tmp_path, monkeypatch):
    """The state the old code left (its rename into a name over NAME_MAX failed) is finished by
    the next start with the new naming: the original back, the late records beside it."""
    logdir, run, long, was = _long_named_run(tmp_path)
    with monkeypatch.context() as mp:  # the old code: the suffix whatever the length
        mp.setattr(salvage, "salvage_name", lambda path, k: f"{path}{SALVAGE_SUFFIX}{k:03d}")
        (o,) = api.restore(str(logdir))
    assert o.status == "failed" and "File name too long" in o.reason, o.to_dict()
    assert any(n.startswith(".footprint-restore-late-") for n in os.listdir(run))  # the review's state
    rec = api.recover_logdir(str(logdir))
    assert [r.action for r in rec] == ["completed"], [vars(r) for r in rec]
    salv = _check_restored(run, long, was)
    (kb,) = api.status(str(logdir))["kept_blobs"]
    assert kb["late_records_file"] == f"r/{salv}"


def test_a_start_salvages_a_grown_backup_of_a_255_byte_event_file(tmp_path):
    """``salvage_one``: a writer that kept the original open through the reduction appends to
    the backup's inode; the next start puts those records into the run under a name that fits."""
    logdir = tmp_path / "logdir"
    run = logdir / "r"
    path = image_run(run)
    long = run / ("events.out.tfevents." + "x" * 235)
    st = path.stat()
    path.rename(long)
    os.utime(long, ns=(st.st_atime_ns, st.st_mtime_ns))
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=PY,
                            vault_format="hardlink")
    assert rep.ok and rep.outcomes[0].status == "verified", [o.to_dict() for o in rep.outcomes]
    (m,) = [m for m in api.operations(str(logdir)) if m.get("kind") == "reduce"]
    (f,) = [f for f in m["files"] if f["path"] == f"r/{long.name}"]
    append_by_path(os.path.join(m["vault"], f["blob"]), 2000)
    rec = api.recover_logdir(str(logdir))
    assert [r.action for r in rec] == ["salvaged"], [vars(r) for r in rec]
    (salv,) = [n for n in os.listdir(run) if n != long.name]
    assert _nbytes(salv) <= NAME_MAX and salv > long.name
    assert scalar_steps(run)["late"] == [2000, 2001, 2002]
