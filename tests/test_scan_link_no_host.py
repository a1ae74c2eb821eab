"""A link named like an xplane in a profile session is no host of it: the scanner never follows a
link, so nothing says it holds one (before, ``rel_link.xplane.pb -> vm.xplane.pb`` made the session's
hosts ['rel_link', 'vm'], shown by the tab and taken by the planner as an xplane present)."""
from tb_footprint_plugin import api
from test_profile_session_link import RUN, _logdir


def test_a_link_named_like_an_xplane_is_no_host(tmp_path):
    logdir, older, _ = _logdir(tmp_path)
    fp = api.scan(str(logdir))
    run = next(r for r in fp.runs if r.name == RUN)
    s = next(s for s in run.sessions if s.path.endswith(older.name))
    assert list(s.hosts) == ["vm"]
