"""Review R12: ``vaults.json`` (the state's index of vaults outside it) was read with a plain
``open``: a FIFO planted there hung every verb that reads the index (status, restore, the tab),
and a link was followed out of the state folder. It is now read as the untrusted file it is: a
regular file only, never through a link, its size capped."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = "import sys; from tb_footprint_plugin.storage.paths import recorded_vaults; print(recorded_vaults(sys.argv[1]))"


def _vault(tmp_path):
    v = tmp_path / "vault"
    (v / "ops").mkdir(parents=True)
    os.chmod(v, 0o700)
    return str(v)


def _read(state):
    p = subprocess.run([sys.executable, "-c", PROBE, str(state)], capture_output=True, text=True, timeout=30,
                       cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_a_fifo_as_the_vault_index_is_not_waited_on(tmp_path):
    state = tmp_path / "logs" / ".tb-footprint"
    state.mkdir(parents=True)
    os.mkfifo(state / "vaults.json")
    assert _read(state) == "[]"  # before: blocked in open() until the 30 s timeout


def test_a_link_as_the_vault_index_is_not_followed(tmp_path):
    state = tmp_path / "logs" / ".tb-footprint"
    state.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps([_vault(tmp_path)]))
    os.symlink(elsewhere, state / "vaults.json")
    assert _read(state) == "[]"


def test_a_plain_vault_index_still_reads(tmp_path):
    state = tmp_path / "logs" / ".tb-footprint"
    state.mkdir(parents=True)
    v = _vault(tmp_path)
    (state / "vaults.json").write_text(json.dumps([v]))
    assert _read(state) == repr([v])
