"""The check page stays put while the tab polls, and follows a restore started from it.

The overview poll and every job poll hand the tab new `actions` and `jobs` objects. The check page
drew itself again from scratch on each: every picture reloaded, the scroll went back to the top,
and an element a user (or a test) was about to use left the page under them (the fresh-clone CI
of c875135 failed `test_browser_dayone` on just that). It is drawn again now only when its check
says something else; the Restore button alone follows the actions and the jobs. A restore started
from the page reads the check again when it ends, so the page says "Restored since" at once.

Real headless Chromium in a real TensorBoard on the demo logs.
"""
from __future__ import annotations

import json

from playwright.sync_api import expect

from test_browser import PREFIX, Tab, TensorBoard, browser  # noqa: F401  (fixtures)
from tbproc import make_demo

RUN = "mnist/baseline/train"
OTHER = "mnist/baseline/validation"


def _wake_poll(tab):
    """Run the tab's overview poll now (as a user coming back to the page does), and wait for it."""
    with tab.page.expect_response(lambda r: "/footprint/runs" in r.url and r.request.method == "GET", timeout=30000):
        tab.frame.locator("body").evaluate("() => document.dispatchEvent(new Event('visibilitychange'))")
    tab.page.wait_for_timeout(300)  # the answer drawn


def test_the_check_page_is_not_drawn_again_by_polls_and_follows_its_restore(browser, tmp_path):
    demo = make_demo(tmp_path / "demo_logs")
    t = TensorBoard(demo, log_path=str(tmp_path / "tensorboard.log"))
    tab = None
    try:
        runs = {r["name"] for r in t.json(PREFIX + "/runs")["runs"]}
        assert RUN in runs and OTHER in runs, sorted(runs)
        tab = Tab(browser, t, height=700)
        f = tab.frame
        status, res = tab.post("reduce", {"runs": [RUN]})
        assert status == 202, res
        job = t.wait_job(res["job"]["id"], timeout=240)
        assert [o["status"] for o in (job["result"] or {}).get("outcomes", [])] == ["verified"], json.dumps(job)[:1500]
        op = next(o for o in t.json(PREFIX + "/operations")["operations"] if o["run"] == RUN and o["kind"] == "reduce")

        f.locator('.nav-item[data-view="operations"]').click()
        f.locator(f'table.operations tbody tr[data-op="{op["op_id"]}"] a.check-link').click()
        expect(f.locator(".check-verdict")).to_contain_text("Verified")
        section = f.locator('section.touched[data-plugin="images"]')
        expect(section.locator("img.thumb").first).to_be_visible(timeout=60000)
        section.scroll_into_view_if_needed()
        section.evaluate("s => { s.dataset.mark = 'same-node'; }")
        scrolled = f.locator("body").evaluate("() => document.scrollingElement.scrollTop")
        assert scrolled > 0, "the images section should lie below the fold of a 700 px page"

        # a poll of the overview (new actions), then a job on another run (new jobs, polled)
        _wake_poll(tab)
        status, res = tab.post("reduce", {"runs": [OTHER]})
        assert status == 202, res
        _wake_poll(tab)
        t.wait_job(res["job"]["id"], timeout=240)
        _wake_poll(tab)
        expect(f.locator('section.touched[data-plugin="images"][data-mark="same-node"]')).to_have_count(1)
        assert f.locator("body").evaluate("() => document.scrollingElement.scrollTop") == scrolled

        # the Restore button on the page: its restore ends and the page says so without a reload
        expect(f.locator(".restored-note")).to_have_count(0)
        f.locator("button.restore-op").click()
        f.locator(".dialog .dialog-confirm").click()
        expect(f.locator(".restored-note")).to_contain_text("original bytes again", timeout=180000)
        expect(f.locator("button.restore-op")).to_have_count(0)  # nothing left to restore
        assert next(o for o in t.json(PREFIX + "/operations")["operations"] if o["op_id"] == op["op_id"])["restored_by"]
        tab.shot("tab-check-restored-in-place.png")
        assert tab.our_errors() == [], tab.our_errors()
    finally:
        if tab is not None:
            tab.close()
        t.stop()
