"""Issue 29's tab items ("day one"), in real headless Chromium inside a real TensorBoard:

* the check's images show as soon as it opens (a spinner until each is decoded, never an empty box);
* a finished job's card folds to one line (another page, a newer job, or a while after it ended);
* Operations says "restored; backup released" of a restored reduction, never "purged";
* a restored retirement keeps 0 B;
* a restored operation's check shows the original thumbnails and says why the reduced ones are gone;
* the legend lists the rare grey categories as one "other" entry with a disclosure;
* every colour dot stands out in dark mode (a light ring where the colour alone would not);
* every category the scanner knows has its own colour; a plan's fidelity details behind a disclosure.

Screenshots (light and dark) go to test-artifacts/screenshots/day1-*.png.
"""
from __future__ import annotations

import json

from playwright.sync_api import expect

from test_browser import PREFIX, Tab, browser, demo, tb  # noqa: F401  (fixtures)

MODULE = PREFIX + "/views/common.js"
IMAGE_RUN = "tf_summary_mix"
# the categories the colour map paints grey: run metadata and bookkeeping records
GREYS = {"graph_run_metadata", "graph_run_metadata_graph", "tagged_run_metadata", "session_log", "file_version",
         "events_other", "other", "symlink"}

# every image box of the check, sampled while the page loads: an <img> that is not decoded and
# not behind a spinner is an empty box
WATCH_EMPTY_BOXES = """() => {
  window.__emptyBoxes = [];
  window.__watch = setInterval(() => {
    for (const img of document.querySelectorAll('section.touched img.thumb')) {
      if (!(img.complete && img.naturalWidth > 0)) window.__emptyBoxes.push(img.dataset.side + ':' + img.dataset.step);
    }
    for (const box of document.querySelectorAll('section.touched .thumb.loading')) {
      if (!box.querySelector('.spinner')) window.__emptyBoxes.push('no spinner');
    }
  }, 20);
}"""


def _dark(tab):
    tab.frame.locator("html[data-theme='dark']").wait_for()


def _ops(tb):
    return tb.json(PREFIX + "/operations")["operations"]


def test_legend_groups_the_grey_categories(browser, tb):
    summary = tb.json(PREFIX + "/summary")
    tab = Tab(browser, tb)
    f = tab.frame
    try:
        tab_greys = GREYS
        greys = [c for c in summary["categories"] if c["bytes"] and c["name"] in tab_greys]
        assert len(greys) >= 2, f"the demo should hold at least two grey categories: {summary['categories']}"
        other = f.locator(".legend .legend-other")
        expect(other).to_have_count(1)
        # none of them has an entry of its own; the one entry sums them
        for c in greys:
            expect(f.locator(f'.legend > .legend-item[data-category="{c["name"]}"]')).to_have_count(0)
        expect(other.locator("summary")).to_contain_text(f"other ({len(greys)})")
        title = other.get_attribute("title")
        assert all(c["label"] in title for c in greys), title
        # the disclosure lists each, with its own colour dot
        expect(other.locator(".legend-other-list")).to_be_hidden()
        other.locator("summary").click()
        listed = other.locator(".legend-other-list .legend-sub-label")
        expect(listed).to_have_count(len(greys))
        assert sorted(listed.evaluate_all("els => els.map(e => e.dataset.category)")) == sorted(c["name"] for c in greys)
        tab.shot("day1-legend-other-open.png")
        # the non-grey categories keep their entries
        for c in summary["categories"]:
            if c["bytes"] and c["name"] not in tab_greys:
                expect(f.locator(f'.legend > .legend-item[data-category="{c["name"]}"]')).to_have_count(1)
        assert tab.our_errors() == [], tab.our_errors()
    finally:
        tab.close()
    tab = Tab(browser, tb, color_scheme="dark")
    try:
        _dark(tab)
        tab.frame.locator(".legend .legend-other summary").click()
        tab.shot("day1-legend-other-open-dark.png")
    finally:
        tab.close()


