"""``files.matches`` (does this path hold exactly these bytes?) never reads through a link: a name
planted as a link whose own size (the length of its target's path) equals the file's size, pointing
at a file outside the logdir that holds exactly the bytes, was taken for the file itself (its size
read with ``lstat``, its bytes through the link). The swap's check of a new name, a restore's and a
recovery's "already in place" all ask it: such a link was kept where the file belonged (rule 4:
nothing followed outside the logdir, whatever the names on disk say)."""
import hashlib
import os

from tb_footprint_plugin.engine import placement
from tb_footprint_plugin.storage.files import matches


def _planted(tmp_path):
    """(a link at ``logs/run/f``, the sha and size of the bytes its target outside holds), the
    link's own size made equal to theirs."""
    outside = tmp_path / "outside"
    outside.mkdir()
    target = str(outside / "x")
    data = b"z" * len(target)  # a link's size is its target's length: made equal to the bytes'
    with open(target, "wb") as f:
        f.write(data)
    run = tmp_path / "logs" / "run"
    run.mkdir(parents=True)
    link = run / "f"
    os.symlink(target, link)
    assert os.lstat(link).st_size == len(data)
    return str(link), hashlib.sha256(data).hexdigest(), len(data)


def test_a_link_is_never_the_file_it_names(tmp_path):
    link, sha, size = _planted(tmp_path)
    assert not matches(link, sha, size)
    assert not placement.holds_whole(link, {"sha256": sha, "size": size})


def test_a_regular_file_with_the_bytes_matches(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"hello")
    assert matches(str(p), hashlib.sha256(b"hello").hexdigest(), 5)
    assert not matches(str(p), hashlib.sha256(b"hellO").hexdigest(), 5)
    assert not matches(str(p), hashlib.sha256(b"hello").hexdigest(), 6)
    assert not matches(str(tmp_path / "missing"), hashlib.sha256(b"").hexdigest(), 0)
