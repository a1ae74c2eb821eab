"""The Footprint tab in real headless Chromium, inside a real TensorBoard.

Opens TensorBoard, opens the Footprint tab (an iframe), checks the runs are sorted by size,
sees the plan (the dry run), reduces a run, sees the verified before/after check, restores it, and checks on
disk that the run is byte-identical to the start (sha256 of every file). Screenshots of every
state go to ``test-artifacts/screenshots/``.

Skips (with the reason) when /usr/bin/chromium or Playwright is missing.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import time

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHOTS = os.path.join(REPO, "test-artifacts", "screenshots")
PREFIX = "/data/plugin/footprint"
FRAME = 'iframe[src*="name=footprint"]'

if not os.path.exists(CHROMIUM):
    pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium): browser tests skipped", allow_module_level=True)
try:
    from playwright.sync_api import expect, sync_playwright
except ImportError as e:  # pragma: no cover
    pytest.skip(f"playwright is not installed ({e}): browser tests skipped", allow_module_level=True)
if not any(e.name == "footprint" for e in importlib.metadata.entry_points(group="tensorboard_plugins")):
    pytest.skip("the 'footprint' TensorBoard entry point is not installed: run `pip install -e .` first",
                allow_module_level=True)


# ---------------------------------------------------------------------------------------
# a real TensorBoard
# ---------------------------------------------------------------------------------------
from tbproc import TensorBoard as _TensorBoard  # noqa: E402
from tbproc import make_demo  # noqa: E402


class TensorBoard(_TensorBoard):
    """The shared process, waiting for the tab's first scan so the page opens on data."""

    def __init__(self, logdir, *extra, log_path=None):
        super().__init__(logdir, *extra, log_path=log_path)
        self.get(PREFIX + "/runs?wait=60")

    def get(self, path):
        status, _, body = self.request("GET", path, timeout=90)
        return status, body

    def json(self, path):
        status, body = self.get(path)
        assert status == 200, (path, status, body[:300])
        return json.loads(body)

    def wait_job(self, job_id, timeout=180):
        """The job once it is no longer queued or running (or as it is after ``timeout`` s)."""
        deadline = time.time() + timeout
        while True:
            job = self.json(PREFIX + "/job?id=" + job_id)["job"]
            if job["state"] not in ("queued", "running") or time.time() > deadline:
                return job
            time.sleep(0.3)



def disk_state(root):
    """sha256, size and mtime of every file (and every symlink target) outside the vault."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(str(root)):
        dirnames[:] = [d for d in dirnames if d != ".tb-footprint"]
        for n in filenames:
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, str(root))
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
                continue
            st = os.lstat(p)
            with open(p, "rb") as f:
                out[rel] = (hashlib.sha256(f.read()).hexdigest(), st.st_size, st.st_mtime_ns)
    return out


def parse_bytes(text):
    m = re.match(r"([\d.]+)\s*(B|KB|MB|GB|TB)", text.strip())
    assert m, text
    return float(m.group(1)) * {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[m.group(2)]


# ---------------------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return make_demo(tmp_path_factory.mktemp("browser") / "demo_logs")


@pytest.fixture(scope="module")
def tb(demo):
    t = TensorBoard(demo)
    yield t
    t.stop()


@pytest.fixture(scope="module")
def browser():
    os.makedirs(SHOTS, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Tab:
    """TensorBoard's page with the Footprint tab open; console errors collected."""

    def __init__(self, browser, tb, color_scheme="light", height=1100):
        self.context = browser.new_context(viewport={"width": 1400, "height": height}, color_scheme=color_scheme)
        self.page = self.context.new_page()
        # CI runs three test workers on two cores: actions wait for a rescan or a job to land
        self.page.set_default_timeout(90000)
        self.errors = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(tb.base + "/#footprint")
        self.frame = self.page.frame_locator(FRAME)
        self.frame.locator(".row[data-run]").first.wait_for()

    def shot(self, name):
        self.page.wait_for_timeout(250)  # let CSS transitions settle
        self.page.screenshot(path=os.path.join(SHOTS, name))

    def post(self, path, body):
        """A write through the tab's own same-origin fetch with its token (as its buttons do):
        [status, JSON answer]."""
        return self.frame.locator("body").evaluate(
            """async (_, [path, body]) => {
                 const t = await (await fetch('./token')).json();
                 const r = await fetch('./' + path, {method: 'POST', headers: {'Content-Type': 'application/json', [t.header]: t.token},
                                                      body: JSON.stringify(body)});
                 return [r.status, await r.json()];
               }""", [path, body])

    def to_dark(self):
        """Turn TensorBoard's own dark mode on and wait until the tab follows it."""
        self.page.evaluate("() => document.body.classList.add('dark-mode')")
        self.frame.locator("html[data-theme='dark']").wait_for()

    def our_errors(self):
        return [e for e in self.errors if "Refused" in e or "footprint" in e.lower() or "Content Security" in e]

    def close(self):
        self.context.close()


