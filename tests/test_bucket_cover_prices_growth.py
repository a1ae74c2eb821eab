"""A batch's checking listing prices the whole logdir at what its listing holds now (issue #28,
r37 task K item 3): the listing the plan was made from counted the state folder and a vault
inside the logdir as they were then, but the reduce's own backup copies and manifests land in
that vault batch after batch. Priced at the plan's count, the rule chose the whole logdir's
listing — backups and manifests included, pages more than priced — where the runs' folders took
fewer pages (report r36 B: ~7 pages a "." listing priced 4, at 2,000 runs and 4 workers)."""
import concurrent.futures

from test_scale_buckets import counted, templates  # noqa: F401 - fixtures: moto behind the counting proxy
from tb_footprint_plugin.engine.bucket_objects import BucketState
from tb_footprint_plugin.engine.bucket_state import BucketVault, listing_of_runs
from tb_footprint_plugin.storage.store_object import ObjectStore


def test_the_whole_logdir_is_priced_with_the_vault_objects_written_since_its_listing(counted, templates):  # noqa: F811
    bucket, proxy, listed = counted
    items = {}
    for i in range(8):  # two folders of four runs (an event file and three profile objects each)
        for rel, data in templates[i % len(templates)].items():
            items[bucket.key(f"logs/exp{i // 4}/run{i}/{rel}")] = data
    for i in range(900):  # and objects of no run: the listing is one page, just
        items[bucket.key(f"logs/notes/n{i:04d}.txt")] = b"x"
    bucket.fs.pipe(items)
    bucket.fs.invalidate_cache()
    url = bucket.url("logs")
    ostore = ObjectStore(url)
    vault = BucketVault.for_logdir(ostore)
    st = BucketState.of(ostore)
    known = st.tree()  # the plan's listing: one page
    assert len(known) == len(items) < 1000
    # what a reduce's batches write into the vault inside the logdir (backup copies, manifests):
    # 1,100 objects more, so the whole listing is three pages now, the two folders a page each
    assert vault.root.startswith(ostore.root + "/")
    # (eight at a time: each create is one request through the counting proxy, the moto server's
    # thread per connection answering; counted by the state whichever thread made it)
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda i: st.create(f"{vault.root}/ops/growth-{i:04d}.json", {"i": i}), range(1100)))
    runs = [f"exp{i // 4}/run{i}" for i in range(8)]

    proxy.reset()
    listed.clear()
    objs = listing_of_runs(ostore, vault, runs, len(known), known=known)
    # the two folders, one request each: not the whole logdir's three pages (priced one, before)
    assert listed == ["logs/exp0/", "logs/exp1/"], listed
    assert proxy.counts.get("list") == 2
    assert set(objs) == {k for k in known if k.startswith(("exp0/", "exp1/"))}
    # what the rule priced the whole logdir at: the listing's objects and those written since
    assert st.objects_now() == len(known) + 1100

    # a whole listing counts afresh; deletes through the same state count down
    assert len(st.tree()) == len(known) + 1100 and st.objects_now() == len(known) + 1100
    st.delete([f"{vault.root}/ops/growth-{i:04d}.json" for i in range(1100)])
    assert st.objects_now() == len(known)
    proxy.reset()
    listed.clear()
    listing_of_runs(ostore, vault, runs, len(known), known=known)
    assert listed == ["logs/"], listed  # one page again: the whole logdir is the cheaper listing
