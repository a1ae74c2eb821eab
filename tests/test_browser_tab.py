"""Issue 13's tab items in real headless Chromium inside a real TensorBoard: the logdir map,
category colours and the legend's stripe, TensorBoard's own dark-mode toggle, shares written by
the CLI's rule, RECORDS "—" for file categories, no redundant Dry run button, an error banner
that goes after a later success, one consistent "Other dashboards" note after "Reduce all shown",
byte bars per category, and the before/after check of what the policy touched.
Screenshots go to test-artifacts/screenshots/tab-*.png.
"""
from __future__ import annotations

import json
import os
import re

import pytest
from playwright.sync_api import expect

from test_browser import PREFIX, SHOTS, Tab, TensorBoard, browser, demo, tb  # noqa: F401  (fixtures)
from tb_footprint_plugin import fmt

MODULE = PREFIX + "/views/common.js"


def _rgb(hex_color):
    h = hex_color.lstrip("#")
    return tuple(int(h[i:i + 2], 16) for i in (0, 2, 4))


def test_logdir_map_and_legend(browser, tb):
    runs = tb.json(PREFIX + "/runs")["runs"]
    tab = Tab(browser, tb)
    f = tab.frame
    try:
        cells = f.locator(".treemap .tm-run[data-run]")
        expect(cells.first).to_be_visible()
        sized = [r for r in runs if r["total_bytes"] > 0]
        assert cells.count() == len(sized)
        # areas follow bytes: the biggest run has the biggest rectangle
        areas = cells.evaluate_all("els => els.map(e => [e.dataset.run, e.offsetWidth * e.offsetHeight])")
        biggest = max(areas, key=lambda a: a[1])[0]
        assert biggest == max(sized, key=lambda r: r["total_bytes"])["name"]
        # every rectangle lies inside the map
        box = f.locator(".treemap").bounding_box()
        for i in range(cells.count()):
            b = cells.nth(i).bounding_box()
            assert b["x"] >= box["x"] - 1 and b["x"] + b["width"] <= box["x"] + box["width"] + 1
            assert b["y"] >= box["y"] - 1 and b["y"] + b["height"] <= box["y"] + box["height"] + 1
        # categories in their legend colours, all distinct among what this logdir holds
        legend = f.locator(".legend-item:not(.legend-dominant) .swatch").evaluate_all(
            "els => els.map(e => getComputedStyle(e).backgroundColor)")
        assert len(set(legend)) == len(legend), legend
        expect(f.locator(".legend-dominant")).to_contain_text("≥ 20% of the logdir")
        tab.shot("tab-01-logdir-map.png")
        # a click opens the run
        cells.nth(len(sized) - 1 if len(sized) < 3 else 2).click()
        expect(f.locator(".run-title")).to_be_visible()
        assert tab.our_errors() == []
    finally:
        tab.close()


def test_colour_map_is_colour_blind_safe_and_distinct(browser, tb):
    tab = Tab(browser, tb)
    try:
        colors = tab.frame.locator("body").evaluate(
            "async () => { const m = await import('" + MODULE + "'); const names = ['scalars','hparams','text',"
            "'histograms','images','audio','pr_curves','graph_def','profile_xplane','profile_cache',"
            "'profile_secondary','profile_tool_outputs','torch_trace','plugin_assets','checkpoints','events_corrupt','events_incomplete'];"
            " return names.map(n => [n, m.color(n)]); }")
        values = [c for _, c in colors]
        assert len(set(v.lower() for v in values)) == len(values), colors
        d = dict(colors)
        assert d["torch_trace"].lower() != d["pr_curves"].lower()
        # no two of them closer than a visible step in RGB
        rgb = [_rgb(v) for v in values]
        for i in range(len(rgb)):
            for j in range(i + 1, len(rgb)):
                dist = sum((a - b) ** 2 for a, b in zip(rgb[i], rgb[j])) ** 0.5
                assert dist > 40, (colors[i], colors[j], dist)
    finally:
        tab.close()


def test_shares_written_like_the_cli(browser, tb):
    cases = [(1, 3), (0, 5), (5, 0), (1, 10000), (4, 10000), (5, 10000), (6, 10000), (1, 1), (999, 1000),
             (2, 3), (1, 2000), (123456, 7654321), (0.5, 1000)]
    tab = Tab(browser, tb)
    try:
        js = tab.frame.locator("body").evaluate(
            "async (_, cases) => { const m = await import('" + MODULE + "'); return cases.map(([a, b]) => m.share(a, b)); }",
            cases)
        assert js == [fmt.share(a, b).strip() for a, b in cases]
        assert fmt.share(1, 10000).strip() == "<0.1%"
    finally:
        tab.close()


