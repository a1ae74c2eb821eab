"""Like runs share their per-category stats and host lists (issue 28 item 1: a scan of 100,000 runs
held ~4 stats of ~120 bytes and a host list a run, most of them equal across a sweep). What each
run, the totals, the JSON and the plan say is unchanged; a shared stat refuses to be changed."""
import os

import pytest

from tb_footprint_plugin.plan.planner import make_plan
from tb_footprint_plugin.scan.model import CategoryStat, footprint_from_dict
from tb_footprint_plugin.scan.scanner import scan

from helpers_runs import copy_runs, small_run_template, write_small_run


@pytest.fixture
def logdir(tmp_path, monkeypatch):
    """Three byte copies of one run, and one run with more steps (its stats differ)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = copy_runs(tmp_path / "logs", small_run_template(str(tmp_path)), 3)
    write_small_run(os.path.join(root, "other"), 7, steps=80)
    return root


def test_like_runs_share_their_stats_and_hosts(logdir):
    fp = scan(logdir)
    like = [fp.run(f"exp00/run{i:05d}") for i in range(3)]
    other = fp.run("other")
    assert set(like[0].categories) >= {"scalars", "histograms", "profile_xplane"}
    for name, c in like[0].categories.items():
        assert all(r.categories[name] is c for r in like[1:]), name  # before: an object a run
    assert other.categories["scalars"] is not like[0].categories["scalars"]
    assert other.categories["scalars"].records == 80 * 4 and like[0].categories["scalars"].records == 40 * 4
    # and the maps of them, and the event files' splits by category
    assert all(r.categories is like[0].categories for r in like[1:])
    assert other.categories is not like[0].categories
    events = [next(f for f in r.files if f.kind == "event") for r in like]
    assert all(e._cats is events[0]._cats for e in events[1:])
    assert events[0].categories == {"file_version": 78, **{k: v for k, v in events[0].categories.items()
                                                           if k != "file_version"}}
    hosts = [r.sessions[0].hosts for r in like + [other]]
    assert hosts[0] == ["host"] and all(h is hosts[0] for h in hosts)


def test_what_the_scan_says_is_unchanged(logdir):
    """Equal to the same scan read back from its JSON (plain stats of its own each), warm or cold,
    totals included; the plan made from it equal to the plan made from the plain copy."""
    for _ in ("cold", "warm"):
        fp = scan(logdir)
        plain = footprint_from_dict(fp.to_dict())
        assert fp == plain and fp.to_dict() == plain.to_dict()
        assert repr(fp.runs[0].categories) == repr(plain.runs[0].categories)
        assert all(type(c) is CategoryStat for c in fp.categories.values())  # totals: each its own
        for name, total in fp.categories.items():
            assert total.bytes == sum(r.categories[name].bytes for r in fp.runs if name in r.categories)
            assert total.records == sum(r.categories[name].records for r in fp.runs if name in r.categories)
        now = max(r.newest_mtime for r in fp.runs) + 10 * 86400
        assert make_plan(fp, "archive", now=now).to_dict() == make_plan(plain, "archive", now=now).to_dict()


def test_a_shared_stat_refuses_change_and_folds_into_one_of_its_own(logdir):
    fp = scan(logdir)
    a, b = fp.run("exp00/run00000"), fp.run("exp00/run00001")
    c = a.categories["scalars"]
    with pytest.raises(TypeError):
        c.bytes += 1
    with pytest.raises(TypeError):
        c.add(b.categories["scalars"])
    with pytest.raises(TypeError):
        a.sessions[0].hosts.append("elsewhere")
    with pytest.raises(TypeError):
        a.categories["scalars"] = CategoryStat(name="scalars")
    assert b.categories["scalars"].bytes == c.bytes and b.sessions[0].hosts == ["host"]
    # what the CLI does to sum a selection: another of the same type, folded into
    total = type(c)(name="scalars")
    assert type(total) is CategoryStat
    total.add(c)
    total.add(b.categories["scalars"])
    assert total.bytes == 2 * c.bytes and total.records == 2 * c.records and total.tags == c.tags
    assert c.bytes == b.categories["scalars"].bytes  # neither run's stat changed


def test_a_scan_copies_and_pickles_into_plain_records(logdir):
    """deepcopy and pickle of a scan (a worker's result, a cached one) give records of their own,
    equal to the original and changeable without touching it (before: TypeError from the shared
    tags' list, and a SharedStat had no way to be made again)."""
    import copy
    import pickle

    fp = scan(logdir)
    for again in (copy.deepcopy(fp), pickle.loads(pickle.dumps(fp))):
        assert again == fp
        r = again.run("exp00/run00000")
        assert type(r.categories["scalars"]) is CategoryStat and type(r.categories) is dict
        r.categories["scalars"].bytes += 1
        r.categories["scalars"].tags.append("more")
        r.sessions[0].hosts.append("elsewhere")
        assert again != fp
        for name in ("exp00/run00000", "exp00/run00001"):  # the original's shared records untouched
            assert "more" not in fp.run(name).categories["scalars"].tags
            assert fp.run(name).sessions[0].hosts == ["host"]
        assert fp == footprint_from_dict(fp.to_dict())