# ---------------------------------------------------------------------------------------
# the tests
# ---------------------------------------------------------------------------------------
def test_reduce_check_restore_in_the_browser(browser, tb, demo):
    start = disk_state(demo)
    api_runs = tb.json(PREFIX + "/runs")["runs"]
    # the largest run that has scalars (so the check has curves) and something to reduce
    target = next(r for r in api_runs if r["removable_bytes"] > 0 and "scalars" in r["categories"])
    name = target["name"]
    tab = Tab(browser, tb)
    f = tab.frame
    try:
        # 1. overview: runs sorted by size, scan time shown, legend with totals
        shown = f.locator(".row[data-run]").evaluate_all("els => els.map(e => e.dataset.run)")
        assert shown == [r["name"] for r in api_runs]
        sizes = [parse_bytes(t) for t in f.locator(".row[data-run] .c-size").all_inner_texts()]
        assert sizes == sorted(sizes, reverse=True)
        expect(f.locator(".scan-time")).to_contain_text("scanned")
        assert f.locator(".legend-item").count() >= 3
        expect(f.locator(".reclaimable")).not_to_have_text("…")
        tab.shot("01-overview.png")

        # filter
        f.locator("input.filter").fill(name)
        expect(f.locator(f'.row[data-run="{name}"]')).to_be_visible()
        assert f.locator(".row[data-run]").count() < len(api_runs) or len(api_runs) == 1
        tab.shot("02-filtered.png")

        # 2. run detail
        f.locator(f'.row[data-run="{name}"] .run-link').click()
        expect(f.locator(".run-title")).to_have_text(name)
        expect(f.locator(".plan-summary")).to_contain_text("Frees")
        assert f.locator("table.categories tbody tr").count() >= 2
        tab.shot("03-run-detail.png")

        # 3. the plan on the page is the dry run: no separate button, nothing changed
        expect(f.locator("button.dry-run")).to_have_count(0)
        expect(f.locator(".plan-box .changes li").first).to_be_visible()
        assert disk_state(demo) == start

        # 4. reduce: the confirmation states the bytes to free and what changes
        f.locator(".plan-box button.reduce-run").click()
        dialog = f.locator(".dialog")
        expect(dialog).to_be_visible()
        expect(dialog.locator(".free-bytes")).to_have_text(re.compile(r"\d"))
        expect(dialog.locator(".changes li").first).to_contain_text("delete")
        tab.shot("05-confirm-reduce.png")
        dialog.locator(".dialog-confirm").click()
        card = f.locator(f'.job-card[data-kind="reduce"]').first
        expect(card).to_be_visible()
        tab.shot("06-reduce-progress.png")
        expect(f.locator('.outcome-line[data-status="verified"]')).to_be_visible(timeout=180000)
        expect(f.locator(".dashboards-note")).to_contain_text("Profile")
        tab.shot("07-reduce-verified.png")
        after = disk_state(demo)
        assert after != start
        assert all(k in start for k in after)  # only removals

        # 5. the visual before/after check
        f.locator(".show-check").first.click()
        expect(f.locator(".check-verdict")).to_contain_text("Verified")
        op = tb.json(PREFIX + "/operations")["operations"][0]
        detail = tb.json(PREFIX + "/operation?op=" + op["op_id"])
        v = detail["verification"]
        tags = v.get("scalar_series") or {}
        if v.get("mode") == "unchanged":
            # only profile data went: the event files are proven the same bytes by sha256 and no
            # reader is started, so there are no curves to draw; the table says why
            expect(f.locator("table.verification")).to_contain_text("unchanged (sha256)")
        assert tags or v.get("mode") == "unchanged", "the reduced run should have scalar tags"
        # scalars: one compact "identical, N points" row per tag, a chart on demand
        expect(f.locator("tr.scalar-row")).to_have_count(len(tags))
        assert f.locator("tr.scalar-row.identical").count() == len(tags)
        if tags:
            first = next(iter(tags))
            row = f.locator("tr.scalar-row").first
            expect(row).to_contain_text(f"identical, {len(tags[first]['before'])} point")
            row.locator("button.show-chart").click()
            expect(f.locator(".chart-cell .uplot-box canvas")).to_have_count(1, timeout=30000)  # uPlot loads on demand; slow under load
        # what the policy touched, per tag, from the verification's own reads
        for plugin, summary in (v.get("tag_summaries") or {}).items():
            expect(f.locator(f'section.touched[data-plugin="{plugin}"] .tag-card')).to_have_count(len(summary["tags"]))
        assert f.locator("table.verification tr").count() >= 3
        assert f.locator("table.verification td.bad").count() == 0
        assert f.locator(".cat-bar-row").count() >= 2
        tab.page.set_viewport_size({"width": 1400, "height": 1800})
        tab.shot("08-before-after-check.png")
        tab.page.set_viewport_size({"width": 1400, "height": 1100})

        # 6. restore it
        f.locator("button.restore-op").click()
        expect(f.locator(".dialog")).to_contain_text("byte for byte")
        tab.shot("09-confirm-restore.png")
        f.locator(".dialog .dialog-confirm").click()
        expect(f.locator('.outcome-line[data-status="restored"]')).to_be_visible(timeout=180000)
        tab.shot("10-restored.png")

        # 7. on disk: byte-identical (content, size, mtime) to the start
        assert disk_state(demo) == start

        # operations and history pages
        f.locator('.nav-item[data-view="operations"]').click()
        expect(f.locator("table.operations tbody tr")).to_have_count(2)
        tab.shot("11-operations.png")
        f.locator('.nav-item[data-view="history"]').click()
        expect(f.locator("table.history tbody tr")).to_have_count(2)
        tab.shot("12-history.png")
        assert tab.our_errors() == [], tab.our_errors()
    finally:
        tab.close()


