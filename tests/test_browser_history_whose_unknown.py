"""The tab's History page showed a ``whose_unknown`` line (an operation whose owner a failed
listing could not tell: never acted on, retry once it lists) in the "ok" colour of a verified
one. It is a warning and shows as one (``warn-text``), in real headless Chromium inside a real
TensorBoard. The line is the route's own shape (``bucket_catalogue.unsure_entry``), added to the
real ``/history`` answer as the browser receives it: a bucket whose listing fails in the server
process cannot be made from the test's. Screenshot: test-artifacts/screenshots/history-whose-unknown.png."""
from __future__ import annotations

import json
import time

from playwright.sync_api import expect

from test_browser import Tab, browser, demo, tb  # noqa: F401  (fixtures)

UNSURE = {"time": time.time(), "op_id": "20261206T120000-abcdef", "kind": "reduce", "run": "mnist/baseline",
          "outcome": "whose_unknown", "code": "whose_unknown", "backup": "unknown",
          "reason": "whose operation this is cannot be told: listing s3://b/v failed (timeout); "
                    "nothing was done with it; retry once it lists"}
VERIFIED = {"time": time.time() - 60, "op_id": "20261206T115900-abcdef", "kind": "reduce", "run": "jax_profile",
            "outcome": "verified", "before": 2000, "after": 1000}


def _with_unsure(route):
    answer = route.fetch()
    body = answer.json()
    body["entries"] = [UNSURE, VERIFIED] + list(body.get("entries") or [])
    body["total"] = len(body["entries"])
    route.fulfill(response=answer, body=json.dumps(body))


def test_a_whose_unknown_line_shows_as_a_warning(browser, tb):
    tab = Tab(browser, tb)
    try:
        tab.page.route("**/data/plugin/footprint/history*", _with_unsure)
        f = tab.frame
        f.locator('.nav-item[data-view="history"]').click()
        rows = f.locator("table.history tbody tr")
        expect(rows.first).to_be_visible()
        unsure = rows.filter(has_text="whose_unknown").locator("td").nth(5)
        verified = rows.filter(has_text="verified").locator("td").nth(5)
        expect(unsure).to_have_class("warn-text")
        expect(verified).to_have_class("ok")
        colour = unsure.evaluate("e => getComputedStyle(e).color")
        assert colour != verified.evaluate("e => getComputedStyle(e).color"), colour
        tab.shot("history-whose-unknown.png")
        assert tab.our_errors() == [], tab.our_errors()
    finally:
        tab.close()
