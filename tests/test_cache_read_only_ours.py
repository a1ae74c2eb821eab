"""A cache (scan, selection, digests) is read only when it and its folder are ours: one rule for
the three (``storage.ours_read``). Review R16 L1: the scan cache was read from a folder and a file
of another uid (root started with another user's HOME or XDG_CACHE_HOME) and its planted stats
were believed by the scan, where the two other caches of the same folder refused that folder.

"Not ours" is made as another user would leave it: owned by uid 4242 when the test runs as root,
else writable by group and others (the rule refuses both)."""
import glob
import os

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.scan import digests, selcache

from test_retire_holds_nested_state import _run

OTHER_UID = 4242


def _make_not_ours(path: str) -> None:
    if os.geteuid() == 0:
        os.chown(path, OTHER_UID, OTHER_UID)
    else:
        os.chmod(path, 0o777 if os.path.isdir(path) else 0o666)


def _lie(cache: str) -> None:
    """Move 60 bytes of the run's file header to its scalars in the scan cache, as its planter
    would: the sizes still add up to the file's (a lie the scan cannot tell by its sums)."""
    with open(cache, "rb") as f:
        raw = f.read()
    lied = raw.replace(b'"fixed":{"file_version":{"bytes":78', b'"fixed":{"file_version":{"bytes":18', 1)
    lied = lied.replace(b'"loss":{"bytes":60', b'"loss":{"bytes":120', 1)
    assert lied.count(b'"bytes":18') == 1 and lied.count(b'"bytes":120') == 1, raw[:600]
    with open(cache, "wb") as f:
        f.write(lied)


def _figures(logs) -> dict:
    """What a scan (writing no cache) says of ``logs``: its figures, and apart (``how``) when it
    ran and how many files it took from the cache."""
    d = api.scan(str(logs), write_cache=False).to_dict()
    d["how"] = {k: d.pop(k) for k in ("scanned_at", "files_cached", "files_read")}
    return d


@pytest.fixture
def scanned(tmp_path, monkeypatch):
    """A logdir scanned once: its scan cache written in the user's cache folder (no state folder)."""
    logs = tmp_path / "logs"
    _run(logs / "r1")
    cache_home = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
    assert api.scan(str(logs)).runs  # writes the cache
    honest = _figures(logs)
    assert honest.pop("how")["files_cached"] == 1
    (cache,) = glob.glob(str(cache_home / "tb-footprint" / "*" / "scan-cache.json"))
    _lie(cache)
    return logs, cache, honest


def test_a_scan_cache_of_ours_is_believed_so_a_planted_figure_would_show(scanned):
    """The control: the lie below is one the scan takes from a cache it reads."""
    logs, _cache, honest = scanned
    got = _figures(logs)
    assert got.pop("how")["files_cached"] == 1 and got != honest


@pytest.mark.parametrize("whose", ["folder", "file"])
def test_a_scan_cache_another_user_could_write_is_never_read(scanned, whose):
    logs, cache, honest = scanned
    _make_not_ours(os.path.dirname(cache) if whose == "folder" else cache)
    got = _figures(logs)
    assert got.pop("how")["files_cached"] == 0, "a cache not ours was read"
    assert got == honest, \
        f"the scan took stats from a cache whose {whose} is not ours"


@pytest.mark.parametrize("whose", ["folder", "file", "neither"])
def test_the_digest_table_is_read_only_from_a_file_and_folder_of_ours(tmp_path, whose):
    folder = str(tmp_path / "cache")
    key = b"k" * 16
    cache = digests.DigestCache(folder)
    cache.put(key, "ab" * 32)
    assert cache.save() is None
    if whose != "neither":
        _make_not_ours(folder if whose == "folder" else os.path.join(folder, digests.DIGESTS_NAME))
    got = digests.DigestCache(folder).get(key)
    assert got == (("ab" * 32) if whose == "neither" else None), got


@pytest.mark.parametrize("whose", ["folder", "file", "neither"])
def test_the_selection_cache_is_read_only_from_a_file_and_folder_of_ours(tmp_path, whose):
    folder = str(tmp_path / "cache")
    cache = selcache.SelectionCache(folder)
    cache.put("run", "key", {"kept": 1})
    assert cache.save() is None
    if whose != "neither":
        _make_not_ours(folder if whose == "folder" else os.path.join(folder, selcache.SELCACHE_NAME))
    got = selcache.SelectionCache(folder).get("run", "key")
    assert got == ({"kept": 1} if whose == "neither" else None), got
