"""The tab's header shows what a local logdir's vault keeps in a bucket (issue #27 item 4): once a
reduce sends the backups to ``--backup-dir s3://…``, the disk card says "+ N in bucket" next to
the disk in use (the API's ``disk.remote_vault_bytes``), and says nothing of a bucket before.

Real headless Chromium in a real TensorBoard, the bucket on the moto server. Screenshots (light
and dark) go to test-artifacts/screenshots/tab-remote-vault-*.png.
"""
from __future__ import annotations

from playwright.sync_api import expect

from test_browser import PREFIX, Tab, TensorBoard, browser  # noqa: F401  (fixtures)
from helpers_cli import run_cli
from test_vault_remote import make_logdir

MODULE = PREFIX + "/views/common.js"


def _bytes_in_tab(tab, n: int) -> str:
    """``n`` as the tab's own ``bytes()`` writes it."""
    return tab.frame.locator("body").evaluate(
        "async (_, n) => (await import('" + MODULE + "')).bytes(n)", n)


def test_the_disk_card_shows_the_bytes_the_vault_keeps_in_a_bucket(browser, s3_bucket, tmp_path):
    logdir = make_logdir(tmp_path)
    t = TensorBoard(logdir, log_path=str(tmp_path / "tensorboard.log"))
    tab = None
    try:
        tab = Tab(browser, t)
        f = tab.frame
        expect(f.locator(".disk-in-use")).not_to_have_text("…", timeout=120000)
        assert not t.json(PREFIX + "/summary")["disk"].get("remote_vault_bytes")
        assert f.locator(".disk-card .remote-vault").count() == 0  # no bucket yet: nothing said of one

        url = s3_bucket.url("team-vaults")
        p = run_cli("reduce", logdir, "--backup-dir", url, "--yes", "--verify", "python", "--quiet-period", "0")
        assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
        f.locator("button.rescan").click()
        remote = None
        for _ in range(240):  # the disk numbers are measured after the rescan is served
            remote = t.json(PREFIX + "/summary")["disk"].get("remote_vault_bytes")
            if remote:
                break
            tab.page.wait_for_timeout(500)
        assert remote and remote > 0, t.json(PREFIX + "/summary")["disk"]
        shown = f.locator(".disk-card .remote-vault")
        expect(shown).to_have_count(1, timeout=60000)
        expect(shown.locator(".remote-vault-bytes")).to_have_text(_bytes_in_tab(tab, remote))
        expect(shown).to_contain_text("in bucket")
        # next to the disk in use, which still counts only this disk (the bucket's bytes are not in it)
        disk = t.json(PREFIX + "/summary")["disk"]["disk_in_use_bytes"]
        expect(f.locator(".disk-card .disk-in-use")).to_have_text(_bytes_in_tab(tab, disk))
        f.locator(".disk-card").scroll_into_view_if_needed()
        tab.shot("tab-remote-vault-light.png")
        tab.to_dark()  # TensorBoard's own toggle
        tab.shot("tab-remote-vault-dark.png")
        assert tab.our_errors() == [], tab.our_errors()
    finally:
        if tab is not None:
            tab.close()
        t.stop()
