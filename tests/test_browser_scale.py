"""The Footprint tab on a logdir of many runs (#28.4), in real headless Chromium inside a real
TensorBoard: the overview comes from the server's aggregates, the runs table holds one page that
the server sorted and filtered, paging, sorting and the filter are server requests, and the DOM
never holds more than a page of rows.

The logdir has ``N_RUNS`` = 10,000 runs, byte copies of a few template runs (``bench/tab.py``'s
``generate``). 100,000 runs take about 80 s to generate and a cold scan of them several minutes
on a 2-core machine, so the test uses 10,000 and ``python bench/tab.py --runs 100000`` measures
100,000 (the same code paths; the test's bounds hold whatever N, since nothing grows with it).

Why 10,000 (20,000 until r40): the writing, the first scan and the deletion of the logdir each
grow with N (at 20,000, ~70,000 files and folders: the module took ~107 s of a CI worker, its
first scan ~45 s and its teardown 25–50 s), and what the test checks does not need more. N is large enough that the
bounds still mean what they say (``test_n_runs_keeps_the_bounds_meaningful`` pins it): a
response that named every run, its name and nothing else, would be larger than either payload
bound; the map has more folders than tiles, so its "other" cell holds folders; and a page is a
hundredth of the runs.
TensorBoard loads the logdir once, in a child process (``--reload_interval 0 --reload_task
process``), as it would for a user. Screenshots (light and dark) go to /tmp and
test-artifacts/screenshots/scale-*.png.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import time

import pytest
from playwright.sync_api import expect

from test_browser import FRAME, PREFIX, REPO, SHOTS, TensorBoard, browser  # noqa: F401  (browser: a fixture)
from tb_footprint_plugin.plugin.read_routes import MAP_TILES

sys.path.insert(0, os.path.join(REPO, "bench"))
import tab as bench_tab  # noqa: E402  (the bench's fast generator: byte copies of template runs)

N_RUNS = 10_000
#: folders of runs in the logdir (``bench/tab.py``'s sweeps: 100 runs a folder)
GROUPS = N_RUNS // bench_tab.RUNS_PER_GROUP
PAGE = 100
#: the runs page and the overview's JSON, bounded whatever the number of runs
MAX_RUNS_PAYLOAD = bench_tab.MAX_RUNS_PAYLOAD
MAX_SUMMARY_PAYLOAD = bench_tab.MAX_SUMMARY_PAYLOAD
WARM_MS = 1000.0
#: from opening TensorBoard's page to the tab's overview and first page drawn (a loaded machine)
OPEN_S = 20.0


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    root = tmp_path_factory.mktemp("scale") / "logs"
    t0 = time.monotonic()
    total = bench_tab.generate(str(root), N_RUNS)
    took = time.monotonic() - t0
    assert total > 0 and took < 120, took
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def tb(many, tmp_path_factory):
    cache = tmp_path_factory.mktemp("scale-cache")
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(cache)  # the scan cache of this logdir stays in the test's folder
    try:
        t = _TensorBoardLong(many, "--reload_interval", "0", "--reload_task", "process")
    finally:
        if old is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = old
    yield t
    t.stop()


class _TensorBoardLong(TensorBoard):
    """The shared TensorBoard process, waiting up to 10 minutes for the first scan of many runs."""

    def __init__(self, logdir, *extra):
        super(TensorBoard, self).__init__(logdir, *extra)
        status, _, body = self.request("GET", PREFIX + "/summary?wait=600", timeout=660)
        assert status == 200, body[:300]
        # the overview is prepared right after each scan: the first page is served from it
        self.request("GET", PREFIX + "/runs", timeout=120)

    def get(self, path):
        status, _, body = self.request("GET", path, timeout=120)
        return status, body


def _timed(tb, path):
    t0 = time.perf_counter()
    status, body = tb.get(path)
    assert status == 200, (path, status, body[:300])
    return (time.perf_counter() - t0) * 1000.0, body


def test_n_runs_keeps_the_bounds_meaningful():
    """The rule for ``N_RUNS`` (module docstring): every run named, and nothing else, is more than
    either payload bound; more folders than the map's tiles; a page a hundredth of the runs."""
    import json

    every_name = len(json.dumps([bench_tab.run_name(i) for i in range(N_RUNS)]))
    assert every_name > MAX_RUNS_PAYLOAD and every_name > MAX_SUMMARY_PAYLOAD, every_name
    assert GROUPS > MAP_TILES and N_RUNS % bench_tab.RUNS_PER_GROUP == 0
    assert N_RUNS >= 100 * PAGE


