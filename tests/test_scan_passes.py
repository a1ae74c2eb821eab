"""A reduce's scan keeps its pass over a big event file for the rewrite (``scan.passes``).

The rewrite's selection then classifies the records from what the scan decoded, without
reading the original again (issue 12: a 1 GB run's reduce read it twice before the copy).
These tests check that:

* a reduce whose scan kept the pass never makes the selection's own pass, is verified,
  and leaves no pass behind; a dry run keeps none;
* the selection replayed from a kept pass decides exactly what its own pass decides, and
  hands the verification the same facts (sha256, sizes, CRCs, tag index), on every real
  fixture and on generated torch, restart and TF2 runs;
* a file rewritten in place after the scan with its size and mtime put back (so nothing but
  its bytes tell) is never reduced from the stale pass: the run is not committed and every
  byte of the user's file is as the user left it;
* a record the selection reads back whose CRC is not the one the scan saw stops the
  selection (not taken as unparseable), naming the file and offset;
* a selection whose sha256 is not the backup's is never applied, copied or streamed;
* the store keeps at most ``MAX_RECORDS`` records and a reduce's unused passes are dropped.
"""
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import tree_hashes
from test_verify_handover import BOTH, _age, _histogram_run, _selection_summary, selection_runs

from tb_footprint_plugin import api
from tb_footprint_plugin.scan import eventfile, passes
from tb_footprint_plugin.storage.files import stat_sig
from tb_footprint_plugin.transforms import event_rewrite as er
from tb_footprint_plugin.verify import dashboard, data_server_binary
from tb_footprint_plugin.verify.original import OriginalRun

needs_rust = pytest.mark.skipif(data_server_binary() is None, reason="no data server binary")


def _user_files(root: Path) -> dict:
    return {k: v for k, v in tree_hashes(root).items() if not k.startswith(".tb-footprint")}


def _scan_kept(run: Path) -> None:
    """What a reduce's scan does for each event file of ``run`` (every size kept)."""
    for name in er.event_file_names(str(run)):
        p = os.path.join(run, name)
        eventfile.event_file_stats(p, size=os.path.getsize(p))


@needs_rust
def test_reduce_selects_from_its_scan_without_a_second_pass(tmp_path, monkeypatch):
    logdir = tmp_path / "logdir"
    _histogram_run(logdir / "run")
    _age(logdir)
    monkeypatch.setattr(dashboard, "FULL_READ_BYTES", 0)  # the big-run path
    monkeypatch.setattr(passes, "MIN_BYTES", 0)
    replayed = []
    real_replay = er._RunSelection._replay

    def counting(self, fi, name, path, kept):
        replayed.append(name)
        return real_replay(self, fi, name, path, kept)

    def no_pass(*a, **kw):
        raise AssertionError("the selection read the original again")

    # the dry run runs the rewrite's selection too (plan = outcome), with a pass of its own
    dry = api.reduce_logdir(str(logdir), policy="archive", dry_run=True)
    assert dry.outcomes and passes.held() == 0, "a dry run keeps no pass"
    monkeypatch.setattr(er._RunSelection, "_replay", counting)
    monkeypatch.setattr(er, "ThreadedHashingReader", no_pass)  # only the selection's own pass uses it
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=BOTH)
    out = [o for o in rep.outcomes if o.status != "skipped"]
    assert len(out) == 1 and out[0].status == "verified", [o.to_dict() for o in out]
    assert out[0].verification["ok"], out[0].verification["failed"]
    # the dry run's selection is reused (the selection cache) or the scan's pass replayed once;
    # either way the original was not read again (``no_pass``)
    assert len(replayed) <= 1
    lines = {c["name"]: c["detail"] for c in out[0].verification["checks"]}
    assert "each byte-identical to an original record, in order" in lines["record subsequence"]
    assert passes.held() == 0
    assert out[0].bytes_after < out[0].bytes_before / 2


