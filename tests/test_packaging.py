"""The wheel as users install it: built, installed into fresh venvs (no editable install, no
repo on the path), TensorBoard started from it on demo logs, the tab's module and JSON routes
served. The package installs and runs on every Python 3.9–3.12 this machine has.

Each fresh install writes ~200 MB of dependencies, about half a minute of CI's two cores, so the
running interpreter's version is installed once, as the README says: ``pip install .`` of a clean
copy (which builds the same wheel the wheel test inspects) serves the tab and runs the CLI.

The other versions install the wheel built once for this module (``dist``): it is pure Python
(``py3-none-any``, its dependencies' markers kept as written, so ``tomli`` is still asked for
below 3.11) and ``setup.py`` runs nothing version-dependent, so the same bytes are what
``pip install .`` would build on each of them. Each gets a fresh venv without a pip of its own,
installed into by the suite's pip run in that venv's interpreter (``pip --python``): the
dependencies are resolved and picked for that Python as its own pip would pick them, without
~6 s of CPU per version to put pip itself into a venv the check never runs pip from. Then the
installed CLI scans a real logdir and TensorBoard finds the loader, as on the running version.
(Per version, ~12 s of CPU less than a ``pip install .`` of its own: no pip put into the venv, no
build environment and build of the same wheel again, no copy of the repository.)"""
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import REPO

PYTHONS = ["3.9", "3.10", "3.11", "3.12"]
#: the version whose fresh install also serves the tab (``test_pip_install_dot_serves_the_tab``)
RUNNING = "%d.%d" % sys.version_info[:2]


def _env():
    # nothing of the repo or of the test venv may leak into the fresh venvs
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _interpreter(version):
    for cand in (shutil.which(f"python{version}"), f"/root/.pyenv/versions/{version}/bin/python{version}"):
        if cand and os.path.exists(cand):
            try:
                out = subprocess.run([cand, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                     capture_output=True, text=True, timeout=60, env=_env())
            except (OSError, subprocess.TimeoutExpired):
                continue
            if out.returncode == 0 and out.stdout.strip() == version:
                return cand
    for root in glob.glob(f"/root/.pyenv/versions/{version}.*/bin/python{version}"):
        return root
    return None


def _copy_repo(dest) -> None:
    """The repository as a clean clone has it: no environments, caches, or the CI's node folder
    (Azurite from npm, ~190 MB in ~24k files that the package never ships)."""
    shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns(".venv", ".venv-test", ".git", "build", "*.egg-info", "node",
                                                              "test-artifacts", "__pycache__", "generated"))


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """A wheel and an sdist built from a clean copy of the repo."""
    out = tmp_path_factory.mktemp("dist")
    src = tmp_path_factory.mktemp("src") / "repo"
    _copy_repo(src)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(src)],
                   check=True, env=_env(), capture_output=True)
    subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(out)], cwd=src, check=True,
                   env=_env(), capture_output=True)
    wheel = next(out.glob("*.whl"))
    sdist = next(out.glob("*.tar.gz"))
    return wheel, sdist


def _venv(python, where):
    subprocess.run([python, "-m", "venv", str(where)], check=True, env=_env())
    return where / "bin" / "python"