def test_dark_mode(browser, tb):
    tab = Tab(browser, tb, color_scheme="dark")
    try:
        bg = tab.frame.locator("body").evaluate("b => getComputedStyle(b).backgroundColor")
        assert bg == "rgb(48, 48, 48)", bg
        tab.shot("13-overview-dark.png")
        name = tb.json(PREFIX + "/runs")["runs"][0]["name"]
        tab.frame.locator(f'.row[data-run="{name}"] .run-link').click()
        expect(tab.frame.locator(".run-title")).to_have_text(name)
        tab.shot("14-run-detail-dark.png")
        assert tab.our_errors() == []
    finally:
        tab.close()


def test_purge_flow(browser, tb, demo):
    """Reduce through the API, then purge the backup from the Operations page."""
    runs = tb.json(PREFIX + "/runs")["runs"]
    target = next(r["name"] for r in runs if r["removable_bytes"] > 0)
    tab = Tab(browser, tb)
    f = tab.frame
    try:
        f.locator("input.filter").fill(target)
        f.locator(f'.row[data-run="{target}"] button.reduce-run').click()
        f.locator(".dialog .dialog-confirm").click()
        expect(f.locator('.outcome-line[data-status="verified"]')).to_be_visible(timeout=180000)
        f.locator('.nav-item[data-view="operations"]').click()
        expect(f.locator("a.restore-link").first).to_be_visible()
        # a run restored by an earlier test already had its redundant vault copy released
        purged_before = {o["op_id"] for o in tb.json(PREFIX + "/operations")["operations"] if o["backup_purged"]}
        f.locator("button.purge").click()
        expect(f.locator(".dialog")).to_contain_text("Deletes the backups")
        tab.shot("15-confirm-purge.png")
        f.locator(".dialog .dialog-confirm").click()
        # the second confirmation names how many originals exist only in these backups
        second = f.locator(".dialog")
        expect(second).to_contain_text("for good")
        lost = int(re.search(r"(\d+) original", second.locator(".originals-lost").inner_text()).group(1))
        assert lost >= 1
        tab.shot("15b-confirm-purge-originals.png")
        # backing out at the second question purges nothing
        f.locator(".dialog .dialog-cancel").click()
        expect(f.locator(".dialog")).to_have_count(0)
        expect(f.locator("a.restore-link").first).to_be_visible()
        ops = tb.json(PREFIX + "/operations")["operations"]
        assert {o["op_id"] for o in ops if o["backup_purged"]} == purged_before
        assert lost == sum(o["files"] for o in ops if o["kind"] == "reduce" and o["outcome"] == "verified"
                           and not o["restored_by"])
        f.locator("button.purge").click()
        f.locator(".dialog .dialog-confirm").click()
        expect(f.locator(".dialog")).to_contain_text("for good")
        f.locator(".dialog .dialog-confirm").click()
        expect(f.locator('.job-card[data-kind="purge"]')).to_contain_text("Purged", timeout=60000)
        expect(f.locator("a.restore-link")).to_have_count(0)
        tab.shot("16-purged.png")
        assert tab.our_errors() == []
    finally:
        tab.close()


