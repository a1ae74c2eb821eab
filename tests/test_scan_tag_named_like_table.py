"""A scalar tag named like one of the scan's own tables ("stats table", "fold memo") is user data
like any other: every scan (cold, first, warm) reads the logdir and says its tags. 4e67c98 keyed
the tables by tuples of one string in the dict that interns each category's tag set under
``tuple(sorted(tags))``, so a category whose only tag was that string collided: AttributeError or
TypeError from every scan, plan, reduce and the tab (review R21 F1)."""
import json

import pytest

from tb_footprint_plugin import synth
from tb_footprint_plugin.scan.scanner import scan


@pytest.mark.parametrize("tag", ["stats table", "fold memo"])
def test_a_tag_named_like_a_scan_table_is_scanned_as_any_tag(tmp_path, monkeypatch, tag):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    logs = tmp_path / "logs"
    for run, tags in (("a_first", [tag]), ("b_second", ["loss"]), ("c_third", [tag])):
        with synth.EventWriter(str(logs / run)) as w:
            for s in range(5):
                for t in tags:
                    w.scalar(t, s, s / 10)
    want = {"a_first": [tag], "b_second": ["loss"], "c_third": [tag]}
    for kw in (dict(use_cache=False), {}, {}):  # cold, first, warm
        fp = scan(str(logs), **kw)
        got = {r.name: sorted(t for c in r.categories.values() for t in c.tags) for r in fp.runs}
        assert got == want, (kw, got)
        json.dumps(fp.to_dict())
