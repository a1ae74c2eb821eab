"""The route crawl's first requests import nothing: ``routes.prewarm`` made those first uses
beside the caller's other work (issue #28 item 3, fixed cost), and the crawl still tells a
changed image apart.

Measured before: the first crawl of a process imported werkzeug's ``idna`` codec and PIL's
image plugins (its first ``Image.open``, in the images route's MIME detection) while up to
``routes.BLOB_WORKERS`` blob fetches waited on the import lock (0.05-0.07 s of a 20 MB reduce's
route crawl). Each check runs in an interpreter of its own: another test may have imported
them already in this one.
"""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tb_footprint_plugin import synth
from tb_footprint_plugin.verify import data_server_binary

needs_rust = pytest.mark.skipif(data_server_binary() is None, reason="no data server binary")

REPO = Path(__file__).resolve().parents[1]


def _run(run: Path, png_seed: int = 1, changed_step: int = -1) -> None:
    """Scalars, a histogram tag, an image every 10 steps (the one at ``changed_step`` drawn
    from another seed)."""
    run.mkdir(parents=True)
    with synth.EventWriter(str(run)) as w:
        for step in range(40):
            w.scalar("loss", step, 1.0 / (step + 1))
            w.histogram("layer/weight", step, [((step * 7 + i) % 13) / 13 for i in range(30)])
            if step % 10 == 0:
                seed = png_seed + 1 if step == changed_step else png_seed
                w.image("sample", step, synth.make_png(8, 8, seed=seed), 8, 8)


_CRAWL = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {repo!r})
    from tb_footprint_plugin.verify import Expectations, dashboard, routes
    routes.prewarm()
    routes.make_app({orig!r}, None)  # waits for the prewarm's thread
    readers = dashboard.open_pair({orig!r}, {red!r}, "rust", None, store_all=False,
                                  timeout_s=120)
    before = set(sys.modules)
    try:
        check = dashboard.route_check("rust", readers["before"], readers["after"],
                                      Expectations(), ", default view",
                                      heavy_via_provider=True)
    finally:
        for r in readers.values():
            r.close()
    print(json.dumps({{"ok": check.ok, "detail": check.detail,
                      "imported": sorted(set(sys.modules) - before)}}))
""")


def _crawl(orig: Path, red: Path) -> dict:
    import json

    code = _CRAWL.format(repo=str(REPO), orig=str(orig), red=str(red))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=str(REPO))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@needs_rust
def test_the_first_crawl_of_a_process_imports_nothing(tmp_path):
    _run(tmp_path / "orig")
    _run(tmp_path / "red")
    got = _crawl(tmp_path / "orig", tmp_path / "red")
    assert got["ok"], got["detail"]
    assert "images" in got["detail"] and "blobs" in got["detail"], got["detail"]
    assert got["imported"] == [], got["imported"]


@needs_rust
def test_a_changed_image_is_still_a_route_difference(tmp_path):
    _run(tmp_path / "orig")
    _run(tmp_path / "red", changed_step=20)
    got = _crawl(tmp_path / "orig", tmp_path / "red")
    assert not got["ok"], got["detail"]
    assert "/data/plugin/images/" in got["detail"] or "imageData" in got["detail"], got["detail"]
