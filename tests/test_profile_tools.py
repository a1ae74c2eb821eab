"""Older-format profile tool outputs (``<host>.overview_page.pb``, ``.tensorflow_stats.pb``, …) are
a category of their own, and each policy treats them as its table says: derived copies of the
xplane where the session has one (the lossless tiers delete them), the session's only profile
data where it has none (kept, and the plan says why); archive removes all profile data."""
import os
import time
from pathlib import Path

import pytest

from tb_footprint_plugin import api, synth
from tb_footprint_plugin.scan import categories as cat

#: tensorboard-plugin-profile's TOOLS table (profile_plugin.py), extension of each tool's file
PLUGIN_TOOL_FILES = ("trace", "op_profile.json", "input_pipeline.json", "input_pipeline.pb", "overview_page.json",
                     "overview_page.pb", "memory_viewer.json", "pod_viewer.json", "tensorflow_stats.pb",
                     "kernel_stats.pb", "memory_profile.json.gz", "tf_data_bottleneck_analysis.json")


@pytest.mark.parametrize("suffix", PLUGIN_TOOL_FILES)
def test_each_tool_suffix_is_a_profile_tool_output(suffix):
    session = ("plugins", "profile", "2020_01_01_00_00_00")
    assert cat.classify_file(session, f"host-1.example.{suffix}") == cat.PROFILE_TOOL_OUTPUTS
    assert cat.classify_file(session, suffix) == cat.PROFILE_TOOL_OUTPUTS  # the plugin's host-less name
    assert suffix in cat.profile_tool_suffixes()
    assert cat.label(cat.PROFILE_TOOL_OUTPUTS) == "profile tool outputs (old format)"
    assert cat.PROFILE_TOOL_OUTPUTS in cat.PROFILE_CATEGORIES and cat.PROFILE_TOOL_OUTPUTS in cat.FILE_LEVEL


def test_neighbours_keep_their_categories():
    session = ("plugins", "profile", "s")
    assert cat.classify_file(session, "h.xplane.pb") == cat.PROFILE_XPLANE
    assert cat.classify_file(session, "h.trace.json.gz") == cat.PROFILE_SECONDARY  # JAX's export
    assert cat.classify_file(session, "perfetto_trace.json.gz") == cat.PROFILE_SECONDARY
    assert cat.classify_file(session, "h.hlo_proto.pb") == cat.PROFILE_CACHE
    assert cat.classify_file(session, "h.op_stats_v2.pb") == cat.PROFILE_CACHE
    assert cat.classify_file((), "w.pt.trace.json") == cat.TORCH_TRACE
    assert cat.classify_file(("plugins", "profile"), "h.overview_page.pb") == cat.PROFILE_OTHER  # not in a session
    assert cat.classify_file(session, "notes.txt") == cat.PROFILE_OTHER


def _session(run: Path, name: str, xplane: bool) -> list:
    d = run / "plugins" / "profile" / name
    d.mkdir(parents=True)
    made = []
    if xplane:
        (d / "host.xplane.pb").write_bytes(os.urandom(4000))
    for i, suffix in enumerate(("overview_page.pb", "input_pipeline.pb", "tensorflow_stats.pb", "kernel_stats.pb",
                                "memory_profile.json.gz", "pod_viewer.json", "op_profile.json", "trace")):
        p = d / f"host.{suffix}"
        p.write_bytes(os.urandom(500 + 100 * i))
        made.append(p)
    return made


def _logdir(tmp_path: Path) -> Path:
    logdir = tmp_path / "logdir"
    for run, xplane in (("with_xplane", True), ("old_only", False)):
        with synth.EventWriter(str(logdir / run)) as w:
            for s in range(5):
                w.scalar("loss", s, 1.0 / (s + 1))
        _session(logdir / run, "2020_01_01_00_00_00", xplane)
    old = time.time() - 3600
    for d, _, fs in os.walk(logdir):
        for n in fs:
            os.utime(os.path.join(d, n), (old, old))
    return logdir


def _tool_actions(rp):
    return sorted((a.kind, os.path.basename(a.path)) for a in rp.actions if a.category == cat.PROFILE_TOOL_OUTPUTS)


def test_scan_counts_tool_outputs_as_their_own_category(tmp_path):
    fp = api.scan(str(_logdir(tmp_path)))
    for r in fp.runs:
        c = r.categories[cat.PROFILE_TOOL_OUTPUTS]
        assert c.files == 8 and c.bytes == sum(500 + 100 * i for i in range(8))
        assert cat.PROFILE_SECONDARY not in r.categories


def test_lossless_removes_them_only_where_the_session_has_an_xplane(tmp_path):
    logdir = _logdir(tmp_path)
    for policy in ("lossless", "keep-latest"):
        p = api.plan(str(logdir), policy)
        rp = p.run("with_xplane")
        acts = _tool_actions(rp)
        assert len(acts) == 8 and {k for k, _ in acts} == {"delete"}
        assert any(line.startswith("profile tool outputs (old format): 8 removed") for line in rp.fidelity)
        assert all("xplane" in a.reason for a in rp.actions if a.category == cat.PROFILE_TOOL_OUTPUTS)
        assert not any(a.kind == "remove_dir" for a in rp.actions)  # the xplane keeps the session
        old = p.run("old_only")
        assert _tool_actions(old) == [] and old.skipped  # the session's only profile data: nothing to do
        i = next(i for i, line in enumerate(old.fidelity) if line.startswith("profile tool outputs (old format): 8 kept"))
        assert "only profile data" in old.fidelity_details[i]


def test_archive_removes_them_with_the_session_and_restore_gives_them_back(tmp_path):
    logdir = _logdir(tmp_path)
    before = {p: p.read_bytes() for p in logdir.rglob("*") if p.is_file()}
    p = api.plan(str(logdir), "archive")
    for run in ("with_xplane", "old_only"):
        rp = p.run(run)
        assert len(_tool_actions(rp)) == 8
        assert any(a.kind == "remove_dir" and a.path.endswith("2020_01_01_00_00_00") for a in rp.actions)
        assert any(line.startswith("profile: 1 session(s) removed") for line in rp.fidelity)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False)
    assert rep.ok, [o.to_dict() for o in rep.outcomes]
    assert not list(logdir.glob("*/plugins/profile/*/host.*"))
    for rp in p.runs:
        assert rp.expected_after_bytes == sum(f.size for f in api.scan(str(logdir)).run(rp.run).files)
    assert all(o.status == "restored" for o in api.restore(str(logdir)))
    assert {p: p.read_bytes() for p in logdir.rglob("*") if p.is_file() and ".tb-footprint" not in str(p)} == before


def test_policies_text_states_what_each_policy_does_with_them(capsys):
    from tb_footprint_plugin.cli import main as cli_main

    assert cli_main(["policies"]) == 0
    out = capsys.readouterr().out
    lossless, archive = out.split("\nkeep-latest")[0], out.split("\narchive")[1]
    assert "delete   profile tool outputs (old format)" in lossless and "old-format tool outputs" in lossless
    assert "delete   profile tool outputs (old format)" in archive
