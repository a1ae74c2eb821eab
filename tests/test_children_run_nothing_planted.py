"""Review R11 G9 (and G8, R9 F1): a Python child of ours never imports from the current folder.
``python -m`` (and ``-c``) put the current folder first on the child's ``sys.path``, so a
``tb_footprint_plugin/`` package or a ``json.py`` planted in a shared logdir the user stands in
(``cd /scratch/team/runs && tb-footprint reduce .``) ran as that user in the verification's reader
child. Every child now starts through ``storage.spawn.python_child`` in ``/``."""
import os
import subprocess

import pytest

from conftest import copy_real
from tb_footprint_plugin import api
from tb_footprint_plugin.storage.spawn import python_child, python_env
from tb_footprint_plugin.verify.pyside import PythonSide


def _plant(where, marker):
    """A package of our name and a stdlib module's name, each leaving a marker when imported."""
    planted = where / "tb_footprint_plugin"
    planted.mkdir()
    code = f"open({str(marker)!r}, 'a').write('ran\\n')\n"
    (planted / "__init__.py").write_text(code)
    (where / "json.py").write_text(code)
    (where / "sitecustomize.py").write_text(code)


def test_the_readers_child_imports_nothing_from_the_current_folder(tmp_path, monkeypatch):
    logdir = copy_real("tf/summary_mix", tmp_path / "shared")
    run = sorted(p.parent for p in logdir.rglob("events.out.tfevents.*"))[0]
    marker = tmp_path / "PWNED"
    _plant(logdir, marker)
    monkeypatch.chdir(logdir)
    monkeypatch.setenv("PYTHONPATH", ":" + os.environ.get("PYTHONPATH", ""))  # an empty entry: the cwd
    side = PythonSide(str(run), 120).start()
    assert side.where == "child"
    got = side.result()
    assert not marker.exists(), marker.read_text()
    assert got.fatal is None and got.plugins, got  # and it still reads the run, TensorBoard found


def test_a_reduce_run_from_a_shared_logdir_runs_nothing_planted_there(tmp_path, monkeypatch):
    logdir = copy_real("tf/summary_mix", tmp_path / "shared")
    marker = tmp_path / "PWNED"
    _plant(logdir, marker)
    monkeypatch.chdir(logdir)
    rep = api.reduce_logdir(".", None, policy="archive", dry_run=False, quiet_period=0)
    assert rep.outcomes and all(o.status in ("verified", "skipped") for o in rep.outcomes), \
        [(o.run, o.status, o.reason) for o in rep.outcomes]
    assert not marker.exists(), marker.read_text()


