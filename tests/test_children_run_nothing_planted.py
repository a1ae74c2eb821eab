"""Review R11 G9 (and G8, R9 F1): a Python child of ours never imports from the current folder.
``python -m`` (and ``-c``) put the current folder first on the child's ``sys.path``, so a
``tb_footprint_plugin/`` package or a ``json.py`` planted in a shared logdir the user stands in
(``cd /scratch/team/runs && tb-footprint reduce .``) ran as that user in the verification's reader
child. Every child now starts through ``storage.spawn.python_child`` in ``/``."""
import os
import subprocess

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


def test_python_child_keeps_only_absolute_entries_and_the_package_root(tmp_path):
    cwd, lib = tmp_path / "cwd", tmp_path / "lib"
    cwd.mkdir()
    lib.mkdir()
    (cwd / "json.py").write_text("raise SystemExit('planted json imported')\n")
    (lib / "probe.py").write_text("import sys, json\ndef main(argv):\n    print(json.dumps([sys.path, argv]))\n    return 0\n")
    env = python_env({"PYTHONPATH": f".:{lib}:relative/x:"})
    assert env["PYTHONPATH"] == str(lib)
    for isolated in (True, False):
        cmd = python_child("probe", "main", ["a", "b"], isolated=isolated)
        # the probe module found through an absolute PYTHONPATH entry (not isolated only)
        p = subprocess.run(cmd, cwd=str(cwd), env=env, capture_output=True, text=True, timeout=60)
        if isolated:  # -I: PYTHONPATH ignored, so the probe is not found at all; nothing from the cwd
            assert p.returncode != 0 and "planted" not in p.stderr and "No module named 'probe'" in p.stderr
            continue
        assert p.returncode == 0, p.stderr
        import json as std_json
        path, argv = std_json.loads(p.stdout)
        assert argv == ["a", "b"]
        assert "" not in path and all(e.startswith("/") for e in path)


def test_an_installed_packages_root_keeps_its_place_after_the_standard_library(tmp_path, monkeypatch):
    """Review R12: installed from a wheel, the package root is site-packages; put first, anything
    there named like a standard module (a backport) would shadow it in our children."""
    import sys as this
    from tb_footprint_plugin.storage import spawn

    site = next(p for p in this.path if p.endswith("site-packages"))
    monkeypatch.setattr(spawn, "_PACKAGE_ROOT", site)
    probe = tmp_path / "probe.py"
    probe.write_text("import sys, json\ndef main(argv):\n    print(json.dumps(sys.path))\n    return 0\n")
    env = python_env({"PYTHONPATH": str(tmp_path)})
    p = subprocess.run(python_child("probe", "main", isolated=False), cwd="/", env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    import json as std_json
    path = std_json.loads(p.stdout)
    stdlib = next(i for i, e in enumerate(path) if e.endswith(("/lib/python%d.%d" % this.version_info[:2])))
    assert path.index(site) > stdlib, path
