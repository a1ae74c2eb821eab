"""The tab's before/after histograms of a big run keep whole only the payloads the check draws
(issue 28 item 3, memory): every other point of the Rust default view is held as its sha256,
and the check's summaries are what they were with every payload whole."""
import random
import shutil
from pathlib import Path

import pytest

from tb_footprint_plugin import synth
from tb_footprint_plugin.formats import views
from tb_footprint_plugin.formats.views import TensorPayload
from tb_footprint_plugin.verify import Expectations, compare, dashboard, data_server_binary

needs_rust = pytest.mark.skipif(data_server_binary() is None, reason="no data server binary")


def _run(run: Path, steps: int = 120, changed_at=None) -> Path:
    rng = random.Random(0)
    run.mkdir(parents=True)
    with synth.EventWriter(str(run)) as w:
        for step in range(steps):
            w.scalar("loss", step, 1.0 / (step + 1))
            values = [rng.gauss(0, 1) for _ in range(200)]
            if changed_at is not None and changed_at <= step < steps - 1:
                values[0] += 5.0  # every histogram from ``changed_at`` on but the last
            w.histogram("layer1/weight", step, values)
            w.histogram("layer2/weight", step, [v * 2 for v in values])
    return run


def _full_summaries(orig: Path, red: Path) -> dict:
    """The summaries as they were made: every payload of the default view whole."""
    readers = dashboard.open_pair(str(orig), str(red), "rust", None, store_all=False, timeout_s=120)
    try:
        for r in readers.values():
            for plugin, kind, workers in compare._TAB_KINDS:
                views.read_kind(r.view, r.provider, views.request_context(), plugin, kind, {}, workers)
        pair = (readers["before"].view, readers["after"].view)
    finally:
        for r in readers.values():
            r.close()
    return compare._tag_summaries({"rust": pair})


@needs_rust
@pytest.mark.parametrize("changed_at", [None, 60])
def test_the_tab_keeps_two_whole_payloads_a_tag_and_the_same_summaries(tmp_path, changed_at):
    orig = _run(tmp_path / "orig")
    red = _run(tmp_path / "red", changed_at=changed_at)
    (v0, v1), _ = compare._rust_side(str(orig), str(red), Expectations(), 120, False)
    for v in (v0, v1):
        tags = v.plugins["histograms"]
        assert set(tags) == {"layer1/weight", "layer2/weight"}
        for tag in tags.values():
            whole = [p for p in tag.points if isinstance(p[2], TensorPayload)]
            assert len(tag.points) > 50 and 1 <= len(whole) <= 2, (len(tag.points), len(whole))
            assert tag.points[-1] in whole
            assert all(isinstance(p[2], compare.PayloadDigest) for p in tag.points if p not in whole)
    got = compare._tag_summaries({"rust": (v0, v1)})
    assert got == _full_summaries(orig, red)
    same = got["histograms"]["tags"]["layer1/weight"]["same_shown"]
    assert same is (changed_at is None)
    assert got["histograms"]["tags"]["layer1/weight"]["distribution"]["before"]


def test_a_digest_equals_only_the_same_payload():
    a = TensorPayload("<f8", (2, 3), bytes(range(48)))
    b = TensorPayload("<f8", (2, 3), bytes(range(1, 49)))
    assert compare._same_payload(a, compare._digested(a))
    assert compare._same_payload(compare._digested(a), a)
    assert not compare._same_payload(compare._digested(a), b)
    assert not compare._same_payload(a, compare._digested(b))
    assert compare._digested(a) != a and compare._digested(1.5) == 1.5


@needs_rust
def test_a_verification_result_converts_to_what_asdict_made_without_copying(tmp_path):
    """``VerificationResult.to_dict`` hands its plain fields over instead of deep-copying them
    (a fixed cost of every verification): the dict is the one ``dataclasses.asdict`` made."""
    import dataclasses
    import json

    orig = _run(tmp_path / "orig")
    red = _run(tmp_path / "red", changed_at=60)
    res = compare.verify_reduction(str(orig), str(red), Expectations(), full_read_bytes=0)
    assert res.tag_summaries and res.scalar_series and res.checks
    want = dataclasses.asdict(res)
    want["duration_s"] = round(res.duration_s, 3)
    got = res.to_dict()
    assert got == want and list(got) == list(want)
    assert json.dumps(got, sort_keys=False) == json.dumps(want, sort_keys=False)
    assert all(type(c) is dict for c in got["checks"])
    # handed over, not copied
    assert got["tag_summaries"] is res.tag_summaries and got["scalar_series"] is res.scalar_series
