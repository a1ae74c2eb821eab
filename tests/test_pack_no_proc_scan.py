"""A compaction whose backups all go to a pack makes no /proc walk for writers (issue #27 item 5:
~2.5 ms a run of the packed vault's heavy reduce): each pack candidate's read lease under its
lock (``Vault._packable``) is refused while any descriptor on the machine, /proc's included,
writes the inode. A blob a writer holds still stays plain; a blob compressed on its own is still
looked for in /proc (its scan names only those)."""
import hashlib
import os

import tb_footprint_plugin.engine.vault as vm
from tb_footprint_plugin.engine.vault import KEPT_OPEN, PACK_BELOW, PACKED, Vault
from tb_footprint_plugin.storage.openfiles import WriterScan, no_writer_anywhere

OP = "20260101T000000-abcdef"


def _stored(v: Vault, path, data: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    v.store(str(path), sha)
    return sha


def test_packed_blobs_take_no_proc_scan_and_a_held_one_stays_plain(tmp_path, monkeypatch):
    v = Vault(str(tmp_path / ".tb-footprint"))
    v.ensure()
    scanned = []

    def scan(paths):
        scanned.append(list(paths))
        return WriterScan(supported=True)  # /proc sees nobody: only the lease can keep a blob

    monkeypatch.setattr(vm, "find_writers", scan)
    logs = tmp_path / "logs"
    datas = [b"xplane %d " % i * 300 for i in range(3)]
    shas = [_stored(v, logs / f"p{i}.xplane.pb", d) for i, d in enumerate(datas)]
    writer = open(logs / "p1.xplane.pb", "ab")  # a late writer's descriptor on the backup's inode
    try:
        for i in range(3):
            os.unlink(logs / f"p{i}.xplane.pb")  # the swap: the vault's name is the only one left
        assert no_writer_anywhere(v.blob_path(shas[1])) is False
        files = [{"sha256": s, "size": len(d), "path": f"p{i}.xplane.pb"} for i, (s, d) in enumerate(zip(shas, datas))]
        out = v.compact_all(OP, shas, manifest={"files": files})
    finally:
        writer.close()
    assert scanned == []
    assert out == {shas[0]: PACKED, shas[1]: KEPT_OPEN, shas[2]: PACKED}
    assert v.blob_form(shas[1]) == "plain" and v.pending_compactions() == {OP: shas}
    for s, d in zip(shas, datas):
        with v.open_blob(s) as f:
            assert f.read() == d


def test_a_blob_compressed_alone_is_still_scanned_for(tmp_path, monkeypatch):
    v = Vault(str(tmp_path / ".tb-footprint"))
    v.ensure()
    scanned = []
    real = vm.find_writers

    def scan(paths):
        scanned.append(list(paths))
        return real(paths)

    monkeypatch.setattr(vm, "find_writers", scan)
    small, big = b"small profile " * 100, b"large trace line\n" * (PACK_BELOW // 16 + 10)
    s1 = _stored(v, tmp_path / "logs" / "a.xplane.pb", small)
    s2 = _stored(v, tmp_path / "logs" / "b.trace.json", big)
    for n in ("a.xplane.pb", "b.trace.json"):
        os.unlink(tmp_path / "logs" / n)
    files = [{"sha256": s1, "size": len(small), "path": "a.xplane.pb"},
             {"sha256": s2, "size": len(big), "path": "b.trace.json"}]
    out = v.compact_all(OP, [s1, s2], manifest={"files": files})
    assert scanned == [[v.blob_path(s2)]]
    assert out[s1] == PACKED and v.blob_form(s2) == "zst"