def test_routes_answer_a_page_and_bounded_aggregates(tb):
    import json

    ms, body = min((_timed(tb, PREFIX + "/runs") for _ in range(3)), key=lambda x: x[0])
    d = json.loads(body)
    assert d["run_count"] == N_RUNS and d["total"] == N_RUNS
    assert len(d["runs"]) == PAGE and (d["offset"], d["limit"], d["sort"], d["order"]) == (0, PAGE, "size", "desc")
    sizes = [r["total_bytes"] for r in d["runs"]]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == d["max_run_bytes"]
    assert ms < WARM_MS, ms
    assert len(body) <= MAX_RUNS_PAYLOAD, len(body)
    # the map: folders of runs (groups of 100 here), the biggest MAP_TILES - 1, the rest as "other"
    m = d["map"]
    assert m["level"] == "group" and len(m["tiles"]) == MAP_TILES - 1 and m["other"]["runs"] > 0
    assert sum(t["runs"] for t in m["tiles"]) + m["other"]["runs"] == N_RUNS
    ms, body = min((_timed(tb, PREFIX + "/summary") for _ in range(3)), key=lambda x: x[0])
    s = json.loads(body)
    assert "runs" not in s and s["run_count"] == N_RUNS and ms < WARM_MS, ms
    assert len(body) <= MAX_SUMMARY_PAYLOAD, len(body)
    # the header's disk numbers are the library's, measured after the scan
    deadline = time.monotonic() + 120
    while not (s.get("disk") or {}).get("disk_in_use_bytes") and time.monotonic() < deadline:
        time.sleep(1)
        s = json.loads(tb.get(PREFIX + "/summary")[1])
    assert s["disk"]["disk_in_use_bytes"] >= s["total_bytes"] * 0.5
    assert s["disk"]["freed_now_bytes"] == 0 and s["disk"]["freed_after_purge_bytes"] == 0  # nothing reduced yet


