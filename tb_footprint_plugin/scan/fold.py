"""A run's event files folded into its per-category stats, and like runs' folds shared.

``fold_run`` adds the stats of a run's event files (parsed or cached) to the stats its other
files made, gives each event file its split by category, and replaces what like runs hold
equally by one shared object (``share_stats``). A warm scan of a sweep meets the same inputs run
after run (its event files' cached stats are one ``EventFileStats`` per distinct text:
``cache.cached_stats``), so the fold of inputs met already is taken from ``FoldMemo`` instead of
made again (issue #28 item 1: the fold was ~30% of a warm scan).
"""
from __future__ import annotations

from typing import Dict, List, Tuple

from tb_footprint_plugin.scan import categories as cat
from tb_footprint_plugin.scan.model import CategoryStat, FileEntry, FrozenList, FrozenMap, RunFootprint, SharedStat

#: the shared stats (and folds) remembered at most (then forgotten, not grown: runs unlike each
#: other must not cost a table entry each on top of their own stats)
STATS_KEPT = 256
#: ``names``' keys of its table of shared category stats and of its ``FoldMemo``: objects no
#: tag set can equal (the same dict interns each category's tags under ``tuple(sorted(tags))``,
#: so a key made of strings collides with a scalar named "stats table": review R21 F1 on 4e67c98)
STATS_TABLE = object()
FOLD_TABLE = object()


def shared(table: dict, key, value):
    """The value ``table`` holds for ``key``, else ``value``, made the one to share."""
    found = table.get(key)
    if found is None:
        if len(table) >= STATS_KEPT:
            table.clear()
        found = table[key] = value
    return found


def share_stats(run: RunFootprint, names: dict) -> None:
    """Replace each of a finished run's stats by an equal one a like run already holds (one object
    for all of them: ~120 bytes a category a run at 100,000 runs), else make it the one to share;
    then the same for the run's whole map of them (~300 bytes) and its files' category splits."""
    table = names.get(STATS_TABLE)
    if table is None:
        table = names[STATS_TABLE] = {}
    cats = run.categories
    for name, c in cats.items():
        # the tags list is itself shared by like runs (one per set of tags): its identity is its value
        key = (name, c.bytes, c.files, c.records, id(c.tags), c.min_step, c.max_step, c.max_tag_records)
        found = table.get(key)
        if found is None:
            found = shared(table, key, SharedStat.share(c))
        cats[name] = found
    # keys of three kinds in one table, never equal: a stat's (a name, then ints), a map's (ints
    # only: its shared stats, which the map keeps alive), a file's split (name, int, name, ...)
    if cats:  # (an empty key would be an empty split's too)
        run.categories = shared(table, tuple(id(c) for c in cats.values()), FrozenMap(cats))
    for f in run.files:
        if isinstance(f._cats, tuple) and f._cats:
            f._cats = shared(table, f._cats, f._cats)


def add_bytes(cats: Dict[str, CategoryStat], name: str, nbytes: int, *, files: int = 0,
              records: int = 0, steps=(None, None)) -> CategoryStat:
    """Fold bytes into the run's stat of ``name`` (made on first use): no stat per addition and
    no tag index per run, which ``CategoryStat.add`` keeps for the logdir's totals."""
    c = cats.get(name)
    if c is None:
        c = cats[name] = CategoryStat(name=name)
    c.bytes += nbytes
    c.files += files
    c.records += records
    for s in steps:
        if s is None:
            continue
        c.min_step = s if c.min_step is None else min(c.min_step, s)
        c.max_step = s if c.max_step is None else max(c.max_step, s)
    return c


def fold_event_stats(cats: Dict[str, CategoryStat], st, bindings: Dict[str, str],
                     per_tag: Dict[Tuple[str, str], int], tags: Dict[str, set],
                     names: Dict[str, str]) -> None:
    """Add one event file's per-category stats; a file counts once per category it touches."""
    touched = set()
    for name, fs in st.fixed.items():
        name = names.setdefault(name, name)
        add_bytes(cats, name, fs.bytes, records=fs.records, steps=(fs.min_step, fs.max_step))
        touched.add(name)
    for plugin, by_tag in st.tags.items():
        for tag, ts in by_tag.items():
            name = plugin or bindings.get(tag) or cat.EVENTS_OTHER
            name = names.setdefault(name, name)
            add_bytes(cats, name, ts.bytes, records=ts.records, steps=(ts.min_step, ts.max_step))
            if tag:
                tag = names.setdefault(tag, tag)
                tags.setdefault(name, set()).add(tag)
            per_tag[name, tag] = per_tag.get((name, tag), 0) + ts.records
            touched.add(name)
    for name in touched:
        cats[name].files += 1