def test_read_only_banner(browser, demo):
    t = TensorBoard(demo, "--footprint_read_only")
    try:
        tab = Tab(browser, t)
        try:
            banner = tab.frame.locator(".banner-readonly")
            expect(banner).to_contain_text("Read-only")
            expect(banner).to_contain_text("--footprint_read_only")
            assert tab.frame.locator(".row[data-run]").count() > 0  # everything is still shown
            buttons = tab.frame.locator("button.reduce-run")
            assert buttons.count() > 0
            for i in range(buttons.count()):
                assert buttons.nth(i).is_disabled()
            assert tab.frame.locator("button.reduce-all").is_disabled()
            tab.shot("17-read-only.png")
        finally:
            tab.close()
    finally:
        t.stop()


def test_cancel_a_restore_in_the_browser(browser, tmp_path, monkeypatch):
    """The restore's Cancel button, in a real TensorBoard: the restore is held at its first step
    (the lock taken and its begin record written, no original back: failpoint ``restore.journal``
    waiting on a gate file), the job card offers Cancel, a click calls it off; once the gate opens
    the job ends cancelled with the run exactly as reduced (bytes, sizes, mtimes) and still
    restorable, and a second restore puts every file back as it was before the reduce."""
    demo = make_demo(tmp_path / "demo_logs")
    gate = tmp_path / "gate"
    monkeypatch.setenv("TB_FOOTPRINT_FAILPOINTS", "restore.journal=wait")
    monkeypatch.setenv("TB_FOOTPRINT_FAILPOINT_GATE", str(gate))
    start = disk_state(demo)
    from tb_footprint_plugin import api  # the reduce made before TensorBoard starts, as a CLI user would

    plan = api.reduce_logdir(str(demo), dry_run=True, quiet_period=0).plan
    name = next(rp.run for rp in plan.runs if rp.removable_bytes > 0 and not rp.skipped)
    (out,) = api.reduce_logdir(str(demo), dry_run=False, runs=[name], quiet_period=0).outcomes
    assert out.status == "verified", out.to_dict()
    reduced = disk_state(demo)
    assert reduced != start
    t = TensorBoard(demo, log_path=str(tmp_path / "tensorboard.log"))
    tab = None
    try:
        tab = Tab(browser, t)
        f = tab.frame

        f.locator('.nav-item[data-view="operations"]').click()
        expect(f.locator("a.restore-link")).to_have_count(1)
        f.locator("a.restore-link").first.click()
        expect(f.locator(".dialog")).to_contain_text("byte for byte")
        f.locator(".dialog .dialog-confirm").click()
        card = f.locator('.job-card[data-kind="restore"]').first
        cancel = card.locator("button.cancel-job")
        expect(cancel).to_be_visible()  # held before its first put-back: it can still be called off
        expect(card.locator(".job-step")).to_contain_text("starting")
        tab.shot("18-restore-cancellable.png")
        cancel.click()
        expect(card).to_contain_text("cancelling")
        gate.write_text("")
        expect(card).to_contain_text("Cancelled before the commit point: nothing was changed.")
        expect(card.locator("button.cancel-job")).to_have_count(0)
        # the run's line says it was cancelled, not that it failed
        line = card.locator(f'.outcome-line[data-run="{name}"]')
        expect(line).to_have_attribute("data-status", "cancelled")
        expect(line).to_contain_text("cancelled")
        expect(line).not_to_contain_text("failed")
        tab.shot("19-restore-cancelled.png")
        assert disk_state(demo) == reduced
        (op,) = t.json(PREFIX + "/operations")["operations"]
        assert op["restorable"] and not op["restored_by"], op

        # the gate stays open: this restore goes through, every file as it was before the reduce
        f.locator('.nav-item[data-view="operations"]').click()
        f.locator("a.restore-link").first.click()
        f.locator(".dialog .dialog-confirm").click()
        expect(f.locator('.outcome-line[data-status="restored"]')).to_be_visible(timeout=180000)
        tab.shot("20-restored-after-cancel.png")
        # the cancelled job, folded to its line, is muted: no red for what the user called off
        expect(f.locator(".job-summary", has_text="cancelled before the commit point")).to_have_class(re.compile(r"\bmuted\b"))
        assert disk_state(demo) == start
        assert tab.our_errors() == [], tab.our_errors()
    finally:
        if tab is not None:
            tab.close()
        t.stop()