def test_wheel_contents(dist):
    import zipfile

    wheel, sdist = dist
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("tb_footprint_plugin/loader.py", "tb_footprint_plugin/frontend/index.js",
                   "tb_footprint_plugin/frontend/model.js", "tb_footprint_plugin/plugin/routes.py",
                   "tb_footprint_plugin/frontend/theme.js", "tb_footprint_plugin/frontend/vendor/uPlot.esm.js",
                   "tb_footprint_plugin/frontend/vendor/uPlot.min.css",
                   "tb_footprint_plugin/frontend/vendor/uPlot.LICENSE"):
        assert needed in names, needed
    assert any(n.startswith("tb_footprint_plugin/frontend/views/") for n in names)
    ep = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "[tensorboard_plugins]" in ep and "footprint = tb_footprint_plugin.loader:FootprintLoader" in ep
    assert "tb-footprint = tb_footprint_plugin.cli:console" in ep
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    for field in ("Name: tb-footprint-plugin", "License: Apache-2.0", "Classifier: Framework :: TensorBoard",
                  "Requires-Dist: tensorboard", "Requires-Dist: google-crc32c", "Project-URL: "):
        assert field in meta, field
    assert sdist.stat().st_size > 10_000
    # one wheel for every Python, its markers kept: what the other versions install
    # (test_the_wheel_installs_and_runs_on_python)
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    assert any(l.startswith("Requires-Dist: tomli") and "python_version < \"3.11\"" in l
               for l in meta.splitlines()), meta


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def _runs_from(venv, tmp_path, fixtures) -> None:
    """The package installed in ``venv`` is what runs, not a copy or the repo; its CLI scans a
    real logdir (the vendored fixtures; demo_logs/ holds only its README until `tb-footprint demo`
    writes it, and a folder with no TensorBoard data is no logdir), and TensorBoard finds the
    plugin's loader."""
    py = venv / "bin" / "python"
    where = subprocess.run([str(py), "-c", "import tb_footprint_plugin, os; print(tb_footprint_plugin.__file__)"],
                           capture_output=True, text=True, check=True, cwd=tmp_path, env=_env()).stdout
    assert str(venv) in where, where
    out = subprocess.run([str(venv / "bin" / "tb-footprint"), "scan", str(fixtures)],
                         capture_output=True, text=True, env=_env(), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "summary_mix" in out.stdout, out.stdout
    check = subprocess.run([str(py), "-c", "from tb_footprint_plugin.loader import FootprintLoader; "
                            "from tensorboard import default; "
                            "print([l.__name__ for l in default.get_dynamic_plugins()])"],
                           capture_output=True, text=True, env=_env(), cwd=tmp_path)
    assert check.returncode == 0, check.stderr[-2000:]
    assert "FootprintLoader" in check.stdout


def _pip_install_dot(python, tmp_path):
    """A fresh venv of ``python`` with ``pip install .`` of a clean copy (the README's path), the
    installed package checked by ``_runs_from``; the venv."""
    py = _venv(python, tmp_path / "venv")
    src = tmp_path / "repo"
    _copy_repo(src)
    # --no-compile: the ~200 MB of dependencies are not byte-compiled at install (a third of the
    # install's time on CI's two cores); Python compiles what is imported when it is imported, so
    # what the install resolves, installs and runs is the same as a user's `pip install .`
    p = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-compile", "."], cwd=src, env=_env(),
                       capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stderr[-3000:]
    _runs_from(tmp_path / "venv", tmp_path, src / "tests" / "fixtures" / "real")
    return tmp_path / "venv"


def _install_wheel(python, wheel, tmp_path):
    """A fresh venv of ``python`` (no pip of its own) with the module's wheel installed by the
    suite's pip run in that venv's interpreter (see the module docstring), checked by
    ``_runs_from`` on a copy of the vendored fixtures; the venv."""
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True, env=_env())
    p = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                        "--no-compile", str(wheel)], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                       timeout=1200)
    assert p.returncode == 0, p.stderr[-3000:]
    # the dependencies were picked for this Python: below 3.11 its TOML parser is tomli's
    tomli = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import sys; sys.version_info < (3, 11) and __import__('tomli')"],
                           capture_output=True, text=True, env=_env(), cwd=tmp_path)
    assert tomli.returncode == 0, tomli.stderr[-2000:]
    fixtures = tmp_path / "real"
    shutil.copytree(REPO / "tests" / "fixtures" / "real", fixtures)
    _runs_from(venv, tmp_path, fixtures)
    return venv


def test_pip_install_dot_serves_the_tab(tmp_path):
    """``pip install .`` into a fresh venv of the running Python: the CLI runs, and TensorBoard
    started from that venv serves the tab on demo logs."""
    bin_ = _pip_install_dot(sys.executable, tmp_path) / "bin"
    logs = tmp_path / "logs"
    # the demo's runs at a twentieth of its bytes (the same runs, and the same writers of the
    # installed package; a full-size demo is ~4x the CPU, spent on profile bytes no check reads)
    subprocess.run([str(bin_ / "tb-footprint"), "demo", str(logs), "--scale", "0.05"], check=True, env=_env(),
                   cwd=tmp_path)
    port = _free_port()
    tb = subprocess.Popen([str(bin_ / "tensorboard"), "--logdir", str(logs), "--host", "127.0.0.1",
                           "--port", str(port), "--footprint_quiet_period", "0"],
                          cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 120
        while True:
            try:
                status, body = _get(base + "/data/plugins_listing")
                break
            except OSError:
                if time.time() > deadline or tb.poll() is not None:
                    out = tb.stdout.read().decode(errors="replace") if tb.poll() is not None else ""
                    pytest.fail(f"tensorboard did not come up:\n{out[-3000:]}")
                time.sleep(0.5)
        listing = json.loads(body)
        assert listing["footprint"]["enabled"] is True
        assert listing["footprint"]["loading_mechanism"]["module_path"].endswith("/index.js")
        status, js = _get(base + "/data/plugin/footprint/index.js")
        assert status == 200 and b"export" in js and b"render" in js
        deadline = time.time() + 120
        while True:
            status, body = _get(base + "/data/plugin/footprint/runs", timeout=30)
            data = json.loads(body)
            if data.get("runs") or time.time() > deadline:
                break
            time.sleep(1)
        assert status == 200 and len(data["runs"]) >= 10, str(data)[:500]
    finally:
        tb.terminate()
        try:
            tb.wait(timeout=20)
        except subprocess.TimeoutExpired:
            tb.kill()


@pytest.mark.parametrize("version", [v for v in PYTHONS if v != RUNNING])
def test_the_wheel_installs_and_runs_on_python(version, dist, tmp_path):
    python = _interpreter(version)
    if python is None:
        pytest.skip(f"Python {version} is not on this machine")
    _install_wheel(python, dist[0], tmp_path)