@needs_rust
@pytest.mark.parametrize("content", [
    {"downsample": "default_view"},
    {"keep_per_tag": {"histograms": 50, "scalars": 20}, "dedupe_graphs": True,
     "strip_run_metadata": True, "strip_large_graph_attrs": True},
], ids=["default_view", "keep_per_tag"])
def test_replayed_selection_decides_as_its_own_pass(tmp_path, monkeypatch, content):
    monkeypatch.setattr(passes, "MIN_BYTES", 0)
    runs = selection_runs(tmp_path)
    rules = er.Rules.from_content(content)
    replays = 0
    for run in runs:
        names = er.event_file_names(str(run))
        own_orig = OriginalRun(str(run))
        own = er.select_run(str(run), rules, names, original=own_orig)
        with passes.retaining() as token:
            _scan_kept(run)
        try:
            kept_orig = OriginalRun(str(run))
            replayed = er.select_run(str(run), rules, names, original=kept_orig)
        finally:
            passes.release(token)
        replays += sum(1 for n in names if n in replayed.facts)
        assert _selection_summary(replayed) == _selection_summary(own), run
        for n in names:
            a, b = own.facts.get(n), replayed.facts.get(n)
            if a is None or a.status != "ok":
                continue  # a damaged file is not kept: the selection made its own pass
            assert (b.sha256, b.stat, b.start) == (a.sha256, a.stat, a.start), (run, n)
            assert b.sizes.tolist() == a.sizes.tolist() and b.crcs.tolist() == a.crcs.tolist()
            assert b.stats.to_dict() == a.stats.to_dict()
        assert kept_orig.index() == own_orig.index(), run
    assert replays >= len(runs)


