"""The tab's before/after reads of a big run's images fetch the samples only (issue #28 item 3:
fixed work a reduce did needlessly): an image summary's blob sequence is its width, its
height, then its samples; the check shows the samples (``compare._samples`` skips the first
two) and the images routes serve only them, yet every shown step's width and height were read
from each side's data server too (two of every three of a one-sample image tag's reads). The
summaries the check shows are the same."""
from pathlib import Path

import pytest

from tb_footprint_plugin import synth
from tb_footprint_plugin.synth.media import make_png
from tb_footprint_plugin.verify import compare, dashboard, data_server_binary

needs_rust = pytest.mark.skipif(data_server_binary() is None, reason="no data server binary")


def _run(run: Path, steps: int = 40, last_seed: int = 0) -> Path:
    run.mkdir(parents=True)
    with synth.EventWriter(str(run)) as w:
        for step in range(steps):
            w.scalar("loss", step, 1.0 / (step + 1))
            seed = last_seed if step == steps - 1 else step % 5
            w.legacy_image("sample", step, make_png(8, 8, seed=seed), 8, 8)
    return run


def _counting(provider, seen: list):
    """``provider`` whose ``read_blob`` notes each key it is asked for."""
    real = provider.read_blob

    def read_blob(ctx=None, *, blob_key):
        seen.append(blob_key)
        return real(ctx, blob_key=blob_key)

    provider.read_blob = read_blob
    return provider


@needs_rust
@pytest.mark.parametrize("last_seed", [0, 3])
def test_the_tabs_image_reads_fetch_the_samples_only(tmp_path, last_seed):
    orig = _run(tmp_path / "orig")
    red = _run(tmp_path / "red", last_seed=last_seed)  # 3: the last shown sample differs
    readers = dashboard.open_pair(str(orig), str(red), "rust", None, store_all=False, timeout_s=120)
    try:
        asked = {side: [] for side in readers}
        for side, r in readers.items():
            _counting(r.provider, asked[side])
            compare._read_for_tab(r)
        views = {side: r.view for side, r in readers.items()}
    finally:
        for r in readers.values():
            r.close()
    for side, v in views.items():
        points = v.plugins["images"]["sample"].points
        assert len(points) == 10, len(points)  # the default view: 10 images a tag
        # one fetch a shown sample, none for the width and height before it
        assert len(asked[side]) == len(set(asked[side])) == len(points), (side, len(asked[side]))
        for _, _, payload in points:
            assert payload[:2] == (None, None) and len(payload) == 3
            assert isinstance(payload[2], str) and len(payload[2]) == 64
    shown = compare._tag_summaries({"rust": (views["before"], views["after"])})["images"]["tags"]["sample"]
    samples = shown["samples"]
    assert [(s["before"], s["after"]) for s in samples] == [(1, 1)] * len(samples)
    assert [s["same"] for s in samples] == [True] * (len(samples) - 1) + [last_seed == 0]