DROP_PROFILES = {"name": "drop-profiles", "rules": {c: "delete" for c in (
    "profile_cache", "profile_secondary", "profile_xplane", "profile_other", "torch_trace")}}


def test_bucket_logdir_in_the_browser(browser, s3_bucket, tmp_path):
    """``tensorboard --logdir s3://…`` against the moto server (TensorBoard reads it through boto3
    with S3_ENDPOINT): the tab shows the breakdown, reduces a drop-only run in the bucket, sees it
    verified, and restores it; the bucket ends byte-identical outside the vault."""
    url = s3_bucket.upload(make_demo(tmp_path / "demo_logs"), "logs")
    pol = tmp_path / "drop-profiles.json"
    pol.write_text(json.dumps(DROP_PROFILES))

    def objects():
        return {k: v for k, v in s3_bucket.hashes("logs").items() if not k.startswith(".tb-footprint/")}

    start = objects()
    t = TensorBoard(url, "--footprint_policy", str(pol), log_path=str(tmp_path / "tensorboard.log"))
    tab = None
    try:
        api_runs = t.json(PREFIX + "/runs")["runs"]
        target = next(r for r in api_runs if r["removable_bytes"] > 0)
        name = target["name"]
        plan = t.json(PREFIX + "/plan?run=" + name)
        assert plan["runs"][0]["removable_bytes"] == target["removable_bytes"] and plan["cost"]
        tab = Tab(browser, t)
        f = tab.frame
        shown = f.locator(".row[data-run]").evaluate_all("els => els.map(e => e.dataset.run)")
        assert shown == [r["name"] for r in api_runs]
        expect(f.locator(".scan-time")).to_contain_text("scanned")
        assert f.locator(".legend-item").count() >= 2
        tab.shot("b01-bucket-overview.png")

        f.locator(f'.row[data-run="{name}"] .run-link').click()
        expect(f.locator(".run-title")).to_have_text(name)
        expect(f.locator(".plan-summary")).to_contain_text("Frees")
        tab.shot("b02-bucket-run-detail.png")
        assert objects() == start

        f.locator(".plan-box button.reduce-run").click()
        dialog = f.locator(".dialog")
        expect(dialog.locator(".changes li").first).to_contain_text("delete")
        dialog.locator(".dialog-confirm").click()
        expect(f.locator('.outcome-line[data-status="verified"]')).to_be_visible(timeout=180000)
        tab.shot("b04-bucket-reduce-verified.png")
        after = objects()
        assert after != start and all(after[k] == start[k] for k in after)  # only removals

        ops = t.json(PREFIX + "/operations")["operations"]
        assert [o["run"] for o in ops] == [name] and ops[0]["restorable"]
        # what the reduce verified, as a disk's operation says it (review R21 PD15): its checks and
        # the plan's lines, in the check page; no reader ran, and the page does not say one did
        assert ops[0]["verified"] is True and ops[0]["fidelity"], ops[0]
        f.locator('.nav-item[data-view="operations"]').click()
        expect(f.locator("table.operations tbody tr")).to_have_count(1)
        f.locator("table.operations a.check-link").first.click()
        expect(f.locator(".check-verdict")).to_contain_text("backed up (the store's checksum)")
        expect(f.locator(".check-verdict")).not_to_contain_text("readers")
        expect(f.locator("table.verification")).to_contain_text("server-side copy (the store's checksum verified)")
        expect(f.locator(".scalars-not-read")).to_be_visible()
        assert f.locator("table.verification td.bad").count() == 0
        expect(f.locator(".check-page, .check-view, body").first).to_contain_text(ops[0]["fidelity"][0])
        tab.page.set_viewport_size({"width": 1400, "height": 1500})
        tab.shot("b04c-bucket-check.png")
        tab.page.set_viewport_size({"width": 1400, "height": 1100})
        f.locator('.nav-item[data-view="operations"]').click()
        expect(f.locator("table.operations tbody tr")).to_have_count(1)
        f.locator("a.restore-link").first.click()
        expect(f.locator(".dialog")).to_contain_text("byte for byte")
        f.locator(".dialog .dialog-confirm").click()
        expect(f.locator('.outcome-line[data-status="restored"]')).to_be_visible(timeout=180000)
        tab.shot("b05-bucket-restored.png")
        assert objects() == start
        assert t.json(PREFIX + "/operations")["operations"][0]["restore_note"] == "restored"
        f.locator('.nav-item[data-view="history"]').click()
        expect(f.locator("table.history tbody tr")).to_have_count(2)
        tab.shot("b06-bucket-history.png")
        assert tab.our_errors() == [], tab.our_errors()
    finally:
        if tab is not None:
            tab.close()
        t.stop()