def fold_run(run: RunFootprint, others: List[Tuple[str, int]], events: list, names: dict) -> None:
    """Fold ``run``'s files into ``run.categories`` and append an entry for each event file to
    ``run.files``: ``others``, (category, size) of each of its other files in the order it met
    them (their stats made already); ``events``, (``FoundFile``, ``EventFileStats``) of each event
    file in filename order. Then ``share_stats``. The same inputs again (the same stats objects,
    the same sizes: a like run of a warm scan) are served by the fold made for the first."""
    memo = names.get(FOLD_TABLE)
    if memo is None:
        memo = names[FOLD_TABLE] = {}
    # the stats by identity: each key's stats are kept alive by its value, so no id in a key can
    # be another object's while the key is held
    key = (tuple(others), tuple((id(st), f.size) for f, st in events))
    made = memo.get(key)
    if made is not None and all(a is b for a, b in zip(made[0], (st for _f, st in events))):
        _, run.categories, splits, warnings = made
        for (f, st), split in zip(events, splits):
            entry = _event_entry(f, st)
            entry._cats = split
            run.files.append(entry)
        if warnings:
            run.warnings = list(warnings)
        return
    first = len(run.files)
    _fold(run, others, events, names)
    if len(memo) >= STATS_KEPT:
        memo.clear()
    memo[key] = (tuple(st for _f, st in events), run.categories,
                 tuple(e._cats for e in run.files[first:]), tuple(run.warnings))


def _event_entry(f, st) -> FileEntry:
    """The entry of event file ``f`` (the walk's ``FoundFile``) with stats ``st``: its size, time,
    links, allocation and owner from this walk's lstat, never from the cache (a snapshot made since
    changes no key), whether its fold is made or reused."""
    return FileEntry(path=f.rel, size=f.size, mtime=f.mtime, kind="event", warning=st.warning, links=f.nlink,
                     allocated=f.allocated, uid=f.uid)


def _fold(run: RunFootprint, others: List[Tuple[str, int]], events: list, names: dict) -> None:
    """``fold_run``'s fold made afresh."""
    for name, size in others:
        add_bytes(run.categories, name, size, files=1)
    bindings: Dict[str, str] = {}
    for _, st in events:
        for tag, plugin in st.bindings.items():
            bindings.setdefault(tag, plugin)
    per_tag: Dict[Tuple[str, str], int] = {}  # (category, tag) -> records across the run's files
    tags: Dict[str, set] = {}  # category -> its tags in this run (sorted into the stat at the end)
    warnings: List[str] = []  # the run's own list only if it has any (else the shared empty one)
    for f, st in events:
        entry = _event_entry(f, st)
        if st.status == "unreadable":
            entry.categories = {cat.OTHER: f.size}
            add_bytes(run.categories, cat.OTHER, f.size, files=1)
        else:
            entry.categories = {names.setdefault(k, k): v for k, v in st.category_bytes(bindings).items()}
            fold_event_stats(run.categories, st, bindings, per_tag, tags, names)
        if st.warning:
            warnings.append(st.warning)
        run.files.append(entry)
    for (name, _tag), n in per_tag.items():
        c = run.categories[name]
        c.max_tag_records = max(c.max_tag_records, n)
    for name, known in tags.items():
        # like runs (a sweep's) log the same tags: one list no one may change for each set of
        # them (a list a category a run was ~160 bytes a run at 100,000 runs)
        key = tuple(sorted(known))
        found = names.get(key)
        if found is None:
            found = names[key] = FrozenList(key)
        run.categories[name].tags = found
    share_stats(run, names)
    if warnings:
        run.warnings = warnings


__all__ = ["STATS_KEPT", "add_bytes", "fold_event_stats", "fold_run", "share_stats", "shared"]
