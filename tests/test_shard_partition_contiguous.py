"""The shard partition cuts the runs in key order (issue #28, r37 task K): each worker takes a
contiguous stretch of the sorted runs, so on a bucket the checking listings of a batch cover the
few folders of its own runs, and four workers together list what one worker lists.

Before, the partition packed runs largest first into the lightest shard, ties by a hash of the
name: every worker held runs of every folder, and each worker's batch listed every folder (at
10,000 runs on moto: 866 listing pages for 4 workers against 240 for one, report r36 B)."""
import random

import pytest

from test_scale_buckets import counted, templates  # noqa: F401 - fixtures: moto behind the counting proxy
from tb_footprint_plugin import api
from tb_footprint_plugin.plan import shard as sharding
from tb_footprint_plugin.plan.shard import partition, weight


def _sizes(n, seed=1, logdirs=("logs",)):
    rng = random.Random(seed)
    return {f"{rng.choice(logdirs)}\0team{rng.randrange(9)}/run-{i:05d}": int(rng.lognormvariate(16, 1.5))
            for i in range(n)}


@pytest.mark.parametrize("count", [2, 3, 4, 7, 16, 100])
def test_each_shard_is_a_contiguous_stretch_of_the_sorted_keys_within_the_weight_bound(count):
    sizes = _sizes(2000, seed=count, logdirs=("s3://b/a", "s3://b/a/x", "/logs/b"))
    got = partition(sizes, count)
    order = [got[k] for k in sorted(sizes)]
    assert order == sorted(order)  # shard i's keys all sort before shard i+1's
    loads = [0] * count
    for k, s in got.items():
        loads[s] += weight(sizes[k])
    total, largest = sum(weight(v) for v in sizes.values()), max(weight(v) for v in sizes.values())
    assert max(loads) <= total / count + largest, (max(loads), total / count, largest)
    # each logdir's runs together, a folder's runs together: a shard holds a folder whole but
    # for the folders at its two cuts, so the shards together touch at most folders + count - 1
    folders = {k.rsplit("/", 1)[0] for k in sizes}
    touched = sum(len({k.rsplit("/", 1)[0] for k, s in got.items() if s == i}) for i in range(count))
    assert touched <= len(folders) + count - 1, (touched, len(folders))


def test_a_weight_that_moved_moves_only_runs_next_to_a_cut_and_only_to_a_neighbouring_shard():
    sizes = _sizes(1000)
    a = partition(sizes, 8)
    keys = sorted(sizes)
    grown = dict(sizes)
    grown[keys[10]] = sizes[keys[10]] + 20_000_000  # a run near the start grew
    grown["logs\0team0/run-new"] = 40_000_000  # and one appeared
    b = partition(grown, 8)
    moved = [k for k in sizes if a[k] != b[k]]
    assert all(abs(a[k] - b[k]) == 1 for k in moved)
    # at most the runs within the change's weight of one of the 7 cuts
    d = weight(grown[keys[10]]) - weight(sizes[keys[10]]) + weight(40_000_000)
    near = 0
    before = 0
    cuts = [c * sum(weight(v) for v in sizes.values()) / 8 for c in range(1, 8)]
    for k in keys:
        mid = before + weight(sizes[k]) / 2
        near += any(abs(mid - c) <= d for c in cuts)
        before += weight(sizes[k])
    assert len(moved) <= near < len(sizes) / 4, (len(moved), near)


def test_no_weight_at_all_cuts_by_count():
    assert partition({f"r{i}": 0 for i in range(8)}, 4) == {f"r{i}": i // 2 for i in range(8)}
    assert partition({}, 3) == {}


FOLDERS, PER_FOLDER, FILLER = 4, 8, 420
#: the listing page the checks price with, made small (pricing only: moto's pages stay 1,000 keys),
#: so that a few hundred objects of no run make the whole logdir dearer than its runs' folders
PAGE = 100


def _logdir(bucket, prefix, templates):
    """``FOLDERS`` folders of ``PER_FOLDER`` runs (an event file and 3 profile objects each) and
    ``FILLER`` small objects in a folder of no run: the whole logdir's listing is priced 6 pages of
    ``PAGE`` keys, more than the runs' folders' one page each, so a batch's checks list folders
    (``cover_prefixes``)."""
    items = {}
    for i in range(FOLDERS * PER_FOLDER):
        for rel, data in templates[i % len(templates)].items():
            items[bucket.key(f"{prefix}/exp{i // PER_FOLDER}/run{i:03d}/{rel}")] = data
    for i in range(FILLER):
        items[bucket.key(f"{prefix}/notes/n{i:05d}.txt")] = b"x"
    keys = list(items)
    for i in range(0, len(keys), 2000):
        bucket.fs.pipe({k: items[k] for k in keys[i:i + 2000]})
    bucket.fs.invalidate_cache()
    return bucket.url(prefix)


def _checking_lists(listed, prefix):
    """The listings of a run's folder or a run (the batches' checks before and after the delete step)."""
    return [p for p in listed if p.startswith(f"{prefix}/exp")]


def test_four_shard_workers_list_the_folders_one_worker_lists(counted, templates, monkeypatch):  # noqa: F811
    from tb_footprint_plugin.engine import bucket_state

    monkeypatch.setattr(bucket_state, "LIST_PAGE_KEYS", PAGE)
    bucket, proxy, listed = counted
    one, four = _logdir(bucket, "one", templates), _logdir(bucket, "four", templates)
    runs = {f"exp{i // PER_FOLDER}/run{i:03d}" for i in range(FOLDERS * PER_FOLDER)}

    listed.clear()
    rep = api.reduce_logdir(one, policy="archive", dry_run=False, quiet_period=0, shard=(0, 1))
    assert {o.run for o in rep.outcomes if o.status == "verified"} == runs
    by_one = _checking_lists(listed, "one")
    # one batch of all the runs: each folder listed before the delete step and after it
    assert sorted(by_one) == sorted(f"one/exp{f}/" for f in range(FOLDERS) for _ in range(2)), by_one

    listed.clear()
    done = set()
    for i in range(4):
        rep = api.reduce_logdir(four, policy="archive", dry_run=False, quiet_period=0, shard=(i, 4))
        mine = {o.run for o in rep.outcomes if o.status == "verified"}
        assert mine and not mine & done
        done |= mine
    assert done == runs
    by_four = _checking_lists(listed, "four")
    # the four workers' checks: the folders one worker lists, and at most the folder at each of
    # the three cuts listed by both its workers (interleaved shards listed every folder, each)
    assert len(by_four) <= len(by_one) + 2 * 3, (by_four, by_one)
    # the partition the workers used, computed again: each a stretch of whole folders here
    # (every folder weighs the same: its runs are the same four templates)
    shards = [sharding.select(api.shard_sizes([four]), (i, 4)) for i in range(4)]
    assert [sorted({k.split("\0")[1].split("/")[0] for k in s}) for s in shards] == [[f"exp{i}"] for i in range(4)]