def test_run_page_plan_records_and_no_dry_run_button(browser, tb):
    runs = tb.json(PREFIX + "/runs")["runs"]
    name = next(r["name"] for r in runs if r["removable_bytes"] > 0 and "profile_xplane" in r["categories"])
    tab = Tab(browser, tb)
    f = tab.frame
    try:
        f.locator(f'.row[data-run="{name}"] .run-link').click()
        expect(f.locator(".plan-summary")).to_contain_text("Frees")
        expect(f.locator("button.dry-run")).to_have_count(0)
        rows = f.locator("table.categories tbody tr")
        detail = tb.json(PREFIX + "/run?run=" + name)["run"]
        for i, c in enumerate(detail["categories"]):
            records = rows.nth(i).locator("td").nth(4).inner_text()
            if c["records"]:
                assert records == str(c["records"])
            else:  # a file category: no event records
                assert records == "—", (c["name"], records)
        assert any(not c["records"] for c in detail["categories"])
        # byte bars: every label shows its own category's bytes
        plan = tb.json(PREFIX + "/run?run=" + name)["plan"]
        bars = f.locator(".plan-box .cat-bar-row")
        assert bars.count() == len(plan["category_changes"])
        for i, c in enumerate(plan["category_changes"]):
            assert bars.nth(i).locator(".cat-bar-label").inner_text().strip() == c["label"]
        tab.shot("tab-02-run-page.png")
    finally:
        tab.close()


def test_follows_tensorboards_own_dark_mode_toggle(browser, tb):
    tab = Tab(browser, tb, color_scheme="light")
    page = tab.page
    body = tab.frame.locator("body")
    try:
        assert body.evaluate("b => getComputedStyle(b).backgroundColor") == "rgb(245, 245, 245)"
        # TensorBoard's own toggle (its header's dark-mode menu), not the OS setting
        page.locator("app-header-dark-mode-toggle button").click()
        page.get_by_role("menuitem", name=re.compile("Dark", re.I)).click()
        expect(page.locator("body.dark-mode")).to_have_count(1)
        expect(body).to_have_css("background-color", "rgb(48, 48, 48)")
        tab.shot("tab-03-dark-by-tensorboard-toggle.png")
        page.locator("app-header-dark-mode-toggle button").click()
        page.get_by_role("menuitem", name=re.compile("Light", re.I)).click()
        expect(body).to_have_css("background-color", "rgb(245, 245, 245)")
    finally:
        tab.close()


def test_error_banner_goes_after_a_later_success(browser, tb):
    tab = Tab(browser, tb)
    f = tab.frame
    try:
        # the first rescan fails (the server's answer replaced by an error), the second succeeds
        def refuse(route):
            route.fulfill(status=500, content_type="application/json", body='{"error": "disk on fire"}')

        tab.page.route("**/data/plugin/footprint/rescan", refuse)
        # the module's server is shared: an earlier test's job leaves a rescan under way, and the
        # button is disabled until it lands (CI on 2 busy cores took longer than a click's 30 s)
        expect(f.locator("button.rescan")).to_be_enabled(timeout=180000)
        f.locator("button.rescan").click()
        expect(f.locator(".banner-error")).to_contain_text("disk on fire")
        tab.shot("tab-04-error-banner.png")
        tab.page.unroute("**/data/plugin/footprint/rescan", refuse)
        expect(f.locator("button.rescan")).to_be_enabled(timeout=180000)
        f.locator("button.rescan").click()
        expect(f.locator(".banner-error")).to_have_count(0)
    finally:
        tab.close()