def test_a_child_runs_on_this_process_path_without_the_current_folder_or_a_later_pythonpath(tmp_path, monkeypatch):
    """The child's sys.path is this process's absolute entries (where numpy and TensorBoard were
    found, a PYTHONPATH of an HPC module included), never '' or a relative entry, nor a
    PYTHONPATH set since; the package root is on it."""
    import json as std_json
    import sys as this
    import textwrap

    cwd, lib, later, parent = tmp_path / "cwd", tmp_path / "lib", tmp_path / "later", tmp_path / "parent"
    for d in (cwd, lib, later, parent):
        d.mkdir()
    for d in (cwd, later):
        (d / "json.py").write_text("raise SystemExit('planted json imported')\n")
    (lib / "probe.py").write_text("import sys, json\ndef main(argv):\n    print(json.dumps([sys.path, argv]))\n"
                                  "    return 0\n")
    # the parent starts with lib on its PYTHONPATH (as a module load sets it), then sets another since
    (parent / "runs_probe.py").write_text(textwrap.dedent(f"""
        import subprocess, sys
        from tb_footprint_plugin.storage.spawn import python_child, python_env
        sys.path[:0] = ["", "relative/x"]  # after the imports: the parent's own json is the standard one
        env = python_env({{"PYTHONPATH": ".:{later}"}})
        assert env["PYTHONPATH"] == {str(later)!r}, env["PYTHONPATH"]
        p = subprocess.run(python_child("probe", "main", ["a", "b"]), cwd={str(cwd)!r}, env=env,
                           capture_output=True, text=True, timeout=60)
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
        sys.exit(p.returncode)
    """))
    start_env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(lib), str(parent)] + [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e]))
    p = subprocess.run([this.executable, str(parent / "runs_probe.py")], cwd=str(cwd), env=start_env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr  # the planted json.py (cwd, later PYTHONPATH) never imported
    path, argv = std_json.loads(p.stdout)
    assert argv == ["a", "b"]
    assert "" not in path and "relative/x" not in path and str(later) not in path and str(lib) in path
    assert all(e.startswith("/") for e in path)
    assert os.path.dirname(os.path.dirname(os.path.abspath(api.__file__))) in path or \
        any(os.path.isdir(os.path.join(e, "tb_footprint_plugin")) for e in path)


def test_an_installed_packages_root_keeps_its_place_after_the_standard_library(monkeypatch):
    """Review R12: installed from a wheel, the package root is site-packages; put first, anything
    there named like a standard module (a backport) would shadow it in our children."""
    import sys as this
    from tb_footprint_plugin.storage import spawn

    site = next(p for p in this.path if p.endswith("site-packages"))
    monkeypatch.setattr(spawn, "_PACKAGE_ROOT", site)
    path = spawn.child_path()
    stdlib = next(i for i, e in enumerate(path) if e.endswith("/lib/python%d.%d" % this.version_info[:2]))
    assert path.index(site) > stdlib, path
    monkeypatch.setattr(spawn, "_PACKAGE_ROOT", "/nowhere/checkout")  # a checkout on no entry: first
    assert spawn.child_path()[0] == "/nowhere/checkout"


@pytest.mark.parametrize("opts,chdir_before_import", [((), False), ((), True), (("-W", "ignore"), False),
                                                     (("-u",), False)])
def test_a_python_m_parents_folder_is_no_way_into_a_child(tmp_path, opts, chdir_before_import):
    """Review R13 F1 (a regression of 73a5eb7): ``python -m`` (a TensorBoard started as ``python -m
    tensorboard.main --logdir .``, a Jupyter kernel) puts the ABSOLUTE folder it starts in first on
    ``sys.path``; a child built its path from the parent's absolute entries, so a package planted in
    that shared folder after the parent started was imported by every child of ours, as the user.
    R14 G3: also after a ``chdir`` before the import (a notebook's ``%cd`` first cell), with options
    before ``-m`` (``-W ignore -m``) and a combined flag group (``-um``)."""
    import sys
    import textwrap

    shared = tmp_path / "shared_logdir"  # the user stands in a shared logdir
    shared.mkdir()
    marker = tmp_path / "ran_as_user"
    parent = tmp_path / "pkgs"
    parent.mkdir()
    (parent / "r13_parent.py").write_text(textwrap.dedent(f"""
        import os, subprocess, sys
        start = os.getcwd()
        assert sys.path[0] == start, sys.path[:2]  # python -m put the folder first, absolute
        if {chdir_before_import!r}:
            os.chdir({str(tmp_path)!r})  # '%cd ~/work', then the import
        from tb_footprint_plugin.storage.spawn import child_path, python_child, python_env
        os.chdir({str(tmp_path)!r})
        # a teammate plants a package in the shared folder after this process started
        os.makedirs(start + "/tb_footprint_plugin/engine", exist_ok=True)
        open(start + "/tb_footprint_plugin/__init__.py", "w").write("open({str(marker)!r}, 'w').write('x')\\n")
        open(start + "/tb_footprint_plugin/engine/__init__.py", "w").write("")
        open(start + "/tb_footprint_plugin/engine/compact_worker.py", "w").write("def main(a): return 0\\n")
        assert start not in child_path(), child_path()
        r = subprocess.run(python_child("tb_footprint_plugin.engine.compact_worker", "main", ["--help"]), cwd="/",
                           env=python_env(), stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        print("child rc", r.returncode, r.stderr[-300:])
    """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(parent), os.environ.get("PYTHONPATH", "")]))
    m = [opts[0] + "m"] if opts == ("-u",) else [*opts, "-m"]  # -um: a combined flag group
    r = subprocess.run([sys.executable, *m, "r13_parent"], cwd=shared, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not marker.exists(), "a package planted in the folder `python -m` was started in ran in our child"


def test_standing_in_site_packages_keeps_it_on_a_childs_path(monkeypatch):
    """R14 G4: every entry whose realpath was the current folder was dropped, so a process standing
    in the venv's site-packages gave its children no numpy or TensorBoard (they failed: safe, but
    every verification refused). An entry is judged by where it leads, never by the current folder."""
    import sysconfig

    purelib = sysconfig.get_paths()["purelib"]
    monkeypatch.chdir(purelib)
    from tb_footprint_plugin.storage.spawn import child_path

    assert any(os.path.realpath(p) == os.path.realpath(purelib) for p in child_path()), child_path()
    r = subprocess.run(python_child("tb_footprint_plugin.engine.compact_worker", "main", ["--help"])[:4]
                       + [], cwd="/", env=python_env(), capture_output=True, text=True, timeout=60)
    assert "No module named" not in r.stderr, r.stderr[-1000:]


def test_an_entry_is_given_as_it_was_judged_never_by_a_name_swapped_since(tmp_path):
    """Review R15 S1: an entry was judged by where its name led (realpath) and handed to the child by
    name; a folder renamed away and replaced by a link into site-packages was kept, then the link
    pointed at a planted folder before the child imported."""
    import sys
    import sysconfig
    import textwrap

    shared, evil, marker = tmp_path / "shared", tmp_path / "evil", tmp_path / "PWNED"
    start = shared / "start"
    start.mkdir(parents=True)
    (evil / "tb_footprint_plugin" / "engine").mkdir(parents=True)
    (evil / "tb_footprint_plugin" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (evil / "tb_footprint_plugin" / "engine" / "__init__.py").write_text("")
    (evil / "tb_footprint_plugin" / "engine" / "compact_worker.py").write_text("def main(a): return 0\n")
    parent = tmp_path / "pp"
    parent.mkdir()
    site_pk = sysconfig.get_paths()["purelib"]
    (parent / "r15_parent.py").write_text(textwrap.dedent(f"""
        import os, subprocess
        from tb_footprint_plugin.storage.spawn import child_path, python_child, python_env
        os.rename({str(start)!r}, {str(start)!r} + ".moved")  # the planter: a link into site-packages
        os.symlink({site_pk!r}, {str(start)!r})
        cmd = python_child("tb_footprint_plugin.engine.compact_worker", "main", ["--help"])
        assert {str(start)!r} not in child_path(), child_path()
        os.unlink({str(start)!r})  # ... pointed at the planted folder before the child imports
        os.symlink({str(evil)!r}, {str(start)!r})
        subprocess.run(cmd, cwd="/", env=python_env(), stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(parent), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "r15_parent"], cwd=str(start), env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not marker.exists(), "a folder swapped after it was judged reached our child"


def test_a_child_keeps_its_own_isolated_entries_after_the_given_ones(monkeypatch, tmp_path):
    """Review R15 S2: EasyBuild's Python adds its modules' folders from a sitecustomize, under no
    prefix, PYTHONPATH or .pth: dropped from the path given, the child lost numpy and every
    verification failed. The child's own isolated entries it was not given now follow the given
    ones (nothing of the current folder among them: -I)."""
    from tb_footprint_plugin.storage import spawn

    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "probe2.py").write_text("import sys, json\ndef main(argv):\n    print(json.dumps(sys.path))\n    return 0\n")
    monkeypatch.setattr(spawn, "child_path", lambda: [str(lib)])  # given: no standard library at all
    p = subprocess.run(spawn.python_child("probe2", "main"), cwd="/", env=python_env(), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    import json as std_json
    import sysconfig

    path = std_json.loads(p.stdout)
    assert path[0] == str(lib) and sysconfig.get_paths()["stdlib"] in path, path
    assert "" not in path and all(e.startswith("/") for e in path), path
