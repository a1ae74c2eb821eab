"""bench/scale.py's loose ends (r36 task P): ``--scratch`` naming a folder that does not exist,
``--time-limit`` bounding the measured phases only, ``--keep``'s logdirs reused by a later run."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.insert(0, BENCH)

import scale  # noqa: E402

QUICK = ["--sizes", "0", "--buckets", "0", "--file-sizes", "", "--tb-load", ""]


def _bench(*argv):
    return subprocess.run([sys.executable, os.path.join(BENCH, "scale.py"), *argv], capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_a_scratch_folder_that_does_not_exist_is_made_and_removed_after(tmp_path):
    where = tmp_path / "not" / "there"
    p = _bench("--scratch", str(where), *QUICK)
    assert p.returncode == 0, p.stderr[-2000:]
    assert f"--scratch {where}: made (it did not exist)" in p.stdout
    assert not (tmp_path / "not").exists()  # the bench made both, nothing else is there: both gone
    kept = _bench("--scratch", str(where), "--keep", *QUICK)
    assert kept.returncode == 0, kept.stderr[-2000:]
    assert [n.startswith("tbfp-bench-scale-") for n in os.listdir(where)] == [True]


def test_a_scratch_that_is_a_file_or_cannot_be_made_is_a_clear_error(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("x")
    for where, why in ((f, "not a folder"), (f / "below", "cannot make it")):
        p = _bench("--scratch", str(where), *QUICK)
        assert p.returncode == 2, (p.stdout, p.stderr)
        assert f"--scratch {where}: {why}" in p.stderr
        assert "Traceback" not in p.stderr, p.stderr
    assert f.read_text() == "x"


def _args(tmp_path, **kw):
    a = dict(keep=False, scratch=str(tmp_path), unique_backups=False, skip={"reduce"}, time_limit=None, repeat=1,
             small=False, reduce_runs="0", reduce_sizes=set(), no_ledger=False, profile=None)
    a.update(kw)
    return argparse.Namespace(**a)


def _fake_measure(seen, logdirs=None):
    def measure(kind, cache, timeout=None, **a):
        seen.append((kind, timeout))
        if logdirs is not None:
            logdirs.add(a["logdir"])
        time.sleep(0.05)
        if kind == "reduce":  # what follows a reduce (its state's size) is not these tests' business
            return {"error": "not measured here"}
        return {"seconds": 0.05, "rss_mb": 1.0}
    return measure


def test_the_time_limit_bounds_the_measured_phases_not_the_clean_up(tmp_path, monkeypatch):
    real = shutil.rmtree
    slow = []

    def rmtree(path, *a, **kw):  # the clean-up between phases, as slow as at 100,000 runs
        if os.path.basename(str(path)).startswith(("cp-a-copy", "cache-")):
            slow.append(path)
            time.sleep(1.0)
        return real(path, *a, **kw)

    seen = []
    monkeypatch.setattr(scale, "measure", _fake_measure(seen))
    monkeypatch.setattr(scale.shutil, "rmtree", rmtree)
    templates = scale._template_runs(str(tmp_path / "templates"))
    row = scale.run_size(4, str(tmp_path), templates, _args(tmp_path, time_limit=10.0))
    assert len(slow) >= 2  # cp -a's copy, the cold scan's cache: both removed before a later phase
    kinds = [k for k, _ in seen]
    assert kinds == ["rust", "scan_cold", "scan_warm", "plan", "plan_cold", "ledger"], kinds
    # six measured phases of ~0.05 s and a cp -a of 8 small files: the clean-up's 2 s not counted
    assert all(t >= 9.0 for _, t in seen), seen
    assert seen[-1][1] < seen[0][1]  # what the phases took is counted
    assert row["cp_a"]["seconds"] < 1.0


def test_a_kept_logdir_is_reused_only_when_it_holds_the_shape_asked_and_no_reduce_changed_it(tmp_path, monkeypatch):
    seen, logdirs = [], set()
    monkeypatch.setattr(scale, "measure", _fake_measure(seen, logdirs))
    templates = scale._template_runs(str(tmp_path / "templates"))
    first = tmp_path / "tbfp-bench-scale-first"
    first.mkdir()
    args = _args(tmp_path, keep=True)
    row = scale.run_size(6, str(first), templates, args)
    assert "reused" not in row and row["gen_s"] > 0
    kept = str(first / "logdir-6")
    assert os.path.isdir(kept) and os.path.isfile(kept + scale.SHAPE_SUFFIX)

    second = tmp_path / "tbfp-bench-scale-second"
    second.mkdir()
    logdirs.clear()
    row = scale.run_size(6, str(second), templates, args)
    assert logdirs == {kept}
    assert row["reused"] == kept and row["bytes"] == sum(len(b) for t in (templates * 2)[:6] for b in t.values())
    assert not (second / "logdir-6").exists()

    # another shape: other runs count, other templates, unique backups
    assert scale.find_kept(str(tmp_path), scale.logdir_shape(7, templates, args))[0] is None
    other = scale._template_runs(str(tmp_path / "t2"), steps=50)
    assert scale.find_kept(str(tmp_path), scale.logdir_shape(6, other, args))[0] is None
    uniq = _args(tmp_path, keep=True, unique_backups=True)
    assert scale.find_kept(str(tmp_path), scale.logdir_shape(6, templates, uniq))[0] is None
    # changed since it was kept: a file more, a state folder at its top, a file's size
    shape = scale.logdir_shape(6, templates, args)
    extra = os.path.join(kept, scale.run_name(0), "extra")
    open(extra, "w").close()
    got, why = scale.find_kept(str(tmp_path), shape)
    assert got is None and "changed since it was kept" in why
    os.unlink(extra)
    os.mkdir(os.path.join(kept, ".tb-footprint"))
    got, why = scale.find_kept(str(tmp_path), shape)
    assert got is None and ".tb-footprint" in why
    os.rmdir(os.path.join(kept, ".tb-footprint"))
    assert scale.find_kept(str(tmp_path), shape)[0] == kept

    # a run that reduces it marks it first: kept, never reused
    third = tmp_path / "tbfp-bench-scale-third"
    third.mkdir()
    seen.clear()
    scale.run_size(6, str(third), templates, _args(tmp_path, keep=True, skip=set(), reduce_runs="2"))
    assert ("reduce", None) in seen
    with open(kept + scale.SHAPE_SUFFIX, encoding="utf-8") as f:
        assert json.load(f)["reduced"] is True
    got, why = scale.find_kept(str(tmp_path), shape)
    assert got is None and "reduced" in why


def test_without_keep_nothing_kept_is_reused_or_touched(tmp_path, monkeypatch):
    monkeypatch.setattr(scale, "measure", _fake_measure([]))
    templates = scale._template_runs(str(tmp_path / "templates"))
    first = tmp_path / "tbfp-bench-scale-first"
    first.mkdir()
    scale.run_size(3, str(first), templates, _args(tmp_path, keep=True))
    second = tmp_path / "tbfp-bench-scale-second"
    second.mkdir()
    row = scale.run_size(3, str(second), templates, _args(tmp_path))
    assert "reused" not in row
    assert os.path.isdir(first / "logdir-3") and not (second / "logdir-3").exists()
    assert scale.find_kept(str(tmp_path), scale.logdir_shape(3, templates, _args(tmp_path)))[0] == str(
        first / "logdir-3")


def test_a_kept_logdir_that_others_may_write_or_reached_through_a_link_is_not_reused(tmp_path, monkeypatch):
    monkeypatch.setattr(scale, "measure", _fake_measure([]))
    templates = scale._template_runs(str(tmp_path / "templates"))
    real = tmp_path / "elsewhere" / "tbfp-bench-scale-first"
    real.mkdir(parents=True, mode=0o700)
    args = _args(tmp_path, keep=True)
    scale.run_size(3, str(real), templates, args)
    shape = scale.logdir_shape(3, templates, args)
    assert scale.find_kept(str(real.parent), shape)[0] == str(real / "logdir-3")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.symlink(real, shared / "tbfp-bench-scale-planted")  # a link in a shared temp folder
    got, why = scale.find_kept(str(shared), shape)
    assert got is None and "not this user's own" in why
    os.chmod(real, 0o777)  # a bench folder others may write: its note could be anyone's
    got, why = scale.find_kept(str(real.parent), shape)
    assert got is None and "not this user's own" in why
    os.chmod(real, 0o700)
    assert scale.find_kept(str(real.parent), shape)[0] == str(real / "logdir-3")
    if os.geteuid() == 0:  # another user's bench folder (the suite runs as root, as CI does)
        os.chown(real, 65534, 65534)
        got, why = scale.find_kept(str(real.parent), shape)
        assert got is None and "not this user's own" in why
        os.chown(real, 0, 0)
    note = str(real / "logdir-3") + scale.SHAPE_SUFFIX
    os.rename(note, note + ".moved")
    os.symlink(note + ".moved", note)  # the note a link: not the bench's own file
    got, why = scale.find_kept(str(real.parent), shape)
    assert got is None and "not this user's own" in why