def test_every_colour_dot_stands_out_in_dark_mode(browser, tb):
    labels = tb.json(PREFIX + "/status")["labels"]
    tab = Tab(browser, tb, color_scheme="dark")
    f = tab.frame
    try:
        _dark(tab)
        # every category the scanner knows (and the tab's own extras) as a dot on the page and on a card
        result = f.locator("body").evaluate(
            """async (_, names) => {
                 const m = await import('""" + MODULE + """');
                 const out = [];
                 for (const bg of ['page', 'card']) {
                   const box = document.createElement('div');
                   box.className = bg === 'card' ? 'card' : '';
                   document.body.appendChild(box);
                   for (const n of names) {
                     const s = m.swatch(n);
                     box.appendChild(s);
                     const cs = getComputedStyle(s);
                     out.push({name: n, color: m.color(n), bg: getComputedStyle(bg === 'card' ? box : document.body).backgroundColor,
                               shadow: cs.boxShadow});
                   }
                   box.remove();
                 }
                 return out;
               }""", sorted(labels) + ["other"])

        def rgb(css):
            parts = css[css.index("(") + 1:css.index(")")].split(",")
            return tuple(float(p) for p in parts[:3])

        def hexrgb(h):
            return tuple(int(h[i:i + 2], 16) for i in (1, 3, 5))

        def lum(c):
            v = [x / 255 for x in c]
            v = [x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4 for x in v]
            return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]

        def contrast(a, b):
            hi, lo = sorted([lum(a), lum(b)], reverse=True)
            return (hi + 0.05) / (lo + 0.05)

        unreadable = []
        for r in result:
            assert r["color"].startswith("#"), f"{r['name']} has no colour of its own in views/common.js: {r['color']}"
            bg = rgb(r["bg"])
            if contrast(hexrgb(r["color"]), bg) >= 3:
                continue
            ring = r["shadow"]
            # a ring: a light colour (rgba(255, 255, 255, a)) blended on the background
            if ring.startswith("rgba(") or ring.startswith("rgb("):
                c = rgb(ring)
                alpha = float(ring[ring.index("(") + 1:ring.index(")")].split(",")[3]) if ring.startswith("rgba(") else 1.0
                seen = tuple(alpha * x + (1 - alpha) * y for x, y in zip(c, bg))
                if contrast(seen, bg) >= 3:
                    continue
            unreadable.append((r["name"], r["color"], r["bg"], ring))
        assert not unreadable, unreadable
        assert any(r["shadow"] != "none" for r in result)  # the dark colours do get rings
        # and on the page: the legend's and a run's category table
        expect(f.locator(".legend .swatch.ring-dark").first).to_be_visible()
        tab.shot("day1-dark-legend-dots.png")
        name = tb.json(PREFIX + "/runs")["runs"][0]["name"]
        f.locator(f'.row[data-run="{name}"] .run-link').click()
        expect(f.locator("table.categories")).to_be_visible()
        tab.shot("day1-dark-run-dots.png")
    finally:
        tab.close()


def test_fidelity_details_behind_a_disclosure(browser, tb):
    """A plan's ``fidelity_details`` (parallel to ``fidelity``): the line, and what explains it on demand."""
    runs = tb.json(PREFIX + "/runs")["runs"]
    name = next(r["name"] for r in runs if r["removable_bytes"] > 0)
    tab = Tab(browser, tb)
    f = tab.frame
    detail = "the graph's large constants are dropped\nnode names and shapes stay"

    def with_details(route):
        response = route.fetch()
        body = response.json()
        fid = body["plan"]["fidelity"]
        # the first line explained (text with two lines), the second explained by a list, the rest not
        body["plan"]["fidelity_details"] = [detail, ["one", "two"]][:len(fid)] + [""] * max(0, len(fid) - 2)
        route.fulfill(response=response, body=json.dumps(body), content_type="application/json")

    try:
        tab.page.route("**/data/plugin/footprint/run?*", with_details)
        f.locator(f'.row[data-run="{name}"] .run-link').click()
        fid = f.locator(".plan-box ul.fidelity > li")
        expect(fid.first).to_be_visible()
        lines = tb.json(PREFIX + "/run?run=" + name)["plan"]["fidelity"]
        expect(fid).to_have_count(len(lines))
        first = fid.first.locator("details.fidelity-details")
        expect(first.locator("summary")).to_have_text(lines[0])
        expect(first.locator(".fidelity-detail")).to_be_hidden()
        first.locator("summary").click()
        expect(first.locator(".fidelity-detail")).to_have_text(detail)
        if len(lines) > 1:
            expect(fid.nth(1).locator(".fidelity-detail div")).to_have_count(2)
        for i in range(2, len(lines)):  # a line without details stays a plain line
            expect(fid.nth(i).locator("details")).to_have_count(0)
            expect(fid.nth(i)).to_have_text(lines[i])
        tab.shot("day1-fidelity-details.png")
    finally:
        tab.close()


