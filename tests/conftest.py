"""Shared test fixtures: the real writer fixtures vendored in tests/fixtures/real (read-only) and copies of them."""
import hashlib
import os
import shutil
from pathlib import Path

import pytest

# Real object-store servers on loopback (moto, gcp-storage-emulator, Azurite), started on first use.
from objstore_servers import bucket, objstore_pool, s3_bucket  # noqa: F401,E402

REPO = Path(__file__).resolve().parents[1]

# Scan caches of logdirs nobody reduced go to the user's cache directory: the suite's go to a
# folder of its own (inherited by every tensorboard / tb-footprint subprocess), never to ~/.cache.
if "TB_FOOTPRINT_TEST_CACHE" not in os.environ:
    import tempfile

    os.environ["TB_FOOTPRINT_TEST_CACHE"] = os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="tbfp-cache-")
#: Real writers' logs, vendored so that a fresh clone tests against them (see its README.md).
REAL_FIXTURES = REPO / "tests" / "fixtures" / "real"
REAL_LOGDIRS = ["tf/keras_profiled", "tf/summary_mix", "jax/profiled", "viewed/jax_profiled",
                "torch/profiled", "torch/profiled_gz"]


def real(name: str) -> Path:
    """A vendored real-writer fixture; missing data fails the test (a skip would hide it)."""
    p = REAL_FIXTURES / name
    if not p.exists():
        pytest.fail(f"real fixture {name} is missing: {p} (see tests/fixtures/real/README.md)", pytrace=False)
    return p


def real_event_files() -> list:
    """Every vendored real event file; fails when there are none."""
    files = sorted(p for p in REAL_FIXTURES.rglob("*tfevents*") if p.is_file())
    if not files:
        pytest.fail(f"no real event files under {REAL_FIXTURES} (see tests/fixtures/real/README.md)", pytrace=False)
    return files


def copy_real(name: str, dest: Path, age_s: float = 3600.0) -> Path:
    """Copy a real fixture logdir and age its mtimes so it is not an 'active' run."""
    src = real(name)
    shutil.copytree(src, dest, symlinks=True)
    os.chmod(dest, 0o755)
    old = os.path.getmtime(src) - age_s if age_s else None
    for root, dirs, files in os.walk(dest):
        for n in dirs:
            os.chmod(os.path.join(root, n), 0o755)
        for n in files:
            p = os.path.join(root, n)
            os.chmod(p, 0o644)
            if old:
                os.utime(p, (old, old))
    return dest


def tree_hashes(root: Path) -> dict:
    """rel path -> sha256 (files), 'link:<target>' (symlinks), 'dir' (directories)."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for d in dirs:
            p = os.path.join(dirpath, d)
            out[os.path.relpath(p, root)] = f"link:{os.readlink(p)}" if os.path.islink(p) else "dir"
        for n in files:
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = f"link:{os.readlink(p)}"
            else:
                with open(p, "rb") as f:
                    out[rel] = hashlib.sha256(f.read()).hexdigest()
    return out


def user_files(root) -> dict:
    """``tree_hashes`` of a logdir without the tool's own state folder (``.tb-footprint*``)."""
    return {k: v for k, v in tree_hashes(root).items() if not k.startswith(".tb-footprint")}


@pytest.fixture
def disarm_faults():
    """Disarm every failpoint after the test, whatever its outcome (a module that arms them uses it
    for each test: ``pytestmark = pytest.mark.usefixtures("disarm_faults")``)."""
    from tb_footprint_plugin.engine import faults

    yield
    faults.disarm_all()


@pytest.fixture
def real_copy(tmp_path):
    def make(name: str) -> Path:
        return copy_real(name, tmp_path / name.replace("/", "__"))
    return make
