"""The vendored real-writer fixtures are all there, byte for byte as their writers wrote them.

Every real-writer test reads tests/fixtures/real; this checks that a clone holds exactly the files
listed in its SHA256SUMS (nothing missing, nothing altered by a checkout's end-of-line
conversion or an LFS pointer, nothing unlisted) and that its README documents every fixture.
"""
import hashlib

import pytest

from conftest import REAL_FIXTURES, REAL_LOGDIRS

#: Files of the fixture directory that are about the fixtures rather than written by a writer.
OWN_FILES = {"README.md", "SHA256SUMS", ".gitattributes"}


def manifest() -> dict:
    sums = REAL_FIXTURES / "SHA256SUMS"
    if not sums.is_file():
        pytest.fail(f"{sums} is missing: the vendored fixtures cannot be checked", pytrace=False)
    out = {}
    for line in sums.read_text().splitlines():
        digest, rel = line.split("  ", 1)
        out[rel] = digest
    return out


def test_every_listed_fixture_file_is_present_and_unchanged():
    listed = manifest()
    assert len(listed) > 0
    missing = [rel for rel in listed if not (REAL_FIXTURES / rel).is_file()]
    assert not missing, f"vendored fixture files missing under {REAL_FIXTURES}: {missing}"
    changed = [rel for rel, digest in listed.items()
               if hashlib.sha256((REAL_FIXTURES / rel).read_bytes()).hexdigest() != digest]
    assert not changed, f"vendored fixture files differ from what their writers wrote: {changed}"


def test_no_unlisted_file_and_every_fixture_documented():
    listed = set(manifest())
    on_disk = {p.relative_to(REAL_FIXTURES).as_posix() for p in REAL_FIXTURES.rglob("*") if p.is_file()}
    assert on_disk - OWN_FILES - listed == set(), "files not listed in SHA256SUMS"
    readme = (REAL_FIXTURES / "README.md").read_text()
    for name in REAL_LOGDIRS:
        assert (REAL_FIXTURES / name).is_dir(), name
        assert any(rel.startswith(name + "/") for rel in listed), name
        assert f"`{name}`" in readme, f"{name} is not described in tests/fixtures/real/README.md"
