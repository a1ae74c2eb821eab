"""The tab's Activity page says "of at least N" when the page's total is a lower bound (issue
#28/#26; d8667b3: ``/history``'s ``total_exact`` false), in real headless Chromium inside a real
TensorBoard serving a bucket logdir on the moto server.

A bucket's page reads the manifests newest first by their objects' dates and stops once none
left can hold an entry newer than the page's oldest (``bucket_history``: a date plus ``SKEW``);
each manifest it did not read counts one entry. A test server dates every object when it is
written, so the vault here holds one real reduction (restored) and, written after it, copies of
its manifest by a writer whose clock ran ahead (their times past every date plus ``SKEW``): the
route's page of 500 fills from them and stops with some unread, as a vault of many months does.
The tab says the route's total as "of at least" it, above the newest rows (it was at the foot of
500 rows), and its title says why. Screenshot: test-artifacts/screenshots/history-at-least.png."""
from __future__ import annotations

import json
import re
import time

import pytest
from playwright.sync_api import expect

from test_browser import PREFIX, Tab, TensorBoard, browser  # noqa: F401  (fixtures)
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Outcome

pytestmark = pytest.mark.usefixtures("disarm_faults")

SHOWN = 500  # read_routes._ACTIVITY_SHOWN: the route's page
AHEAD = 30 * 60  # a writer's clock this far ahead: past a date plus SKEW (15 min)


def _logdir(root) -> str:
    run = root / "logs" / "exp" / "run000"
    with synth.EventWriter(str(run), timestamp=1_700_000_000) as w:
        for step in range(3):
            w.scalar("loss", step, 1.0 / (step + 1))
    synth.write_profile_session(str(run), synth.session_name_for(1_700_000_600), "host", n_events=5, seed=1)
    return str(root / "logs")


def _vault_read_in_part(bucket, tmp_path) -> str:
    """A bucket logdir whose history the route's page reads only in part (the module doc)."""
    url = bucket.upload(_logdir(tmp_path), "v")
    rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0, verify_backends=("python",))
    [op] = [o.op_id for o in rep.outcomes if o.status == "verified"]
    [r] = api.restore(url, op=op)
    assert r.status == Outcome.RESTORED, r.to_dict()
    state = bucket.key("v/.tb-footprint")
    bucket.fs.invalidate_cache()
    doc = json.loads(bucket.fs.cat_file(f"{state}/manifests/{op}.json"))
    now, planted = time.time(), {}
    for i in range(SHOWN // 2 + 8):  # two entries each (the reduction, its restore): some left unread
        m = json.loads(json.dumps(doc))
        m["op_id"] = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(now + AHEAD))}-{i:06x}"
        if "op" in m:
            m["op"] = m["op_id"]
        # the later its key (read first among objects of one date), the newer: the page is the newest
        m["started_at"] = now + AHEAD + i * 10
        m["finished_at"] = m["started_at"] + 2
        m["restored_at"] = m["started_at"] + 5
        planted[f"{state}/manifests/{m['op_id']}.json"] = json.dumps(m).encode()
    bucket.fs.pipe(planted)
    bucket.fs.invalidate_cache()
    return url


def test_the_activity_page_says_at_least_when_its_total_is_a_lower_bound(browser, s3_bucket, tmp_path):
    url = _vault_read_in_part(s3_bucket, tmp_path)
    t = TensorBoard(url, log_path=str(tmp_path / "tensorboard.log"))
    tab = None
    try:
        h = t.json(PREFIX + "/history")
        whole = len(api.history(url))
        assert len(h["entries"]) == SHOWN and h["total_exact"] is False, (len(h["entries"]), h["total"])
        assert SHOWN < h["total"] < whole, (h["total"], whole)  # a lower bound, and said to be one
        tab = Tab(browser, t)
        f = tab.frame
        f.locator('.nav-item[data-view="history"]').click()
        expect(f.locator("table.history tbody tr")).to_have_count(SHOWN, timeout=120000)
        note = f.locator(".history-page p.history-total")
        expect(note).to_have_text(f"Newest {SHOWN} of at least {h['total']} shown.")
        expect(note).to_have_attribute("data-exact", "false")
        expect(note).to_have_attribute("title", re.compile(r"counted without being read.*at least this many"))
        # read first: above the newest rows, not at the foot of 500 of them
        table = f.locator("table.history")
        assert note.bounding_box()["y"] < table.bounding_box()["y"], (note.bounding_box(), table.bounding_box())
        note.scroll_into_view_if_needed()
        tab.shot("history-at-least.png")
        assert tab.our_errors() == [], tab.our_errors()
    finally:
        if tab is not None:
            tab.close()
        t.stop()