def test_check_shows_image_and_audio_samples_before_and_after(browser, tb, demo):
    """The check of a run with images and audio. Under archive only its profile data goes: its
    event file is neither rewritten nor removed, so it is verified by identity (sha256, no reader
    started, no tag summaries). The check says so first ("1 event file unchanged (sha256)") and
    shows the pictures and clips as TensorBoard's own routes serve them from that unchanged file:
    a picture in every box, never an empty one."""
    run = "tf_summary_mix"
    tab = Tab(browser, tb)
    f = tab.frame
    try:
        f.locator("input.filter").fill(run)
        f.locator(f'.row[data-run="{run}"] button.reduce-run').click()
        f.locator(".dialog .dialog-confirm").click()
        expect(f.locator(f'.outcome-line[data-run="{run}"][data-status="verified"]')).to_be_visible(timeout=180000)
        f.locator(f'.outcome-line[data-run="{run}"] .show-check').click()
        expect(f.locator(".check-verdict")).to_contain_text("Verified")
        op = [o for o in tb.json(PREFIX + "/operations")["operations"] if o["run"] == run][0]
        detail = tb.json(PREFIX + "/operation?op=" + op["op_id"])
        v = detail["verification"]
        # the engine's side: profile data only, so identity is the proof and no reader ran
        assert v["mode"] == "unchanged" and "tag_summaries" not in v, sorted(v)
        changed = [c["name"] for c in detail["category_changes"] if c["before"] != c["after"]]
        assert changed and all(c.startswith("profile") for c in changed), detail["category_changes"]
        events = v["unchanged"]
        assert len(events) == 1 and all(len(e["sha256"]) == 64 for e in events)
        proof = f.locator("section.identity-proof")
        expect(proof.locator(".identity-title")).to_have_text("✓ 1 event file unchanged (sha256)")
        expect(proof.locator(".identity-files li")).to_contain_text(events[0]["sha256"][:16])
        # the identity lines come before the samples, and the scalars say why there are no curves
        assert proof.bounding_box()["y"] < f.locator("section.touched").first.bounding_box()["y"]
        expect(f.locator(".scalars-unchanged")).to_contain_text("Unchanged")
        # what TensorBoard's images dashboard shows of each image tag, from the unchanged file
        tags = [c for c in tb.json(PREFIX + "/run?run=" + run)["run"]["categories"] if c["name"] == "images"][0]["tags"]
        expected = 0
        for tag in tags[:8]:
            status, body = tb.get("/data/plugin/images/images?run=" + run + "&tag=" + tag + "&sample=0")
            assert status == 200, body
            expected += min(len(json.loads(body)), 12)
        assert expected > 0
        section = f.locator('section.touched[data-plugin="images"]')
        expect(section.locator("img.thumb")).to_have_count(expected, timeout=60000)
        section.scroll_into_view_if_needed()
        tab.page.wait_for_function(
            "() => [...document.querySelector('iframe').contentDocument.querySelectorAll('img.thumb')]"
            ".every(i => i.complete && i.naturalWidth > 0)", timeout=30000)
        assert section.locator(".thumb.loading, .thumb.failed").count() == 0
        # the vault's /sample agrees: the same bytes on both sides
        tag = tags[0]
        step = json.loads(tb.get("/data/plugin/images/images?run=" + run + "&tag=" + tag + "&sample=0")[1])[-1]["step"]
        q = f"/sample?op={op['op_id']}&plugin=images&tag={tag}&step={step}&index=0"
        s0, b0 = tb.get(PREFIX + q + "&side=before")
        s1, b1 = tb.get(PREFIX + q + "&side=after")
        assert s0 == s1 == 200 and b0[:8] == b"\x89PNG\r\n\x1a\n" and b0 == b1
        # bad requests name what is wrong; nothing outside the logdir and the vault is read
        assert tb.get(PREFIX + q + "&side=sideways")[0] == 400
        assert tb.get(PREFIX + f"/sample?op=../../etc&plugin=images&tag=x&step=0&side=before")[0] == 400
        audio = f.locator('section.touched[data-plugin="audio"] audio')
        expect(audio).to_have_count(1)
        src = audio.first.get_attribute("src")
        assert src.startswith("../audio/individualAudio?")
        status, body = tb.get("/data/plugin/" + src[len("../"):])
        assert status == 200 and body[:4] == b"RIFF"
        proof.scroll_into_view_if_needed()
        tab.shot("tab-06-check-samples.png")
        assert tab.our_errors() == [], tab.our_errors()
    finally:
        tab.close()


