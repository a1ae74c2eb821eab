"""The verification's fixed cost is cut without weakening what it compares (issue #28 item 3).

* the route crawl leaves out the routes of a dashboard TensorBoard's own plugins listing shows
  disabled on both sides (``routes.INACTIVE_SKIPPABLE``), and says so on its line; a dashboard
  with data is still crawled;
* a dashboard enabled on one side only is still a difference (the listing is compared), so a
  reduction that drops or adds such data is still caught and rolled back;
* the time-series and images groups, now concurrent, still fetch each blob once per side.
"""
import random
import shutil
from pathlib import Path

import pytest

from tb_footprint_plugin import synth
from tb_footprint_plugin.verify import Expectations, data_server_binary, dashboard, routes

needs_rust = pytest.mark.skipif(data_server_binary() is None, reason="no data server binary")


def _run(run: Path, text: bool = False, steps: int = 60) -> Path:
    """Scalars, a histogram tag, an image every 10 steps; text summaries when asked."""
    rng = random.Random(0)
    png = synth.make_png(8, 8, seed=1)
    run.mkdir(parents=True)
    with synth.EventWriter(str(run)) as w:
        for step in range(steps):
            w.scalar("loss", step, 1.0 / (step + 1))
            w.histogram("layer/weight", step, [rng.gauss(0, 1) for _ in range(50)])
            if step % 10 == 0:
                w.image("sample", step, png, 8, 8)
                if text:
                    w.text("notes", step, f"step {step}")
        path = w.path
    return Path(path)


def _route_check(orig: Path, red: Path, requests: list):
    """``dashboard.route_check`` (Rust, default view) of two runs, every request path noted."""
    real_get = routes._Client.get

    def noting_get(self, path, data=None):
        requests.append(path)
        return real_get(self, path, data)

    readers = dashboard.open_pair(str(orig), str(red), "rust", None, store_all=False, timeout_s=120)
    routes._Client.get = noting_get
    try:
        return dashboard.route_check("rust", readers["before"], readers["after"], Expectations(),
                                     ", default view", heavy_via_provider=True)
    finally:
        routes._Client.get = real_get
        for r in readers.values():
            r.close()


@needs_rust
def test_disabled_dashboards_are_not_crawled_enabled_ones_are(tmp_path):
    orig = _run(tmp_path / "orig").parent
    same = tmp_path / "same"
    shutil.copytree(orig, same)
    asked: list = []
    check = _route_check(orig, same, asked)
    assert check.ok, check.detail
    assert ("not crawled, disabled on both sides in TensorBoard's plugins listing: audio, "
            "custom_scalars, hparams, mesh, pr_curves, text") in check.detail, check.detail
    for plugin in routes.INACTIVE_SKIPPABLE:
        assert not [p for p in asked if p.startswith(f"/data/plugin/{plugin}/")], plugin
    # what the run holds is still crawled, and the listing that decided it is compared
    for route in ("/data/plugins_listing", "/data/plugin/scalars/scalars",
                  "/data/plugin/images/individualImage", "/data/plugin/timeseries/tags",
                  "/data/plugin/graphs/info"):
        assert any(p.startswith(route) for p in asked), route

    with_text = _run(tmp_path / "text", text=True).parent
    copy = tmp_path / "text-copy"
    shutil.copytree(with_text, copy)
    asked = []
    check = _route_check(with_text, copy, asked)
    assert check.ok, check.detail
    assert any(p.startswith("/data/plugin/text/text?") for p in asked), asked
    assert "text" not in check.detail.split("plugins listing:")[-1].split(", ")


@needs_rust
@pytest.mark.parametrize("direction", ["dropped", "added"])
def test_a_dashboard_enabled_on_one_side_only_fails_the_check(tmp_path, direction):
    """Text summaries dropped by a (planted) wrong reduction, or added: the plugins listing
    differs, so the skip never hides it; the check names the dashboard."""
    with_text = _run(tmp_path / "with", text=True).parent
    without = _run(tmp_path / "without", text=False).parent
    orig, red = (with_text, without) if direction == "dropped" else (without, with_text)
    check = _route_check(orig, red, [])
    assert not check.ok
    assert "/data/plugins_listing" in check.detail and "dashboard text" in check.detail, check.detail
    assert ("no longer enabled" if direction == "dropped" else "enabled after reduction") in check.detail


@needs_rust
def test_each_image_blob_is_fetched_once_a_side_by_the_concurrent_groups(tmp_path):
    orig = _run(tmp_path / "orig").parent
    same = tmp_path / "same"
    shutil.copytree(orig, same)
    asked: list = []
    check = _route_check(orig, same, asked)
    assert check.ok, check.detail
    blobs = [p for p in asked if p.startswith(("/data/plugin/images/individualImage",
                                               "/data/plugin/timeseries/imageData"))]
    # 6 images a side (steps 0, 10, ..., 50), each fetched once although both groups point at it
    assert len(blobs) == 12, blobs
    assert "and 12 blobs" in check.detail, check.detail
