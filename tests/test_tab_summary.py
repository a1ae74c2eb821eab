"""The library's words shown by the tab: one dashboards note per job, derived from the outcomes."""
from tb_footprint_plugin import api, fmt
from tb_footprint_plugin.codes import Outcome


def _o(run, status, removed=(), created=()):
    return {"run": run, "status": status, "removed_files": list(removed), "created_files": list(created)}


def test_note_of_a_job_with_rewritten_and_untouched_runs_does_not_contradict_itself():
    rewritten = [(_o(f"r{i}", Outcome.VERIFIED, removed=[f"r{i}/events.out.tfevents.1.host"]),
                  [{"kind": "rewrite", "category": "images", "path": f"r{i}/events.out.tfevents.1.host"}])
                 for i in range(3)]
    profile_only = [(_o(f"p{i}", Outcome.VERIFIED, removed=[f"p{i}/plugins/profile/s/h.xplane.pb"]),
                     [{"kind": "delete", "category": "profile_cache", "path": f"p{i}/plugins/profile/s/h.trace.json.gz"}])
                    for i in range(4)]
    lines = api.dashboards_summary("reduce", rewritten + profile_only)
    text = " ".join(lines)
    assert "Restart TensorBoard" in text
    assert "nothing to reload" not in text
    assert "r0, r1, r2" in text                  # the runs whose event files changed are named
    assert "No event file of p0, p1, p2, p3 changed" in text
    assert sum("Profile:" in l for l in lines) == 1  # one profile line, not one per run


def test_note_when_no_event_file_changed_says_nothing_to_reload():
    lines = api.dashboards_summary("reduce", [
        (_o("p", Outcome.VERIFIED), [{"kind": "delete", "category": "profile_cache", "path": "p/plugins/profile/s/x"}])])
    assert any("nothing to reload" in l for l in lines)
    assert not any("Restart" in l for l in lines)


def test_note_when_nothing_changed():
    assert api.dashboards_summary("reduce", [(_o("a", Outcome.ROLLED_BACK), [])]) == [
        "Nothing on disk changed, so every dashboard shows what it showed before."]


def test_single_run_note_is_the_summary_of_one():
    o = _o("a", Outcome.VERIFIED, removed=["a/events.out.tfevents.1.h"])
    assert api.dashboards_note("reduce", o, []) == api.dashboards_summary("reduce", [(o, [])])
