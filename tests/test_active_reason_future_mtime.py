"""A run whose file is dated in the future (another host's clock, a copy that kept its times) is left
alone as active, and the reason says so: it said "files changed -5461462346 s ago" (review R26, LOW)."""
from tb_footprint_plugin.plan.planner import active_reason


def test_a_file_dated_in_the_future_is_said_so_and_left_alone():
    why = active_reason(newest=1_000 + 90, quiet_period=600, now=1_000)
    assert why is not None and "90 s in the future" in why and "-" not in why.split(";")[0], why


def test_a_recent_write_keeps_its_words_and_a_quiet_run_has_none():
    assert active_reason(newest=1_000 - 30, quiet_period=600, now=1_000).startswith("active: files changed 30 s ago")
    assert active_reason(newest=1_000 - 700, quiet_period=600, now=1_000) is None
