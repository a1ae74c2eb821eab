"""Issue 29, day one item 7: a restored operation's check shows the thumbnails or says why not —
for a reduction that REWROTE the event file (images capped per tag), not only for one that left it
unchanged (test_browser_dayone covers that case).

After the restore, the check of that reduction shows every original picture (read from the
restored run, decoded, no spinner left), and the reduced side of each shown step is a marked box
whose note says the run was restored and the reduced files exist no more — never an empty box,
never a failed load. Real headless Chromium in a real TensorBoard; screenshots (light and dark) go
to test-artifacts/screenshots/tab-restored-rewrite-check*.png.
"""
from __future__ import annotations

import json

from playwright.sync_api import expect

from test_browser import PREFIX, Tab, TensorBoard, browser  # noqa: F401  (fixtures)
from tbproc import make_demo

RUN = "mnist/baseline/train"  # 8 image tags of 5 steps each in the demo


def test_a_restored_rewrite_shows_the_originals_and_says_why_the_reduced_side_is_gone(browser, tmp_path):
    demo = make_demo(tmp_path / "demo_logs")
    pol = tmp_path / "two-images.json"
    pol.write_text(json.dumps({"name": "two-images", "base": "archive", "content": {"keep_per_tag": {"images": 2}}}))
    t = TensorBoard(demo, "--footprint_policy", str(pol), log_path=str(tmp_path / "tensorboard.log"))
    tab = None
    try:
        tab = Tab(browser, t)
        f = tab.frame
        status, res = tab.post("reduce", {"runs": [RUN]})
        assert status == 202, res
        job = t.wait_job(res["job"]["id"], timeout=240)
        assert [o["status"] for o in (job["result"] or {}).get("outcomes", [])] == ["verified"], json.dumps(job)[:1500]
        op = next(o for o in t.json(PREFIX + "/operations")["operations"] if o["run"] == RUN and o["kind"] == "reduce")
        v = t.json(PREFIX + "/operation?op=" + op["op_id"])["verification"]
        assert v.get("mode") != "unchanged", v.get("mode")  # the event file was rewritten: a real after side

        status, res = tab.post("restore", {"op": op["op_id"]})
        assert status == 202, res
        assert t.wait_job(res["job"]["id"], timeout=240)["state"] == "done"
        assert next(o for o in t.json(PREFIX + "/operations")["operations"] if o["op_id"] == op["op_id"])["restored_by"]

        f.locator('.nav-item[data-view="operations"]').click()
        f.locator(f'table.operations tbody tr[data-op="{op["op_id"]}"] a.check-link').click()
        expect(f.locator(".restored-note")).to_contain_text("original bytes again")
        section = f.locator('section.touched[data-plugin="images"]')
        originals = section.locator('img.thumb.loaded[data-side="before"]')
        expect(originals.first).to_be_visible(timeout=60000)
        gone = section.locator('.thumb.unavailable[data-side="after"]')
        expect(gone.first).to_be_visible()
        # every shown step: the original decoded, the reduced side marked gone; no spinner, no failure
        expect(section.locator(".thumb.loading")).to_have_count(0, timeout=60000)
        expect(section.locator(".thumb.failed")).to_have_count(0)
        n = originals.count()
        assert n > 0 and gone.count() > 0, (n, gone.count())
        assert all(originals.nth(i).evaluate("i => i.complete && i.naturalWidth > 0") for i in range(n))
        expect(section.locator(".thumb-note").first).to_contain_text("the reduced files exist no more")
        section.scroll_into_view_if_needed()
        tab.shot("tab-restored-rewrite-check.png")
        tab.to_dark()  # TensorBoard's own toggle
        tab.shot("tab-restored-rewrite-check-dark.png")
        assert tab.our_errors() == [], tab.our_errors()
    finally:
        if tab is not None:
            tab.close()
        t.stop()