def test_check_images_restore_and_job_cards(browser, tb, demo):
    """Reduce a run with images; its check shows every picture without scrolling (spinners, never
    empty boxes); the job card folds; after a restore, Operations says the backup was released and
    the restored operation's check shows the originals and why the reduced side is gone."""
    tab = Tab(browser, tb, height=700)
    f = tab.frame
    try:
        f.locator("input.filter").fill(IMAGE_RUN)
        f.locator(f'.row[data-run="{IMAGE_RUN}"] button.reduce-run').click()
        f.locator(".dialog .dialog-confirm").click()
        card = f.locator('.job-card[data-kind="reduce"]').first
        expect(card.locator(f'.outcome-line[data-run="{IMAGE_RUN}"][data-status="verified"]')).to_be_visible(timeout=180000)
        expect(card).not_to_have_class("folded")  # the outcome in full while it is news
        tab.shot("day1-job-card-full.png")

        # the check opens with every picture on its way: no empty boxes, and all shown without a scroll
        f.locator("body").evaluate(WATCH_EMPTY_BOXES)
        card.locator(".show-check").click()
        expect(f.locator(".check-verdict")).to_contain_text("Verified")
        tab.shot("day1-check-opening.png")
        op = next(o for o in _ops(tb) if o["run"] == IMAGE_RUN and o["kind"] == "reduce")
        # archive removes only its profile data: its event file is verified by identity (sha256),
        # and the check shows what TensorBoard's images dashboard serves from that unchanged file
        v = tb.json(PREFIX + "/operation?op=" + op["op_id"])["verification"]
        assert v["mode"] == "unchanged" and "tag_summaries" not in v, sorted(v)
        expect(f.locator("section.identity-proof .identity-title")).to_have_text("✓ 1 event file unchanged (sha256)")
        tags = [c for c in tb.json(PREFIX + "/run?run=" + IMAGE_RUN)["run"]["categories"] if c["name"] == "images"][0]["tags"]
        expected = sum(min(len(tb.json("/data/plugin/images/images?run=" + IMAGE_RUN + "&tag=" + t + "&sample=0")), 12)
                       for t in tags[:8])
        assert expected > 0
        section = f.locator('section.touched[data-plugin="images"]')
        expect(section.locator("img.thumb")).to_have_count(expected, timeout=60000)
        tab.page.wait_for_function(
            "() => [...document.querySelector('iframe').contentDocument.querySelectorAll('section.touched img.thumb')]"
            ".every(i => i.complete && i.naturalWidth > 0)", timeout=30000)
        empty = f.locator("body").evaluate("() => { clearInterval(window.__watch); return window.__emptyBoxes; }")
        assert empty == [], f"empty image boxes while the check opened: {empty[:10]}"
        # the job card folded away once the check opened
        folded = f.locator('.job-card[data-kind="reduce"].folded')
        expect(folded).to_have_count(1)
        assert folded.bounding_box()["height"] < 40
        expect(folded).to_contain_text("verified ✓ 1 run")
        expect(folded.locator(".outcome-line")).to_have_count(0)
        section.scroll_into_view_if_needed()
        tab.shot("day1-check-images.png")
        tab.to_dark()  # TensorBoard's own dark mode
        tab.shot("day1-check-images-dark.png")
        tab.page.evaluate("() => document.body.classList.remove('dark-mode')")
        # its disclosure opens it again, in full
        folded.locator("button.unfold").click()
        expect(f.locator(f'.job-card[data-kind="reduce"] .outcome-line[data-run="{IMAGE_RUN}"]')).to_be_visible()
        f.locator('.job-card[data-kind="reduce"] button.fold').click()
        expect(f.locator('.job-card[data-kind="reduce"].folded')).to_have_count(1)

        # restore from the check; the restore's card folds by itself after a while on the same page
        f.locator("button.restore-op").click()
        f.locator(".dialog .dialog-confirm").click()
        restore_card = f.locator('.job-card[data-kind="restore"]').first
        expect(restore_card.locator('.outcome-line[data-status="restored"]')).to_be_visible(timeout=180000)
        tab.shot("day1-restored-card.png")
        expect(f.locator('.job-card[data-kind="restore"].folded')).to_have_count(1, timeout=30000)
        expect(f.locator('.job-card[data-kind="restore"].folded')).to_contain_text("restored ✓ 1 run")
        tab.shot("day1-restored-card-folded.png")

        # Operations: the restored reduction's backup was released, not purged
        f.locator('.nav-item[data-view="operations"]').click()
        row = f.locator(f'table.operations tbody tr[data-op="{op["op_id"]}"]')
        expect(row.locator("td.backup")).to_have_text("restored; backup released")
        expect(f.locator("table.operations td.backup", has_text="purged")).to_have_count(0)
        tab.shot("day1-operations-restored.png")

        # the restored operation's check: the originals as pictures, the reduced side says why not
        row.locator("a.check-link").click()
        expect(f.locator(".check-verdict")).to_be_visible()
        expect(f.locator(".restored-note")).to_contain_text("original bytes again")
        # the event file was never changed: the restored run shows the very same pictures, and says why
        expect(f.locator("section.identity-proof")).to_contain_text("never changed")
        expect(section.locator('img.thumb.loaded[data-side="unchanged"]')).to_have_count(expected, timeout=60000)
        expect(section.locator(".thumb.unavailable, .thumb.failed, .thumb.absent")).to_have_count(0)
        section.scroll_into_view_if_needed()
        tab.shot("day1-restored-check.png")
        tab.to_dark()
        tab.shot("day1-restored-check-dark.png")
        assert tab.our_errors() == [], tab.our_errors()
    finally:
        tab.close()


