"""Review R19 F3: ``Relinks._link`` made the later name (``os.link`` by path), stat'ed it, and on a
mismatch unlinked whatever stood at that name then — with no journal record before it, and no
proof the name still held the link it made. Another user renaming their own file onto that name
in the window had it deleted, its bytes nowhere. Now the link is made of the very inode read and
checked (its open descriptor), and a name not proved the link just made is left to the put-back's
rules (here: the file standing there is kept in the vault, the original put back)."""
import hashlib
import os
import shutil

import tb_footprint_plugin as fp
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding
from conftest import copy_real

TRACE = "vm_25684.1795998065836083456.pt.trace.json"


def _twins(tmp_path):
    logdir = tmp_path / "ld"
    run = copy_real("torch/profiled", logdir / "torch")
    shutil.rmtree(run / "1795998068.7669468")
    a, b = run / TRACE, run / "twin.pt.trace.json"
    os.link(a, b)
    os.utime(run, (os.path.getmtime(a),) * 2)
    rep = fp.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=("python",))
    assert rep.ok, [(o.run, o.status, o.reason) for o in rep.outcomes]
    return logdir, a, b


def test_a_file_renamed_onto_the_new_link_is_not_deleted(tmp_path, monkeypatch):
    logdir, a, b = _twins(tmp_path)
    theirs = tmp_path / "theirs"
    theirs.write_bytes(b"another user's own bytes")
    real_link = os.link
    raced = []

    def link_then_swap(src, dst, *args, **kw):
        real_link(src, dst, *args, **kw)
        name = os.fsdecode(dst)
        if name in (a.name, b.name) and not raced:  # in the window: their file renamed onto the new name
            raced.append((name, os.lstat(theirs).st_ino))
            os.rename(theirs, a.parent / name)

    monkeypatch.setattr(os, "link", link_then_swap)
    outs = fp.restore(str(logdir), "torch")
    monkeypatch.undo()
    assert raced, "the restore made no link: the test raced nothing"
    later = a.parent / raced[0][0]
    theirs_sha = hashlib.sha256(b"another user's own bytes").hexdigest()
    kept = [os.path.join(r, n) for r, _d, names in os.walk(logdir / ".tb-footprint") for n in names if n == theirs_sha]
    assert kept or later.read_bytes() == b"another user's own bytes", \
        "the file renamed onto the link's name was unlinked: its bytes are nowhere"
    out = outs[0]
    assert out.status == "restored", (out.status, out.reason)
    # the original stands at both names, the link not made again said so; nothing else was lost
    assert later.read_bytes() == a.read_bytes() == b.read_bytes() and \
        any(f["code"] == Finding.HARD_LINKED for f in out.findings), out.findings