def test_reduce_all_matching_reshows_the_plan_when_its_runs_changed(browser, tmp_path):
    """Review finding 4 in the browser: the dialog of "Reduce all matching" shows 2 runs; a third
    matching run lands (and is scanned) before the click. The server refuses the stale plan (409,
    nothing reduced), the dialog comes back with the new plan and says why; confirming it reduces
    exactly its 3 runs and leaves the run outside the filter alone."""
    import time

    from test_plugin_routes import _age, _write_run, file_shas

    root = tmp_path / "logs"
    for i, name in enumerate(("grp/a", "grp/b", "other")):
        _write_run(str(root / name), seed=i + 1, sessions=1)
    _age(str(root))
    t = TensorBoard(root)
    tab = None
    try:
        tab = Tab(browser, t)
        f = tab.frame
        f.locator("input.filter").fill("grp/")
        expect(f.locator(".count")).to_have_text("2 of 3 runs match")
        f.locator("button.reduce-all").click()
        expect(f.locator(".dialog h2")).to_have_text("Reduce 2 runs?")
        _write_run(str(root / "grp" / "c"), seed=7, sessions=1)
        _age(str(root / "grp" / "c"))
        other = file_shas(root, "other")
        status, _ = tab.post("rescan", {})
        assert status == 202
        deadline = time.monotonic() + 60
        while t.json(PREFIX + "/runs?q=grp/")["total"] != 3:
            assert time.monotonic() < deadline, "the rescan did not see grp/c"
            time.sleep(0.2)
        f.locator(".dialog .dialog-confirm").click()
        # refused: the new plan is shown, with why, and nothing was started
        expect(f.locator(".dialog h2")).to_have_text("Reduce 3 runs?")
        expect(f.locator(".dialog .dialog-notice")).to_contain_text("changed since the plan you confirmed")
        assert t.json(PREFIX + "/jobs")["jobs"] == [] and t.json(PREFIX + "/operations")["operations"] == []
        tab.shot("tab-07-reduce-matching-plan-changed.png")
        f.locator(".dialog .dialog-confirm").click()
        expect(f.locator('.job-card[data-kind="reduce"] .outcome-line[data-status="verified"]')).to_have_count(3, timeout=180000)
        job = t.json(PREFIX + "/jobs")["jobs"][0]
        assert sorted(job["runs"]) == ["grp/a", "grp/b", "grp/c"] and job["run_count"] == 3
        assert file_shas(root, "other") == other
        assert tab.our_errors() == [], tab.our_errors()
    finally:
        if tab is not None:
            tab.close()
        t.stop()


def test_reduce_all_shown_gives_one_consistent_dashboards_note(browser, tb, demo):
    """Last in this module: it reduces every run. Some runs get rewritten event files, some only
    lose profile data; the note names the former and never says 'nothing to reload' for all."""
    tab = Tab(browser, tb)
    f = tab.frame
    try:
        f.locator("button.reduce-all").click()
        f.locator(".dialog .dialog-confirm").click()
        card = f.locator('.job-card[data-kind="reduce"]').first
        note = card.locator(".dashboards-note")
        expect(note).to_be_visible(timeout=600000)
        text = note.inner_text()
        job = [j for j in tb.json(PREFIX + "/jobs")["jobs"] if j["kind"] == "reduce"][0]
        res = tb.json(PREFIX + "/job?id=" + job["id"])["job"]["result"]
        verified = [o for o in res["outcomes"] if o["status"] == "verified"]
        rewrote = [o["run"] for o in verified
                   if any("tfevents" in os.path.basename(p) for p in o.get("removed_files") or [])]
        assert len(verified) >= 3, len(verified)
        if rewrote:  # some runs' event files changed: restart, and they are named
            assert "Restart TensorBoard" in text
            for run in rewrote[:5]:
                assert run in text
        else:  # archive kept every event file as the default dashboard shows it: nothing to restart for
            assert "Restart TensorBoard" not in text
        # never both "restart" and "nothing to reload" for the same runs
        assert not ("Restart TensorBoard" in text and "nothing to reload" in text and not rewrote)
        assert note.locator("div").count() == len(res["dashboards"])
        # issue 13: the two numbers, as the library's reduce_summary counts them (the CLI prints the same)
        numbers = card.locator(".disk-numbers").inner_text()
        assert res["removed_from_logdir_bytes"] > 0 and "Removed" in numbers and "freed on disk after a purge" in numbers
        assert card.locator(".outcome-line", has_text="from the logdir").count() == len(verified)
        tab.shot("tab-05-reduce-all-note.png")
    finally:
        tab.close()