def test_purge_names_other_users_files_in_the_browser(browser, tmp_path):
    """A run of another user's taken on request (``--include-others-runs``): the purge's second
    confirmation names whose files go for good besides the user's own. Run as root (CI does):
    the run is chowned to a uid nobody has."""
    assert os.geteuid() == 0, "chowns a run to another uid: run as root (CI does)"
    from helpers_runs import write_loss_run
    from tb_footprint_plugin import api

    logdir = tmp_path / "team"
    write_loss_run(logdir / "theirs", seed=21)
    old = 1_600_000_000
    for d, dirs, files in os.walk(logdir / "theirs"):
        for n in files:
            os.utime(os.path.join(d, n), (old, old))
        for n in dirs + files:
            os.chown(os.path.join(d, n), 54321, -1)
    os.chown(logdir / "theirs", 54321, -1)
    (out,) = api.reduce_logdir(str(logdir), dry_run=False, quiet_period=0, verify_backends=("python",),
                               include_others_runs=True).outcomes
    assert out.status == "verified", out.to_dict()
    t = TensorBoard(logdir)
    tab = None
    try:
        tab = Tab(browser, t)
        f = tab.frame
        f.locator('.nav-item[data-view="operations"]').click()
        f.locator("button.purge").click()
        f.locator(".dialog .dialog-confirm").click()
        second = f.locator(".dialog")
        expect(second).to_contain_text("for good")
        expect(second.locator(".others-lost")).to_contain_text("Among them are files of uid 54321")
        tab.shot("21-purge-names-others.png")
        f.locator(".dialog .dialog-cancel").click()
        expect(f.locator(".dialog")).to_have_count(0)
        (op,) = t.json(PREFIX + "/operations")["operations"]
        assert not op["backup_purged"], op
        assert tab.our_errors() == [], tab.our_errors()
    finally:
        if tab is not None:
            tab.close()
        t.stop()
