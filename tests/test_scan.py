"""The scan: every byte of a logdir attributed to a run and a category, exactly."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REAL_LOGDIRS, copy_real
from tb_footprint_plugin.scan import categories as cat
from tb_footprint_plugin.cli import main as cli_main
from tb_footprint_plugin.scan.model import UNATTRIBUTED, footprint_from_dict
from tb_footprint_plugin.scan.scanner import scan
from tb_footprint_plugin.scan.tfrecord import RecordWriter
from tb_footprint_plugin.storage.paths import cache_dir, state_dir


def walk_total(root, skip=(".tb-footprint",)):
    """Independent byte count: os.walk + lstat of every non-directory entry."""
    total = 0
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in skip or dirpath != str(root)]
        for n in files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            total += os.lstat(os.path.join(dirpath, n)).st_size
    return total


def assert_exact(fp):
    for r in fp.runs:
        assert sum(c.bytes for c in r.categories.values()) == r.total_bytes, r.name
        assert sum(f.size for f in r.files) == r.total_bytes, r.name
        for f in r.files:
            assert sum(f.categories.values()) == f.size, f.path
    assert sum(c.bytes for c in fp.categories.values()) == fp.total_bytes


@pytest.mark.parametrize("name", REAL_LOGDIRS)
def test_real_fixture_every_byte_categorized(tmp_path, name):
    logdir = copy_real(name, tmp_path / "logdir")
    fp = scan(str(logdir))
    assert fp.total_bytes == walk_total(logdir)
    assert_exact(fp)
    assert UNATTRIBUTED not in {r.name for r in fp.runs}
    assert not [w for r in fp.runs for w in r.warnings]


def test_real_run_discovery(tmp_path):
    keras = scan(str(copy_real("tf/keras_profiled", tmp_path / "k")))
    assert {r.name for r in keras.runs} == {"train", "validation"}
    train = keras.run("train")
    assert [s.name for s in train.sessions] == ["2026_11_30_00_20_30"]
    assert train.sessions[0].hosts == ["vm"]
    assert cat.PROFILE_XPLANE in train.categories

    jax = scan(str(copy_real("jax/profiled", tmp_path / "j")))
    assert [r.name for r in jax.runs] == ["."]  # profile-only: no event file, still a run
    assert len(jax.runs[0].sessions) == 2
    assert cat.PROFILE_SECONDARY in jax.runs[0].categories

    torch = scan(str(copy_real("torch/profiled", tmp_path / "t")))
    names = {r.name for r in torch.runs}
    assert "." in names and "1795998068.7669468" in names
    root = torch.run(".")
    assert root.categories[cat.TORCH_TRACE].files == 2
    assert len([s for s in root.sessions if s.kind == "torch"]) == 2


def test_real_plugin_names(tmp_path):
    fp = scan(str(copy_real("tf/summary_mix", tmp_path / "s")))
    cats = fp.run(".").categories
    for plugin in ("scalars", "histograms", "images", "audio", "text", "hparams", "file_version"):
        assert plugin in cats, plugin
    assert cats["scalars"].records == 12080
    assert len(cats["scalars"].tags) == 8
    assert cat.GRAPH_DEF in cats

    viewed = scan(str(copy_real("viewed/jax_profiled", tmp_path / "v")))
    vc = viewed.run(".").categories
    assert vc[cat.PROFILE_CACHE].files == 2 * 23  # .cached_tools, cache_version, op_stats, 3 SSTABLEs, 17 hlo
    assert vc[cat.PROFILE_XPLANE].files == 2


def _write_events(path, n=5):
    from tensorboard.compat.proto import event_pb2, summary_pb2

    with open(path, "wb") as f:
        w = RecordWriter(f)
        w.write(event_pb2.Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString())
        for i in range(n):
            ev = event_pb2.Event(wall_time=2.0 + i, step=i, summary=summary_pb2.Summary(
                value=[summary_pb2.Summary.Value(tag="loss", simple_value=float(i))]))
            w.write(ev.SerializeToString())


def test_bad_inputs_are_warnings_and_scan_goes_on(tmp_path):
    logdir = tmp_path / "logdir"
    for d in ("good", "trunc", "crc", "empty", "junk", "loop", "odd"):
        (logdir / d).mkdir(parents=True)
    _write_events(logdir / "good" / "events.out.tfevents.1.h")
    _write_events(logdir / "trunc" / "events.out.tfevents.1.h")
    with open(logdir / "trunc" / "events.out.tfevents.1.h", "ab") as f:
        f.write(b"\x40\x00\x00")  # a record header cut short: a writer mid-write
    _write_events(logdir / "crc" / "events.out.tfevents.1.h")
    data = bytearray((logdir / "crc" / "events.out.tfevents.1.h").read_bytes())
    data[-6] ^= 0xFF
    (logdir / "crc" / "events.out.tfevents.1.h").write_bytes(bytes(data))
    (logdir / "empty" / "events.out.tfevents.1.h").write_bytes(b"")
    (logdir / "junk" / "events.out.tfevents.1.h").write_text("this is not a TFRecord file\n")
    os.symlink("..", logdir / "loop" / "up")  # a loop if followed
    os.symlink("/etc", logdir / "loop" / "out")  # out of the logdir
    _write_events(logdir / "loop" / "events.out.tfevents.1.h")
    odd = os.fsencode(str(logdir / "odd")) + b"/events.out.tfevents.\xff\xfe.h"
    with open(odd, "wb") as f:
        f.write(b"")
    fp = scan(str(logdir))
    assert fp.total_bytes == walk_total(logdir)
    assert_exact(fp)
    warnings = "\n".join(fp.warnings + [w for r in fp.runs for w in r.warnings])
    assert cat.EVENTS_INCOMPLETE in fp.run("trunc").categories
    assert cat.EVENTS_CORRUPT in fp.run("crc").categories
    assert "crc/events.out.tfevents.1.h" in warnings or "events.out.tfevents.1.h" in warnings
    assert fp.run("junk").categories[cat.EVENTS_CORRUPT].bytes == os.path.getsize(logdir / "junk" / "events.out.tfevents.1.h")
    assert fp.run("empty").total_bytes == 0
    assert "loop/out: symlink to /etc (outside the logdir), not followed" in warnings
    assert "loop/up: symlink to .." in warnings
    assert fp.run("loop").categories[cat.SYMLINK].files == 2
    assert "not valid UTF-8" in warnings
    assert fp.run("good").categories["scalars"].records == 5


def as_unprivileged(fn):
    """``fn()`` in a child that can be refused a read: as root (CI), a forked child that drops
    to ``nobody`` first (root reads files whatever their mode); ``fn`` raises to fail."""
    if os.geteuid() != 0:
        return fn()
    import pickle
    import traceback

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(r)
        try:
            os.setgroups([])
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            fn()
            out = b"ok"
        except BaseException:  # noqa: BLE001 - handed to the parent as text
            out = traceback.format_exc().encode()
        os.write(w, pickle.dumps(out))
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        got = pickle.loads(f.read())
    os.waitpid(pid, 0)
    assert got == b"ok", got.decode()


def test_unreadable_file_and_directory(tmp_path, monkeypatch):
    import tempfile

    # a folder the unprivileged child can walk to (pytest's own tmp root is root's, 0700)
    root = Path(tempfile.mkdtemp(prefix="tbfp-unreadable-", dir="/tmp"))
    os.chmod(root, 0o755)
    logdir = root / "logdir"
    (logdir / "a").mkdir(parents=True)
    (logdir / "b" / "sub").mkdir(parents=True)
    _write_events(logdir / "a" / "events.out.tfevents.1.h")
    os.chmod(logdir / "a" / "events.out.tfevents.1.h", 0)
    os.chmod(logdir / "b" / "sub", 0)

    def check():
        # a cache folder of the child's own; not root, ``check`` runs in this process: monkeypatch
        # puts the suite's back after the test (later tests' subprocesses inherit os.environ)
        monkeypatch.setenv("XDG_CACHE_HOME", str(root / "cache"))
        fp = scan(str(logdir))
        warnings = "\n".join(fp.warnings + [w for r in fp.runs for w in r.warnings])
        assert "events.out.tfevents.1.h" in warnings
        assert "b/sub: unreadable directory" in warnings
        assert_exact(fp)

    try:
        if os.geteuid() == 0:
            os.chmod(root, 0o777)  # the child writes its scan cache there
        as_unprivileged(check)
    finally:
        os.chmod(logdir / "a" / "events.out.tfevents.1.h", 0o644)
        os.chmod(logdir / "b" / "sub", 0o755)
        import shutil

        shutil.rmtree(root, ignore_errors=True)


def test_unattributed_and_vault_excluded(tmp_path):
    logdir = tmp_path / "logdir"
    (logdir / "notes").mkdir(parents=True)
    (logdir / "notes" / "readme.txt").write_text("hello")
    (logdir / "run").mkdir()
    _write_events(logdir / "run" / "events.out.tfevents.1.h")
    (logdir / ".tb-footprint" / "blobs" / "ab").mkdir(parents=True)
    (logdir / ".tb-footprint" / "blobs" / "ab" / "x").write_bytes(b"0" * 100)
    (logdir / ".tb-footprint" / "scan-cache.json").write_text("{}")  # state, not a backup
    fp = scan(str(logdir), use_cache=False)
    assert fp.run(UNATTRIBUTED).total_bytes == 5
    assert fp.vault_bytes == 100
    assert fp.total_bytes == walk_total(logdir)


def test_incremental_cache_rereads_only_changed(tmp_path):
    logdir = tmp_path / "logdir"
    for i in range(5):
        (logdir / f"r{i}").mkdir(parents=True)
        _write_events(logdir / f"r{i}" / "events.out.tfevents.1.h")
    first = scan(str(logdir))
    assert (first.files_read, first.files_cached) == (5, 0)
    again = scan(str(logdir))
    assert (again.files_read, again.files_cached) == (0, 5)
    assert again.to_dict()["runs"] == first.to_dict()["runs"]
    _write_events(logdir / "r3" / "events.out.tfevents.1.h", n=9)
    third = scan(str(logdir))
    assert (third.files_read, third.files_cached) == (1, 4)
    assert third.run("r3").categories["scalars"].records == 9
    # a damaged cache is only a slower scan
    (Path(cache_dir(str(logdir))) / "scan-cache.json").write_text("{not json")
    assert scan(str(logdir)).files_read == 5


def test_concurrent_scans_leave_a_valid_cache(tmp_path):
    logdir = tmp_path / "logdir"
    for i in range(20):
        (logdir / f"r{i}").mkdir(parents=True)
        _write_events(logdir / f"r{i}" / "events.out.tfevents.1.h")
    code = f"from tb_footprint_plugin.scan.scanner import scan; scan({str(logdir)!r})"
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(4)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    with open(Path(cache_dir(str(logdir))) / "scan-cache.json") as f:
        assert len(json.load(f)["files"]) == 20


def test_cli_scan_human_and_json(tmp_path, capsys):
    logdir = copy_real("torch/profiled", tmp_path / "t")
    assert cli_main(["scan", str(logdir), "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "PyTorch traces" in out and "1 more runs" in out and "%" in out
    assert cli_main(["scan", str(logdir), "--json", "--files"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schema_version"] == 1
    fp = footprint_from_dict(d)
    assert fp.total_bytes == walk_total(logdir)
    assert cli_main(["scan", str(tmp_path / "missing")]) == 2  # a usage error (issue 13)
    assert "is not a directory" in capsys.readouterr().err
    assert cli_main(["scan"]) == 2


def test_scanning_writes_nothing_into_the_logdir_until_something_is_reduced(tmp_path, monkeypatch):
    cache_home = tmp_path / "cache-home"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
    logdir = copy_real("tf/keras_profiled", tmp_path / "logdir")
    before = sorted(str(p.relative_to(logdir)) for p in logdir.rglob("*"))
    scan(str(logdir))
    assert sorted(str(p.relative_to(logdir)) for p in logdir.rglob("*")) == before
    assert not os.path.exists(state_dir(str(logdir)))
    cached = Path(cache_dir(str(logdir))) / "scan-cache.json"
    assert cached.is_file() and cache_home in cached.parents
    assert scan(str(logdir)).files_cached > 0  # and it is used
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert Path(cache_dir(str(logdir))).parent == tmp_path / "home" / ".cache" / "tb-footprint"
    # once the user reduced something there, the logdir's own state folder holds its cache
    os.makedirs(state_dir(str(logdir)))
    assert cache_dir(str(logdir)) == state_dir(str(logdir))


def test_run_lookup_is_indexed_and_follows_the_list():
    """``LogdirFootprint.run`` is called for every run of a plan: an index, never stale."""
    from tb_footprint_plugin.scan.model import LogdirFootprint, RunFootprint

    runs = [RunFootprint(name=f"r{i}", path=f"r{i}") for i in range(5000)]
    fp = LogdirFootprint(logdir="/x", scanned_at=0.0, total_bytes=0, runs=runs, categories={})
    calls = []

    class Counting(list):
        def __iter__(self):
            calls.append(1)
            return super().__iter__()

    fp.runs = Counting(runs)
    assert all(fp.run(f"r{i}") is runs[i] for i in range(5000))
    assert len(calls) == 1  # one pass builds the index; 5,000 lookups do not scan again
    assert fp.run("nope") is None
    fp.runs.append(RunFootprint(name="late", path="late"))
    assert fp.run("late") is fp.runs[-1]
    fp.runs[0].name = "renamed"
    assert fp.run("renamed") is fp.runs[0] and fp.run("r0") is None
    fp.runs = [RunFootprint(name="dup", path="a"), RunFootprint(name="dup", path="b")]
    assert fp.run("dup").path == "a"  # the first of a name, as before
    assert "_by_name" not in fp.to_dict()
