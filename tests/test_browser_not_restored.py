"""The tab's Operations page lists an original a restore left in the vault because another file
stood at its path (``not_restored``, review R6 F5), as it lists the bytes a restore kept in a
file's place: the path, its code, and the command that copies it beside the path. Before, nothing
in the tab named it once the retirement was marked restored. In real headless Chromium inside a
real TensorBoard (the retirement and its restore made by the API in this process, on the demo
logdir the TensorBoard serves). The retirement's own row says what the vault keeps for it (the
original's 320 B, as purge counts it; it said "0 B kept · restored"). Screenshot: test-artifacts/screenshots/kept-not-restored.png."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from test_browser import PREFIX, Tab, browser, demo, tb  # noqa: F401  (fixtures)
from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Finding, Outcome
from tb_footprint_plugin.engine import faults

pytestmark = pytest.mark.usefixtures("disarm_faults")


def test_operations_lists_an_original_left_in_the_vault(browser, tb, demo):
    runs = tb.json(PREFIX + "/runs")["runs"]
    run = min((r for r in runs if r["total_bytes"] > 0 and "/" not in r["name"]), key=lambda r: r["total_bytes"])["name"]
    notes = demo / run / "notes.txt"
    notes.write_bytes(b"lr: 0.1\n" * 40)
    assert api.retire(str(demo), api.retire_rule(runs=[run]), dry_run=False, quiet_period=0).ok

    def standing():  # the run's folder is gone while retired: the writer makes it again
        notes.parent.mkdir(exist_ok=True)
        notes.write_bytes(b"another file\n")

    faults.arm("unretire.journal", standing)
    [o] = api.restore(str(demo), run=run)
    faults.disarm_all()
    assert (o.status, o.code) == (Outcome.RESTORED, Finding.NOT_RESTORED), o.to_dict()
    listed = tb.json(PREFIX + "/operations")
    kept = [k for k in listed["kept_blobs"] if k["code"] == Finding.NOT_RESTORED]
    assert [k["path"] for k in kept] == [f"{run}/notes.txt"], kept
    # its retirement's row counts the original the vault keeps (320 bytes), as purge counts it
    (retired,) = [o for o in listed["operations"] if o["kind"] == "retire" and o["run"] == run]
    assert (retired["kept_bytes"], retired["left_in_vault"]) == (320, 1), retired
    tab = Tab(browser, tb)
    f = tab.frame
    try:
        f.locator('.nav-item[data-view="operations"]').click()
        row = f.locator('.kept-blobs-table tbody tr[data-code="not_restored"]')
        expect(row).to_have_count(1)
        expect(row).to_contain_text(f"{run}/notes.txt's original, not put back by its restore")
        expect(row).to_contain_text("[not_restored]")
        expect(row.locator("code.bring-back")).to_contain_text("cp --preserve=timestamps")
        expect(row.locator("code.bring-back")).to_contain_text("notes.txt.kept")
        backup = f.locator('table.operations tr[data-op="' + retired["op_id"] + '"] td.backup')
        expect(backup).to_have_text("320 B kept · restored; 1 original left in the vault [not_restored]")
        f.locator(".kept-blobs").scroll_into_view_if_needed()
        tab.shot("kept-not-restored.png")
        assert tab.our_errors() == [], tab.our_errors()
    finally:
        tab.close()
