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


def test_byte_bars_of_a_rewritten_file_show_each_category_with_its_own_bytes(tmp_path):
    """One rewritten event file holding much image data and a little run metadata: the bars show
    'run metadata' with its own few bytes, not the whole file under its name."""
    import os
    import random
    from tb_footprint_plugin import synth
    from tb_footprint_plugin.plan.summary import category_changes

    run = tmp_path / "logs" / "r"
    rng = random.Random(0)
    with synth.EventWriter(str(run)) as w:
        for s in range(40):
            w.scalar("loss", s, 1.0 / (s + 1))
            w.image("sample", s, bytes(rng.getrandbits(8) for _ in range(3000)), 8, 8)
        w.run_metadata("step1", 1, synth.make_run_metadata(4))
    old = 1_000_000_000
    for dp, _, fs in os.walk(tmp_path / "logs"):
        for f in fs:
            os.utime(os.path.join(dp, f), (old, old))
    # run-metadata stripping is opt-in (archive keeps every Graphs tag): ask for it here
    policy = {"name": "archive+strip", "base": "archive", "content": {"strip_run_metadata": True}}
    p = api.plan(str(tmp_path / "logs"), policy)
    rp = p.run("r").to_dict()
    changes = {c["name"]: c for c in category_changes(rp, {})}
    file_size = next(a["bytes_before"] for a in rp["actions"] if a["kind"] == "rewrite")
    assert changes["images"]["before"] > 0.8 * 40 * 3000
    md = [c for n, c in changes.items() if "run_metadata" in n]
    assert md and all(c["before"] < 0.1 * file_size and c["after"] == 0 for c in md)
    assert changes["_unchanged"]["label"] == "everything else (unchanged)"
    assert sum(c["before"] for c in changes.values()) == rp["bytes_before"]


def test_check_data_is_bounded_and_samples_come_from_vault_and_run(tmp_path):
    """The verification's per-tag summaries stay small whatever the run; api.sample serves the
    original from the vault and the reduced from the run, and refuses what it cannot show."""
    import json
    import os

    import pytest

    from tb_footprint_plugin import synth
    from tb_footprint_plugin.verify import compare

    logdir = tmp_path / "logs"
    run = logdir / "r"
    with synth.EventWriter(str(run)) as w:
        for s in range(300):
            w.scalar("loss", s, 1.0 / (s + 1))
            w.histogram("h", s, [((i * 37 + s) % 1000) / 1000.0 for i in range(500)], buckets=400)
        for s in range(30):
            w.image("img", s, synth.make_png(8, 8, seed=s), 8, 8)
        w.run_metadata("step1", 1, synth.make_run_metadata(4))
    for dp, _, fs in os.walk(logdir):
        for f in fs:
            os.utime(os.path.join(dp, f), (1_000_000_000, 1_000_000_000))
    rep = api.reduce_logdir(str(logdir), None, policy="archive", dry_run=False, runs=["r"])
    assert rep.to_dict()["outcomes"][0]["status"] == Outcome.VERIFIED
    m = api.operations(str(logdir))[0]
    ts = m["verification"]["tag_summaries"]
    assert len(json.dumps(ts)) < 60_000
    h = ts["histograms"]["tags"]["h"]
    assert len(h["distribution"]["before"]) <= compare.SUMMARY_MAX_BUCKETS
    assert all(len(side) <= compare.SUMMARY_MAX_STEPS for side in h["shown"])
    img = ts["images"]["tags"]["img"]
    shown = img["shown"][1]
    step = shown[-1]
    before, ctype = api.sample(str(logdir), m["op_id"], "before", "images", "img", step, 0)
    after, _ = api.sample(str(logdir), m["op_id"], "after", "images", "img", step, 0)
    assert ctype == "image/png" and before == after == synth.make_png(8, 8, seed=step)
    dropped = sorted(set(img["shown"][0]) - set(shown)) or sorted(set(range(30)) - set(shown))
    if dropped:  # a step the reduced run no longer holds: the vault still has it
        data, _ = api.sample(str(logdir), m["op_id"], "before", "images", "img", dropped[0], 0)
        assert data == synth.make_png(8, 8, seed=dropped[0])
        with pytest.raises(api.SampleUnavailable) as e:
            api.sample(str(logdir), m["op_id"], "after", "images", "img", dropped[0], 0)
        assert e.value.code == "not_found"
    with pytest.raises(api.SampleUnavailable) as e:
        api.sample(str(logdir), m["op_id"], "sideways", "images", "img", step, 0)
    assert e.value.code == "bad_request"
    api.restore(str(logdir), op=m["op_id"])
    with pytest.raises(api.SampleUnavailable) as e:
        api.sample(str(logdir), m["op_id"], "after", "images", "img", step, 0)
    assert e.value.code == "restored"


def test_disk_numbers_are_the_ones_status_and_history_report(tmp_path):
    """The tab's header (#27.4): disk in use now, freed now and freed after purge, counted as
    ``status`` and ``history`` count them, before and after a reduce and after a purge."""
    import os

    from tb_footprint_plugin import synth

    logdir = tmp_path / "logs"
    with synth.EventWriter(str(logdir / "r")) as w:
        for s in range(50):
            w.scalar("loss", s, 1.0 / (s + 1))
    synth.write_profile_session(str(logdir / "r"), n_events=3000, with_caches=True)
    for dp, _, fs in os.walk(logdir):
        for f in fs:
            os.utime(os.path.join(dp, f), (1_000_000_000, 1_000_000_000))
    before = api.disk_numbers(str(logdir))
    assert before["freed_now_bytes"] == 0 and before["freed_after_purge_bytes"] == 0
    assert before["disk_in_use_bytes"] >= api.scan(str(logdir)).total_bytes * 0.9

    rep = api.reduce_logdir(str(logdir), None, policy="archive", dry_run=False, runs=["r"])
    assert rep.to_dict()["outcomes"][0]["status"] == Outcome.VERIFIED
    now = api.disk_numbers(str(logdir))
    st = api.status(str(logdir))
    assert now["disk_in_use_bytes"] == st["disk_in_use_bytes"]
    assert now["freed_after_purge_bytes"] == st["freed_after_purge_bytes"] > 0
    reduces = [e for e in api.history(str(logdir)) if e.get("kind") == "reduce" and e.get("outcome") == Outcome.VERIFIED]
    assert now["freed_now_bytes"] == sum(e.get("freed_now_bytes") or 0 for e in reduces)

    api.purge(str(logdir), yes=True)
    after = api.disk_numbers(str(logdir))
    assert after["freed_after_purge_bytes"] == 0
    assert after["freed_now_bytes"] == sum(e["removed_from_logdir_bytes"] for e in reduces) > 0
    assert after["disk_in_use_bytes"] < now["disk_in_use_bytes"]