def test_tab_draws_one_page_and_pages_sorts_filters_on_the_server(browser, tb):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1100}, color_scheme="light")
    page = ctx.new_page()
    page.set_default_timeout(60000)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    asked = []
    page.on("request", lambda r: asked.append(r.url) if "/data/plugin/footprint/runs" in r.url else None)
    try:
        t0 = time.monotonic()
        page.goto(tb.base + "/#footprint")
        f = page.frame_locator(FRAME)
        f.locator(".row[data-run]").first.wait_for()
        expect(f.locator(".total-bytes")).not_to_have_text("…")
        expect(f.locator(".treemap .tm-run").first).to_be_visible()
        opened = time.monotonic() - t0
        assert opened < OPEN_S, opened
        rows = f.locator(".row[data-run]")
        assert rows.count() == PAGE
        expect(f.locator(".count")).to_have_text(f"{N_RUNS} runs")
        expect(f.locator(".page-range")).to_have_text(f"1–{PAGE} of {N_RUNS}")
        # the header's numbers: disk in use now, freed now and after purge (the library's)
        expect(f.locator(".disk-in-use")).not_to_have_text("…", timeout=120000)
        expect(f.locator(".freed-now")).to_have_text("0 B")
        # the map: folders, each a filter for the table; the grey rest as one cell
        groups = f.locator(".treemap .tm-group")
        assert groups.count() == MAP_TILES - 1
        # equal folders here: the 59 biggest share the map with the other 41 by bytes, one labelled cell
        expect(f.locator(".treemap .tm-rest .tm-label")).to_contain_text(
            f"{GROUPS - MAP_TILES + 1} more folders ({(GROUPS - MAP_TILES + 1) * bench_tab.RUNS_PER_GROUP} runs)")
        assert groups.first.get_attribute("title").startswith("group_")
        assert f.locator(".treemap .tm-rest").count() == 1
        light = os.path.join(SHOTS, "scale-01-overview-light.png")
        page.screenshot(path=light)
        shutil.copy(light, "/tmp/scale-01-overview-light.png")

        # next page: a server request, the next 100 rows, never more in the DOM
        first = rows.first.get_attribute("data-run")
        with page.expect_request(lambda r: "/runs?" in r.url and "offset=100" in r.url):
            f.locator("button.page-next").click()
        expect(f.locator(".page-range")).to_have_text(f"{PAGE + 1}–{2 * PAGE} of {N_RUNS}")
        assert rows.count() == PAGE and rows.first.get_attribute("data-run") != first
        f.locator(".pager").scroll_into_view_if_needed()
        page.wait_for_timeout(250)
        paged = os.path.join(SHOTS, "scale-03-second-page.png")
        page.screenshot(path=paged)
        shutil.copy(paged, "/tmp/scale-03-second-page.png")
        # sort by name: a server request; the first page starts with the first name
        with page.expect_request(lambda r: "sort=name" in r.url and "order=asc" in r.url and "offset=0" in r.url):
            f.locator('button.sort[data-sort="name"]').click()
        expect(rows.first).to_have_attribute("data-run", bench_tab.run_name(0))
        expect(f.locator(".page-range")).to_have_text(f"1–{PAGE} of {N_RUNS}")
        with page.expect_request(lambda r: "sort=name" in r.url and "order=desc" in r.url):
            f.locator('button.sort[data-sort="name"]').click()
        expect(rows.first).to_have_attribute("data-run", bench_tab.run_name(N_RUNS - 1))
        assert rows.count() == PAGE
        # the filter box: debounced, one request for what was typed, the matching total shown
        before = len(asked)
        group = bench_tab.run_name(4200).split("/")[0] + "/"
        f.locator("input.filter").press_sequentially(group, delay=20)
        expect(f.locator(".count")).to_have_text(f"100 of {N_RUNS} runs match")
        typed = [u for u in asked[before:] if "q=" in u]
        assert 1 <= len(typed) <= 3, typed  # not one request per keystroke
        assert rows.count() == 100 and all(n.startswith(group) for n in rows.evaluate_all("els => els.map(e => e.dataset.run)"))
        expect(f.locator("button.reduce-all")).to_contain_text("Reduce all matching")
        # a folder of the map filters the table to it
        f.locator("input.filter").fill("")
        expect(f.locator(".count")).to_have_text(f"{N_RUNS} runs")
        folder = groups.first.get_attribute("data-group")
        groups.first.click()
        expect(f.locator(".count")).to_have_text(re.compile(r"^\d+ of " + str(N_RUNS) + " runs match$"))
        assert all(n.startswith(folder + "/") for n in rows.evaluate_all("els => els.map(e => e.dataset.run)"))
        # never more than a page of rows in the document, whatever was done
        assert f.locator(".row[data-run]").count() <= PAGE
        assert errors == [], errors
    finally:
        ctx.close()


def test_dark_mode_screenshot(browser, tb):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1100}, color_scheme="dark")
    page = ctx.new_page()
    page.set_default_timeout(60000)
    try:
        page.goto(tb.base + "/#footprint")
        page.locator("app-header-dark-mode-toggle button").click()
        page.get_by_role("menuitem", name=re.compile("Dark", re.I)).click()
        f = page.frame_locator(FRAME)
        f.locator(".row[data-run]").first.wait_for()
        expect(f.locator("body")).to_have_css("background-color", "rgb(48, 48, 48)")
        expect(f.locator(".disk-in-use")).not_to_have_text("…", timeout=120000)
        assert f.locator(".row[data-run]").count() == PAGE
        page.wait_for_timeout(250)
        dark = os.path.join(SHOTS, "scale-02-overview-dark.png")
        page.screenshot(path=dark)
        shutil.copy(dark, "/tmp/scale-02-overview-dark.png")
    finally:
        ctx.close()