def test_restored_retirement_keeps_nothing(browser, tb):
    runs = tb.json(PREFIX + "/runs")["runs"]
    small = min((r for r in runs if r["total_bytes"] > 0 and "/" not in r["name"]), key=lambda r: r["total_bytes"])["name"]
    tab = Tab(browser, tb)
    f = tab.frame
    try:
        status, res = tab.post("retire", {"runs": [small]})
        assert status == 202, res
        job = tb.wait_job(res["job"]["id"])
        assert [o["status"] for o in (job["result"] or {}).get("outcomes", [])] == ["verified"], json.dumps(job)[:1500]
        retire = next(o for o in _ops(tb) if o["kind"] == "retire" and o["run"] == small)
        f.locator('.nav-item[data-view="operations"]').click()
        row = f.locator(f'table.operations tbody tr[data-op="{retire["op_id"]}"]')
        expect(row.locator("td.backup")).to_contain_text("whole run")  # kept in the vault while retired
        status, res = tab.post("unretire", {"op": retire["op_id"]})
        assert status == 202, res
        job = tb.wait_job(res["job"]["id"])
        assert [o["status"] for o in (job["result"] or {}).get("outcomes", [])] == ["restored"], json.dumps(job)[:1500]
        f.locator('.nav-item[data-view="history"]').click()
        f.locator('.nav-item[data-view="operations"]').click()
        expect(row.locator("td.backup")).to_have_text("0 B kept · restored")
        tab.shot("day1-retire-restored-operations.png")
    finally:
        tab.close()


def test_operations_lists_what_a_restore_kept_in_a_files_place(browser, tb, demo):
    """Bytes written where a reduction removed a file are never overwritten by the restore: kept in
    the vault, and the Operations page says what each holds and how to bring it back."""
    run = "keras2_cifar"
    tab = Tab(browser, tb)
    f = tab.frame
    try:
        status, res = tab.post("reduce", {"runs": [run]})
        assert status == 202, res
        job = tb.wait_job(res["job"]["id"])
        assert [o["status"] for o in (job["result"] or {}).get("outcomes", [])] == ["verified"], json.dumps(job)[:1500]
        op = next(o for o in _ops(tb) if o["run"] == run and o["kind"] == "reduce")
        removed = [x["path"] for x in tb.json(PREFIX + "/operation?op=" + op["op_id"])["files"] if x["action"] == "delete"]
        assert removed, op
        # a writer puts new bytes where the reduction removed a file
        late = demo / removed[0]
        late.parent.mkdir(parents=True, exist_ok=True)
        late.write_bytes(b"written after the reduction\n" * 10)
        status, res = tab.post("restore", {"op": op["op_id"]})
        assert status == 202, res
        job = tb.wait_job(res["job"]["id"])
        assert job["state"] == "done", json.dumps(job)[:1500]
        kept = tb.json(PREFIX + "/operations")["kept_blobs"]
        assert [k["path"] for k in kept if k["run"] == run] == [removed[0]], kept
        f.locator('.nav-item[data-view="operations"]').click()
        row = f.locator(".kept-blobs-table tbody tr", has_text=run)
        expect(row).to_have_count(1)
        expect(row).to_contain_text(removed[0])
        expect(row.locator("code.bring-back")).to_contain_text("cp --preserve=timestamps")
        assert row.get_attribute("data-code") == kept[0]["code"]
        f.locator(".kept-blobs").scroll_into_view_if_needed()
        tab.shot("day1-kept-blobs.png")
        tab.to_dark()
        tab.shot("day1-kept-blobs-dark.png")
        assert tab.our_errors() == [], tab.our_errors()
    finally:
        tab.close()
