"""``verify`` fails, naming the file, when a damaged piece of the operation log may hide
manifests (review R22 F2).

Both copies of a sealed piece (``oplog/segments/X.zst`` and ``oplog/twins/X.zst``) damaged: the
manifests it held are out of sight, so ``status`` names it ``damaged_line`` and ``restore --all``
exits 1 ``restore_blocked``. ``verify`` exited 0 listing only the reductions it could read
(or "no kept reductions to verify" when every manifest was in that piece): it now carries the
damage as a failed row (code ``damaged_line``, ``path`` the piece), prints it naming the piece,
and exits 1; with nothing damaged it stays 0 with no such row. Every verb runs the real CLI.
"""
import json
import shutil
from pathlib import Path

import pytest

from conftest import copy_real
from helpers_cli import run_cli as cli
from tb_footprint_plugin.engine import oplog
from tb_footprint_plugin.storage.paths import state_dir


def _runs(root: Path) -> Path:
    """A logdir with runs ``a`` and ``b`` (each with a profile the archive policy removes)."""
    src = copy_real("tf/keras_profiled", root / "src")
    logdir = root / "logdir"
    for run in ("a", "b"):
        shutil.copytree(src / "train", logdir / run, copy_function=shutil.copy2)
    with open(next((logdir / "b").rglob("*.xplane.pb")), "ab") as f:
        f.write(b"b's own bytes")
    return logdir


def _pieces(logdir: Path) -> list:
    return sorted(Path(oplog.segments_dir(state_dir(str(logdir)))).glob("*" + oplog.SEALED_SUFFIX))


def _reduce(logdir: Path, *runs: str) -> None:
    """One reduce process of ``runs`` (its operation log's piece sealed at its end)."""
    p = cli("reduce", logdir, *runs, "--quiet-period", "0", "--verify", "python", "--yes")
    assert p.returncode == 0, p.stdout + p.stderr


def _damage_both_copies(piece: Path) -> None:
    for copy in (piece, Path(oplog.twins_dir(str(piece.parents[2]))) / piece.name):  # the vault's root
        raw = bytearray(copy.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        copy.write_bytes(bytes(raw))


def _verify(logdir: Path):
    text = cli("verify", logdir, "--verify", "python")
    js = cli("verify", logdir, "--verify", "python", "--json")
    return text, js, json.loads(js.stdout)


@pytest.fixture
def two_pieces(tmp_path):
    """(logdir, the first piece: a's manifest) after two reduce processes, one run each."""
    logdir = _runs(tmp_path)
    _reduce(logdir, "a")
    (first,) = _pieces(logdir)
    _reduce(logdir, "b")
    assert len(_pieces(logdir)) == 2
    return logdir, first


def test_undamaged_state_verifies_with_exit_0(two_pieces):
    logdir, _first = two_pieces
    text, js, rows = _verify(logdir)
    assert text.returncode == 0 and js.returncode == 0, text.stdout + text.stderr
    assert sorted(r["run"] for r in rows) == ["a", "b"] and all(r["ok"] for r in rows), rows
    assert not any(r.get("code") for r in rows), rows
    assert "damaged_line" not in text.stdout


def test_a_damaged_piece_beside_an_intact_one_fails_verify_naming_it(two_pieces):
    logdir, first = two_pieces
    _damage_both_copies(first)
    st = cli("status", logdir)
    assert "[damaged_line]" in st.stdout and str(first) in st.stdout, st.stdout  # what status says
    text, js, rows = _verify(logdir)
    assert text.returncode == 1 and js.returncode == 1, text.stdout + text.stderr
    # the readable reduction is still checked, and passes
    assert [r["ok"] for r in rows if r["run"] == "b"] == [True], rows
    damaged = [r for r in rows if r.get("code") == "damaged_line"]
    assert damaged and all(r["path"] == str(first) and not r["ok"] and r["checked"] for r in damaged), rows
    assert "✗ (vault) (op -) [damaged_line]" in text.stdout, text.stdout
    assert str(first) in text.stdout, text.stdout
    # the runs named: the hidden one is that damage (exit 1), no usage error; the damage said once
    named = cli("verify", logdir, "a", "b", "--verify", "python", "--json")
    assert named.returncode == 1, named.stdout + named.stderr
    rows_named = json.loads(named.stdout)
    assert [r["ok"] for r in rows_named if r["run"] == "b"] == [True], rows_named
    assert [r for r in rows_named if r.get("code") == "damaged_line"] == damaged, rows_named
    alone = cli("verify", logdir, "a", "--verify", "python")
    assert alone.returncode == 1 and str(first) in alone.stdout and "[damaged_line]" in alone.stdout, \
        alone.stdout + alone.stderr


def test_every_manifest_in_the_damaged_piece_is_no_nothing_to_verify(tmp_path):
    """One reduce process of both runs: its one piece, both copies damaged, held every manifest."""
    logdir = _runs(tmp_path)
    _reduce(logdir, "a", "b")
    (piece,) = _pieces(logdir)
    _damage_both_copies(piece)
    text, js, rows = _verify(logdir)
    assert text.returncode == 1 and js.returncode == 1, text.stdout + text.stderr
    assert "no kept reductions to verify" not in text.stdout
    assert str(piece) in text.stdout and "[damaged_line]" in text.stdout, text.stdout
    assert [(r["code"], r["path"], r["ok"]) for r in rows] == [("damaged_line", str(piece), False)], rows


# --- a bucket logdir: its manifests are objects (no operation log); one damaged hides its run ---
def test_bucket_run_whose_manifest_object_is_damaged_is_that_damage_not_a_usage_error(s3_bucket, tmp_path):
    """A bucket's plain ``verify`` already fails naming a damaged manifest object
    (tests/test_objstore_state.py); the run it hid, named, was "has no kept reduction" (exit 2).
    Now: exit 1 naming the object's URL, with the code ``manifest_damaged`` in the JSON."""
    from test_objstore import _write_rewrite_logdir
    from test_objstore_state import GARBAGE, _two_reductions
    from tb_footprint_plugin.storage.remote import RemoteFS

    url, _before, damaged_op, _intact_op = _two_reductions(s3_bucket, _write_rewrite_logdir(tmp_path / "logs"))
    key = f".tb-footprint/manifests/{damaged_op}.json"
    s3_bucket.fs.pipe_file(s3_bucket.key("logs/" + key), GARBAGE)
    where = RemoteFS(url).url_of(key)
    text = cli("verify", url, "torch/resnet")
    assert text.returncode == 1 and where in text.stdout and "[manifest_damaged]" in text.stdout, \
        text.stdout + text.stderr
    js = cli("verify", url, "torch/resnet", "--json")
    assert js.returncode == 1, js.stdout + js.stderr
    assert [r["code"] for r in json.loads(js.stdout)] == ["manifest_damaged"], js.stdout
    # a run that never had a reduction is still a usage error where nothing is damaged
    s3_bucket.fs.rm(s3_bucket.key("logs/" + key))
    assert cli("verify", url, "torch/resnet").returncode == 2
