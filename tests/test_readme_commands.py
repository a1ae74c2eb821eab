"""The README's two commands do not break each other.

``bash scripts/demo.sh`` installs the plugin into ``./.venv`` and serves the tab from there;
``bash scripts/test.sh`` once installed ``-e .[test]`` into that same ``./.venv``, which pulled the
installed package out from under the running demo: ``index.js`` answered 404 and the tab went
blank. Here, in a copy of the repository (the developer's own ``./.venv`` is never touched), the
demo is started exactly as the README says, the tab is loaded, the test command's install step
(``scripts/test.sh --install-only``) runs beside it, and the tab must still load.

Both of the copy's environments are seeded first, so their installs stay quick: a venv whose
``.pth`` points at this suite's own site-packages (every dependency is then already satisfied and
pip installs only the project into the copy: ``./.venv`` from the copy's files as the demo
script does, ``./.venv-test`` editable), and for the test environment links to the TensorFlow
folder and Azurite this suite already has. Both scripts' code paths are unchanged. A newcomer's
full ``pip install .`` into a fresh venv, dependencies and all, is ``tests/test_packaging.py``'s.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request

import pytest

from conftest import REPO

ENTRY = "/data/plugin/footprint/index.js"


def _env():
    # nothing of this suite's interpreter may leak into the copy's environments
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "TB_FOOTPRINT_TEST_TENSORFLOW")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not p.startswith(os.path.dirname(sys.executable)))
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _copy_repo(dest) -> None:
    """The repository as a fresh clone has it: no environments, no node folder, no artifacts."""
    shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns(
        ".venv", ".venv-*", ".git", "build", "*.egg-info", "node", "test-artifacts", "__pycache__", "generated"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url, timeout=30):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _seed_env(venv) -> None:
    """A venv with this suite's packages on its path (see the module docstring)."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=_env(), timeout=120)
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True, env=_env()).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    with open(os.path.join(purelib, "zz-suite-packages.pth"), "w") as f:
        f.write("\n".join(sorted(ours)) + "\n")


def _seed_test_env(repo) -> None:
    """The copy's ./.venv-test seeded, with the suite's TensorFlow folder and Azurite linked in."""
    venv = repo / ".venv-test"
    _seed_env(venv)
    tf = os.environ.get("TB_FOOTPRINT_TEST_TENSORFLOW") or str(REPO / ".venv-test" / "tensorflow")
    if os.path.isdir(os.path.join(tf, "tensorflow")):
        os.symlink(tf, venv / "tensorflow")
    node = REPO / ".ci" / "node"
    if (node / "node_modules" / ".bin" / "azurite-blob").exists():
        (repo / ".ci").mkdir(exist_ok=True)
        os.symlink(node, repo / ".ci" / "node")


def _tree(root) -> dict:
    """Every file of an environment with its size and mtime (bytecode caches aside)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for n in filenames:
            st = os.lstat(os.path.join(dirpath, n))
            out[os.path.relpath(os.path.join(dirpath, n), root)] = (st.st_size, st.st_mtime_ns)
    return out


def _tab_loads(base) -> None:
    status, js = _get(base + ENTRY)
    assert status == 200 and b"export async function render" in js, (status, js[:300])
    for asset in ("/data/plugin/footprint/views/common.js", "/data/plugin/footprint/style.css"):
        assert _get(base + asset)[0] == 200, asset
    status, body = _get(base + "/data/plugin/footprint/summary?wait=60", timeout=90)
    assert status == 200, body[:500]
    summary = json.loads(body)
    assert summary["total_bytes"] > 0 and summary["categories"], str(summary)[:500]
    listing = json.loads(_get(base + "/data/plugins_listing")[1])
    assert listing["footprint"]["enabled"] is True


def test_test_command_install_leaves_the_running_demo_tab_alone(tmp_path):
    repo = tmp_path / "repo"
    _copy_repo(repo)
    _seed_env(repo / ".venv")
    # TensorBoard's console script, as pip writes it into a venv it installs TensorBoard into (the
    # seeded venv finds TensorBoard on the suite's path, so pip writes none)
    launcher = repo / ".venv" / "bin" / "tensorboard"
    launcher.write_text(f"#!{repo / '.venv' / 'bin' / 'python'}\nimport sys\nfrom tensorboard.main import run_main\n"
                        "if __name__ == '__main__':\n    sys.exit(run_main())\n")
    launcher.chmod(0o755)
    _seed_test_env(repo)
    port = _free_port()
    log = open(tmp_path / "demo.log", "wb")
    env = dict(_env(), PORT=str(port))
    # as the README says; its own session, so the whole demo (bash exec's TensorBoard) is stopped below
    demo = subprocess.Popen(["bash", "scripts/demo.sh"], cwd=repo, env=env, stdin=subprocess.DEVNULL,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 300
        while True:
            try:
                if _get(base + ENTRY, timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            if demo.poll() is not None or time.time() > deadline:
                pytest.fail("the demo did not serve the tab:\n" + (tmp_path / "demo.log").read_text(errors="replace")[-4000:])
            time.sleep(0.5)
        _tab_loads(base)
        demo_env = _tree(repo / ".venv")
        assert any("tb_footprint_plugin" in p and p.endswith("index.js") for p in demo_env), "the demo's venv has no installed tab"

        p = subprocess.run(["bash", "scripts/test.sh", "--install-only"], cwd=repo, env=_env(), stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
        assert "test environment ready" in p.stdout
        # the install went into the test environment, the project itself editable from the copy
        finder = list((repo / ".venv-test").glob("lib/python*/site-packages/__editable__*tb_footprint_plugin*"))
        assert finder, "the install step did not install the project into ./.venv-test"

        assert demo.poll() is None, "the demo stopped during the install step"
        assert _tree(repo / ".venv") == demo_env, "the test command's install step changed the demo's ./.venv"
        _tab_loads(base)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGTERM)
            try:
                demo.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(demo.pid, signal.SIGKILL)
                demo.wait()
        log.close()
        # two environments (~300 MB): not left behind in pytest's kept temporary folders
        shutil.rmtree(repo, ignore_errors=True)