@needs_rust
def test_in_place_change_after_the_scan_is_never_reduced_from_the_stale_pass(tmp_path, monkeypatch):
    logdir = tmp_path / "logdir"
    path = _histogram_run(logdir / "run")
    _age(logdir)
    monkeypatch.setattr(dashboard, "FULL_READ_BYTES", 0)
    monkeypatch.setattr(passes, "MIN_BYTES", 0)
    real_reduce_run = api.reduce_run
    changed = {}

    def change_then_reduce(*a, **kw):
        # after the plan's scan, before the backup: one byte of a histogram's payload, with
        # the size and mtime put back (the stat signature cannot tell)
        st = os.stat(path)
        with open(path, "r+b") as f:
            f.seek(st.st_size // 2)
            b = f.read(1)
            f.seek(st.st_size // 2)
            f.write(bytes([b[0] ^ 0xFF]))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        changed.update(_user_files(logdir))
        return real_reduce_run(*a, **kw)

    from tb_footprint_plugin.engine import front_local  # where the batch's run looks it up
    monkeypatch.setattr(front_local, "reduce_run", change_then_reduce)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=BOTH)
    out = [o for o in rep.outcomes if o.status != "skipped"]
    assert changed, "the change was made"
    assert len(out) == 1 and out[0].status in ("rolled_back", "failed"), [o.to_dict() for o in out]
    assert "changed" in (out[0].reason or ""), out[0].reason
    assert _user_files(logdir) == changed  # the user's bytes, as the user left them
    assert passes.held() == 0


def test_readback_refuses_a_record_whose_crc_changed(tmp_path, monkeypatch):
    monkeypatch.setattr(passes, "MIN_BYTES", 0)
    run = tmp_path / "run"
    path = _histogram_run(run, steps=40)
    with passes.retaining() as token:
        _scan_kept(run)
    kept = passes.take(str(path), stat_sig(str(path)))
    passes.release(token)
    assert kept is not None and kept.records > 10
    offsets = kept.offsets()
    i = 5
    with open(path, "r+b") as f:
        f.seek(int(offsets[i]) + 20)
        b = f.read(1)
        f.seek(int(offsets[i]) + 20)
        f.write(bytes([b[0] ^ 1]))
    with open(path, "rb") as f:
        back = er._ReadBack(f.fileno(), path.name, offsets, kept.sizes, kept.crcs)
        assert back.payload(i + 1)  # an untouched record reads back
        with pytest.raises(er.RewriteError) as e:
            back.payload(i)
    assert path.name in str(e.value) and f"offset {int(offsets[i])}" in str(e.value)


def test_store_is_bounded_and_a_reduce_drops_what_it_did_not_use(tmp_path, monkeypatch):
    monkeypatch.setattr(passes, "MIN_BYTES", 0)
    a, b = tmp_path / "a", tmp_path / "b"
    _histogram_run(a, steps=60)
    _histogram_run(b, steps=60)
    with passes.retaining() as token:
        _scan_kept(a)
        one = passes.held()
        monkeypatch.setattr(passes, "MAX_RECORDS", 10)  # b's records do not fit any more
        _scan_kept(b)
    assert one == 1 and passes.held() == 1
    passes.release(token)
    assert passes.held() == 0
    # outside a reduce's planning nothing is kept, and a stale signature takes nothing
    _scan_kept(a)
    assert passes.held() == 0
    monkeypatch.setattr(passes, "MAX_RECORDS", 1 << 30)
    with passes.retaining() as token:
        _scan_kept(a)
    name = er.event_file_names(str(a))[0]
    assert passes.take(str(a / name), (0, 0, 0)) is None and passes.held() == 0
    passes.release(token)


def _flip_in_place(path: Path, offset: int) -> None:
    """One byte changed, with the size and mtime put back (the stat signature cannot tell)."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 1]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_selection_refuses_a_read_back_record_that_changed(tmp_path, monkeypatch):
    """The first record (file_version) needs a full parse, so the replay reads it back: changed
    since the scan, it stops the selection instead of being taken as unparseable."""
    monkeypatch.setattr(passes, "MIN_BYTES", 0)
    run = tmp_path / "run"
    path = _histogram_run(run, steps=40)
    with passes.retaining() as token:
        _scan_kept(run)
    try:
        kept = passes._KEPT[os.path.realpath(path)][1]
        _flip_in_place(path, int(kept.offsets()[0]) + 14)
        rules = er.Rules.from_content({"keep_per_tag": {"scalars": 5}})
        with pytest.raises(er.RewriteError) as e:
            er.select_run(str(run), rules, [path.name])
    finally:
        passes.release(token)
    assert "offset 0 changed since the scan read it" in str(e.value)


def test_copy_refuses_a_selection_of_other_bytes_than_the_backup(tmp_path, monkeypatch):
    """Facts whose sha256 is not the backup's are never used, whether or not the file's stat
    changed since: not for the copy of the kept records, not for a streamed rewrite."""
    monkeypatch.setattr(passes, "MIN_BYTES", 0)
    run = tmp_path / "run"
    path = _histogram_run(run, steps=40)
    with passes.retaining() as token:
        _scan_kept(run)
    rules = er.Rules.from_content({"keep_per_tag": {"scalars": 5}})
    sel = er.select_run(str(run), rules, [path.name])
    passes.release(token)
    facts = sel.facts[path.name]
    backup_sha = facts.sha256[::-1]  # what a backup of changed bytes would hash to
    for touch in (False, True):  # same stat (copy path), changed stat (streaming path)
        if touch:
            os.utime(path, ns=(1, 1))
        dst = tmp_path / f"out-{touch}"
        with pytest.raises(er.RewriteError) as e:
            er.rewrite_event_file(str(path), str(dst), sel.masks[path.name], sel.codes[path.name],
                                  sel.code_names, backup_sha, facts=facts)
        assert "changed since it was analysed" in str(e.value)
        assert not dst.exists() or dst.stat().st_size == 0


@needs_rust
def test_no_python_child_is_left_when_the_original_reader_cannot_start(tmp_path, monkeypatch):
    """The Python loader's child starts with the original's Rust load; a failure there (or
    anywhere after) leaves no child behind."""
    from tb_footprint_plugin.verify import pyside, readers

    logdir = tmp_path / "logdir"
    _histogram_run(logdir / "run", steps=200)
    _age(logdir)
    monkeypatch.setattr(dashboard, "FULL_READ_BYTES", 0)
    started = []
    real_start = pyside.PythonSide.start

    def tracking(self):
        started.append(self)
        return real_start(self)

    def broken(self, *a, **kw):
        raise OSError(28, "No space left on device (planted)")

    monkeypatch.setattr(pyside.PythonSide, "start", tracking)
    monkeypatch.setattr(readers.Reader, "__init__", broken)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=BOTH)
    out = [o for o in rep.outcomes if o.status != "skipped"]
    assert len(out) == 1 and out[0].status in ("rolled_back", "failed"), [o.to_dict() for o in out]
    assert all(s._proc is None or s._proc.poll() is not None for s in started), "a child is left"


def _kept_pass(run: Path):
    """The pass a reduce's scan keeps over ``run``'s only event file (taken from the store)."""
    with passes.retaining() as token:
        _scan_kept(run)
    try:
        name = er.event_file_names(str(run))[0]
        path = str(run / name)
        return path, passes.take(path, stat_sig(path))
    finally:
        passes.release(token)


def test_pass_keeps_the_small_records_bytes_as_in_the_file(tmp_path, monkeypatch):
    from tb_footprint_plugin.scan import tfrecord

    monkeypatch.setattr(passes, "MIN_BYTES", 0)
    _histogram_run(tmp_path / "run", steps=300)
    path, kept = _kept_pass(tmp_path / "run")
    frames = list(tfrecord.RecordReader(path, raw=True))
    small = [f for f in frames if len(f) <= passes.SMALL_FRAME]
    assert 300 <= len(small) < len(frames)  # the scalars, not the histograms or images
    assert kept.small == b"".join(small) and kept.small_upto == len(frames)
    pos = passes.small_offsets(kept.sizes, kept.small_upto)
    for i, f in enumerate(frames):
        if len(f) <= passes.SMALL_FRAME:
            assert kept.small[pos[i]:pos[i] + len(f)] == f, i
        else:
            assert pos[i] == -1, i
    # over the byte budget, the pass keeps the records that fit and says up to where
    monkeypatch.setattr(passes, "MAX_SMALL_BYTES", len(kept.small) // 2)
    _, half = _kept_pass(tmp_path / "run")
    assert 0 < half.small_upto < len(frames) and len(half.small) <= len(kept.small) // 2
    assert half.small == b"".join(f for f in frames[:half.small_upto]
                                  if len(f) <= passes.SMALL_FRAME)
    hp = passes.small_offsets(half.sizes, half.small_upto)
    assert (hp[half.small_upto:] == -1).all() and (hp[:half.small_upto] == pos[:half.small_upto]).all()


@needs_rust
def test_copy_from_the_kept_small_records_writes_what_the_file_holds(tmp_path, monkeypatch):
    """The copy of the kept records takes scalars from the pass's bytes and writes the file the
    streamed copy writes; nothing small is read from the file again."""
    monkeypatch.setattr(passes, "MIN_BYTES", 0)
    run = tmp_path / "run"
    _histogram_run(run, steps=300)
    path, kept = _kept_pass(run)
    rules = er.Rules.from_content({"downsample": "default_view"})
    names = er.event_file_names(str(run))
    with passes.retaining() as token:
        _scan_kept(run)
        sel = er.select_run(str(run), rules, names, original=OriginalRun(str(run)))
    passes.release(token)
    name = names[0]
    facts = sel.facts[name]
    assert facts.small == kept.small and facts.small_upto == kept.small_upto
    mask = sel.masks[name]
    streamed = er.rewrite_event_file(path, str(tmp_path / "streamed"), mask, expected_sha=None)
    reads = []
    real_pread = os.pread
    monkeypatch.setattr(er.os, "pread", lambda fd, n, at: reads.append(n) or real_pread(fd, n, at))
    copied = er.rewrite_event_file(path, str(tmp_path / "copied"), mask,
                                   expected_sha=facts.sha256, facts=facts)
    assert (tmp_path / "copied").read_bytes() == (tmp_path / "streamed").read_bytes()
    assert copied["size"] == streamed["size"]
    assert reads and min(reads) > passes.SMALL_FRAME, "a small record was read from the file"
    # without the backup's sha256 to bind them, the pass's bytes are not used
    reads.clear()
    er.rewrite_event_file(path, str(tmp_path / "unbound"), mask, facts=facts)
    assert (tmp_path / "unbound").read_bytes() == (tmp_path / "streamed").read_bytes()
    assert any(n <= passes.SMALL_FRAME for n in reads)


def test_subsequence_compares_small_records_with_the_pass_bytes(tmp_path, monkeypatch):
    """The record-subsequence check finds a changed scalar whose original it takes from the
    pass's bytes, as it does reading the original file, and agrees with the streamed check."""
    from test_verify_handover import _rewrite

    from tb_footprint_plugin.scan import tfrecord
    from tb_footprint_plugin.verify import records
    from tb_footprint_plugin.verify.original import FileFacts

    monkeypatch.setattr(passes, "MIN_BYTES", 0)
    orig = tmp_path / "orig"
    _histogram_run(orig, steps=300)
    path, kept = _kept_pass(orig)
    facts = {Path(path).name: FileFacts(Path(path).name, kept.sha256, kept.stat, kept.sizes,
                                        kept.crcs, kept.stats, "ok", kept.start, kept.small,
                                        kept.small_upto)}
    datas = [r.data for r in tfrecord.RecordReader(path)]
    scalars = [i for i, d in enumerate(datas) if len(d) + 16 <= passes.SMALL_FRAME]
    s = scalars[len(scalars) // 2]

    def flip(recs, i=s):
        return recs[:i] + [recs[i][:-1] + bytes([recs[i][-1] ^ 1])] + recs[i + 1:]

    cases = {"every third": (lambda recs: recs[::3], True),
             "scalars only": (lambda recs: [recs[i] for i in scalars], True),
             "a scalar changed": (flip, False),
             "a scalar changed, others dropped": (lambda recs: flip(recs)[s % 3::3], False)}
    seen_small = []
    real = passes.small_offsets
    monkeypatch.setattr(passes, "small_offsets",
                        lambda *a: seen_small.append(1) or real(*a))
    for label, (keep, ok) in cases.items():
        red = tmp_path / label.replace(" ", "_").replace(",", "")
        _rewrite(Path(path), red / Path(path).name, keep)
        fast = records.records_subsequence_indexed(str(orig), str(red), facts)
        slow = records.records_subsequence(str(orig), str(red))
        assert fast is not None and fast[0] is ok and slow[0] is ok, (label, fast, slow)
    assert seen_small, "the pass's small bytes were not used"


def test_gather_small_takes_exactly_the_small_records_bytes():
    """Over many gather steps (more records than ``_GATHER``), big records interleaved."""
    import random

    rng = random.Random(3)
    sizes = [rng.choice([16, 40, 300, passes.SMALL_FRAME, passes.SMALL_FRAME + 1, 5000])
             for _ in range(5 * passes._GATHER + 7)]
    buf = bytes(rng.getrandbits(8) for _ in range(sum(sizes) + 100))
    starts = np.cumsum([50] + sizes[:-1]).astype(np.int64)
    sz = np.array(sizes, dtype=np.int64)
    want = b"".join(buf[s:s + n] for s, n in zip(starts.tolist(), sizes)
                    if n <= passes.SMALL_FRAME)
    assert passes.gather_small(buf, starts, sz) == want
    assert passes.gather_small(buf, starts[sz > passes.SMALL_FRAME],
                               sz[sz > passes.SMALL_FRAME]) == b""


def test_selection_own_pass_keeps_small_bytes_for_its_reduce_only(tmp_path, monkeypatch):
    """Without a kept scan pass (a scan-cache hit), the selection's own pass keeps the small
    records' bytes as the scan's would, for this reduce's ``original`` only: without one, or
    once it is closed, no record bytes stay (selections are cached)."""
    from tb_footprint_plugin.scan import tfrecord

    run = tmp_path / "run"
    _histogram_run(run, steps=300)
    names = er.event_file_names(str(run))
    frames = list(tfrecord.RecordReader(str(run / names[0]), raw=True))
    want = b"".join(f for f in frames if len(f) <= passes.SMALL_FRAME)
    rules = er.Rules.from_content({"downsample": "default_view"})
    original = OriginalRun(str(run))
    sel = er.select_run(str(run), rules, names, original=original)  # no retaining scope
    facts = sel.facts[names[0]]
    assert facts.small == want and facts.small_upto == len(frames)
    assert original.files[names[0]] is facts
    alone = er.select_run(str(run), rules, names)
    assert alone.facts[names[0]].small == b""
    # a second selection for the same reduce (its files changed meanwhile) replaces the facts
    # in ``files``: the first ones are still released
    again = er.select_run(str(run), rules, names, original=original).facts[names[0]]
    assert original.files[names[0]] is again and again.small == want
    original.close()
    for f in (facts, again):
        assert f.small == b"" and f.small_upto == 0 and f.small_view() is None
    # within a budget: the records that fit, and up to where
    monkeypatch.setattr(passes, "MAX_SMALL_BYTES", len(want) // 2)
    half = er.select_run(str(run), rules, names, original=OriginalRun(str(run))).facts[names[0]]
    assert 0 < half.small_upto < len(frames) and 0 < len(half.small) <= len(want) // 2
    assert half.small == b"".join(f for f in frames[:half.small_upto]
                                  if len(f) <= passes.SMALL_FRAME)
