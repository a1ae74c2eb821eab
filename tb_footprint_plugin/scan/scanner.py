"""``scan(logdir)``: every byte of a logdir, by run and by category.

Discovery attributes files to runs; event files are categorized per record by
``eventfile`` (or served from the incremental cache); everything else is categorized by
name and place. Per run, categories sum exactly to the apparent size of its files.
"""
from __future__ import annotations

import os
import time
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.scan import categories as cat
from tb_footprint_plugin.scan.discovery import FoundFile, FoundRun, display, dir_size, walk_runs
from tb_footprint_plugin.scan.fold import fold_run
from tb_footprint_plugin.scan.model import (
    CategoryStat,
    DiskTally,
    FileEntry,
    FrozenList,
    LogdirFootprint,
    ProfileSession,
    RunFootprint,
    UNATTRIBUTED,
)
from tb_footprint_plugin.storage.paths import (STATE_DIR_NAME, VAULT_HOLDINGS, cache_dir, is_within, recorded_vaults,
                                              state_dir)
from tb_footprint_plugin.storage.remote import is_remote
from tb_footprint_plugin.storage.store import RangeReader, Store, StoreFailure
from tb_footprint_plugin.scan.cache import ScanCache, cached_stats
from tb_footprint_plugin.scan.parse_pool import ParsePool, parse_ahead

Progress = Callable[[int, int], None]


def scan(
    logdir: str,
    *,
    backup_dir: Optional[str] = None,
    use_cache: bool = True,
    write_cache: bool = True,
    progress: Optional[Progress] = None,
) -> LogdirFootprint:
    """Scan ``logdir``; re-read only event files whose (size, mtime, inode) changed.

    ``write_cache=False`` makes the scan write nothing at all (dry runs use it).
    Raises ``NotADirectoryError``/``FileNotFoundError`` naming the logdir if it is not one.
    """
    if is_remote(logdir):
        return _scan_remote(logdir, backup_dir=backup_dir, use_cache=use_cache,
                            write_cache=write_cache, progress=progress)
    # the walk's start: every size the scan reports is at most this old (a plan's ``planned_at``,
    # which a reduce compares with changes other processes made since)
    started = time.time()
    logdir = os.path.abspath(logdir)
    if not os.path.isdir(logdir):
        raise NotADirectoryError(f"logdir {logdir} is not a directory")
    sdir = state_dir(logdir)
    exclude = [sdir]
    if backup_dir and is_within(backup_dir, logdir):
        exclude.append(os.path.abspath(backup_dir))
    warnings: List[str] = []
    # the blocks the walk's own lstats say, so the disk in use needs no second walk of the logdir
    tally = DiskTally(started=started)
    unreadable: List[dict] = []  # folders the walk could not enter: the plan lists them (review R16 F10)
    # each run's footprint made as the walk goes
    aside: List[dict] = []  # other logdirs' state and vaults left out: a retirement must not move them
    found = walk_runs(logdir, warnings, exclude=exclude, tally=tally, unreadable=unreadable, set_aside=aside)
    cache = ScanCache(cache_dir(logdir) if use_cache else None, write=write_cache)
    with ParsePool() as pool:  # a big logdir's event files parsed on the other cores too
        fp = _assemble(logdir, found, warnings, cache, use_cache=use_cache, write_cache=write_cache,
                       progress=progress, vault_bytes=lambda: _backup_bytes(sdir, backup_dir), started=started,
                       pool=pool)
    fp.disk = tally
    fp.unreadable, fp.set_aside = unreadable, aside
    return fp


def _scan_remote(url: str, *, backup_dir: Optional[str], use_cache: bool, write_cache: bool,
                 progress: Optional[Progress]) -> LogdirFootprint:
    """Scan a bucket logdir (or one under another fsspec scheme, listed and read only) through its
    ``ObjectStore``: ``scan_store``."""
    from tb_footprint_plugin.storage.store_object import ObjectStore

    try:
        store = ObjectStore(url)
    except StoreFailure as e:
        # the client's own refusal as it was (a missing client extra, a URL naming no bucket):
        # its message names the URL already
        raise (e.__cause__ or e) from None
    return scan_store(store, backup_dir=backup_dir, use_cache=use_cache, write_cache=write_cache,
                      progress=progress)


def scan_store(store: Store, *, backup_dir: Optional[str] = None, use_cache: bool = True,
               write_cache: bool = True, progress: Optional[Progress] = None) -> LogdirFootprint:
    """Scan the logdir whose objects ``store`` holds (an ``ObjectStore``, or any ``Store`` around
    one: every request goes through it): one recursive listing, event files streamed by ranged
    reads (``open_read``), the cache in the store (``read_all``/``put``) keyed on size +
    ETag/generation. ``NotADirectoryError`` when there is no such bucket."""
    started = time.time()
    try:
        objects = _listing(store)
    except FileNotFoundError:
        raise NotADirectoryError(f"logdir {store.location}: no such bucket") from None
    return scan_bucket(store, objects, backup_dir=backup_dir, use_cache=use_cache,
                       write_cache=write_cache, progress=progress, listed_at=started)


def _listing(store: Store) -> dict:
    """Every object under the root of ``store`` (a logdir, or a vault in another prefix or bucket),
    keyed relative to it: one paginated listing through the ``Store`` interface (``list``, every
    key: the listing the bucket engine makes); a URL of another fsspec scheme (scanned and planned
    only, never changed) the same way, its store listed and read only
    (``store_object.LISTED_ONLY_CAPABILITIES``). ``FileNotFoundError`` when there is no such bucket."""
    from tb_footprint_plugin.storage.store_object import listing_of

    try:
        return listing_of(store)
    except StoreFailure as e:
        if e.code == StoreError.NOT_FOUND:
            raise FileNotFoundError(str(e)) from None
        raise


def scan_bucket(store: Store, objects, *, backup_dir: Optional[str] = None, use_cache: bool = True,
                write_cache: bool = True, progress: Optional[Progress] = None,
                listed_at: Optional[float] = None) -> LogdirFootprint:
    """The scan of a bucket logdir from a listing of its ``store`` already made (``_listing``, or
    the bucket engine's), so a reduction plans and checks versions against the very listing it
    scanned; ``listed_at``: when that listing started (the scan's ``scanned_at``; now when not
    given). Every read goes through ``store`` (the ``Store`` interface); a vault in another prefix
    or bucket is listed through a store beside it (``ObjectStore.sibling``: the same client and
    request counters). ``fp.requests``: the requests ``store`` counted (``store.stats``)."""
    from tb_footprint_plugin.scan.discovery import discover_listing
    from tb_footprint_plugin.scan.cache import RemoteScanCache

    url = store.location
    exclude = []
    vault_prefixes = [STATE_DIR_NAME + "/blobs/"]
    if backup_dir and is_remote(backup_dir) and backup_dir.rstrip("/").startswith(url + "/"):
        inner = backup_dir.rstrip("/")[len(url) + 1:]
        exclude.append(inner)
        vault_prefixes.append(inner + "/blobs/")
    found = discover_listing(url, objects, exclude=exclude)
    cache_rel = f"{STATE_DIR_NAME}/scan-cache.json"
    listed_cache = objects.get(cache_rel)
    cache = RemoteScanCache(store, cache_rel, present=listed_cache is not None,
                            size=listed_cache.size if listed_cache is not None else None) \
        if use_cache else ScanCache(None)

    def opener(f: FoundFile):
        try:
            return store.open_read(f.rel, f.size)
        except StoreFailure as e:  # a listed key no call can address ('a/../b'): unreadable, named
            return RangeReader(_failing(e), f.size, f"{url}/{f.rel}")

    vault_listed: List[Tuple[str, int]] = []  # (store path, bytes) of a vault in another prefix

    def vault_bytes() -> int:
        total = sum(o.size for k, o in objects.items() if any(k.startswith(p) for p in vault_prefixes))
        if backup_dir and not is_remote(backup_dir):
            total += _blob_folder_bytes(backup_dir)
        if backup_dir and is_remote(backup_dir) and not backup_dir.rstrip("/").startswith(url + "/"):
            try:
                other = store.sibling(backup_dir)
                # the whole vault in one listing (its blobs are most of it): what it stores is
                # then known too, without a listing more (``listed_vault``)
                held = _listing(other)
                total += sum(o.size for k, o in held.items() if k.startswith("blobs/"))
                vault_listed.append((other.root, sum(o.size for o in held.values())))
            except (OSError, ValueError):
                pass
        return total

    listed = sum(o.size for o in objects.values())  # before the runs' listings are let go

    def runs():  # each run's listing let go once its footprint is made
        for name in list(found.runs):
            yield found.runs.pop(name)

    fp = _assemble(url, runs(), found.warnings, cache, use_cache=use_cache, write_cache=write_cache,
                   progress=progress, vault_bytes=vault_bytes, opener=opener, started=listed_at,
                   total_event_files=sum(1 for r in found.runs.values() for f in r.files if _is_summary_event(f)))
    fp.requests = store.stats.to_dict()
    fp.listed_bytes = listed
    fp.listed_vault = vault_listed[0] if vault_listed else None
    fp.set_aside = found.set_aside
    return fp


def _failing(e: OSError) -> Callable[[int, int], bytes]:
    """A reader's fetch that raises ``e`` (the record reader then reports the file unreadable)."""
    def fetch(_start: int, _end: int) -> bytes:
        raise e
    return fetch


def _assemble(logdir: str, found: Iterator[FoundRun], found_warnings: List[str], cache: ScanCache, *,
              use_cache: bool, write_cache: bool, progress: Optional[Progress], vault_bytes: Callable[[], int],
              opener: Optional[Callable] = None, started: Optional[float] = None,
              total_event_files: Optional[int] = None, pool: Optional[ParsePool] = None) -> LogdirFootprint:
    """Footprints of discovered runs (event files read or served from the cache), and totals;
    ``found``: the runs as the walk yields them (``found_warnings`` filled as it goes); ``pool``:
    where local event files are parsed ahead (``parse_ahead``);
    ``started``: when the walk or listing began (``scanned_at``); ``total_event_files``: for the
    progress, when known before (a listing); else the event files found so far."""
    counters = {"read": 0, "cached": 0}
    seen = [0, 0]  # event files done, event files found

    def tick():
        seen[0] += 1
        if progress:
            progress(seen[0], total_event_files if total_event_files is not None else seen[1])

    names: Dict[str, str] = {}
    runs = []
    try:
        # each run's walk is let go once its footprint is made: memory holds the footprints and
        # one run's walk, never the whole logdir's walk beside them (the scan's peak at 100,000 runs)
        ahead = (parse_ahead(found, pool, lambda f: cached_stats(cache, f), _is_summary_event)
                 if pool is not None and opener is None else ((r, None) for r in found))
        for r, ready in ahead:
            seen[1] += sum(1 for f in r.files if _is_summary_event(f))
            runs.append(_run_footprint(r, cache, counters, tick, opener, names, ready))
        # (-bytes, name) in two stable sorts on what the runs hold: a key tuple a run was ~100 bytes
        # at the scan's peak
        runs.sort(key=lambda r: r.name)
        runs.sort(key=lambda r: r.total_bytes, reverse=True)
        warnings = list(found_warnings)
        if use_cache and write_cache:
            cache.retain_looked_up()  # each event file found was looked up: the others are gone
            w = cache.save()
            if w:
                warnings.append(w)
    finally:
        cache.close()  # the cache read, and one being written that an error left unsaved
    totals: Dict[str, CategoryStat] = {}
    for r in runs:
        for c in r.categories.values():
            totals.setdefault(c.name, CategoryStat(name=c.name)).add(c)
    return LogdirFootprint(
        logdir=logdir,
        scanned_at=started if started is not None else time.time(),
        total_bytes=sum(r.total_bytes for r in runs),
        runs=runs,
        categories=dict(sorted(totals.items(), key=lambda kv: -kv[1].bytes)),
        vault_bytes=vault_bytes(),
        warnings=warnings,
        files_read=counters["read"],
        files_cached=counters["cached"],
    )


def _backup_bytes(sdir: str, backup_dir: Optional[str]) -> int:
    """Bytes the default vault and every vault this logdir used hold (``VAULT_HOLDINGS``: backups,
    the packs small ones are kept in, retired runs), as ``status`` counts them."""
    roots = {sdir}
    if backup_dir:
        roots.add(os.path.abspath(backup_dir))
    roots.update(recorded_vaults(sdir))
    return sum(dir_size(os.path.join(r, sub)) for r in roots for sub in VAULT_HOLDINGS
               if os.path.isdir(os.path.join(r, sub)))


def _blob_folder_bytes(folder: str) -> int:
    """Bytes a bucket logdir's local backup folder (``--backup-dir``: a ``BlobStore``, not a disk
    vault) holds as stored: its data objects (blobs, packs; not its index), as ``status`` counts
    them (``vault_stored_bytes``: ``BlobStore.stats``' listing of ``data/``)."""
    from tb_footprint_plugin.storage.blobstore import DATA  # the bucket's path alone loads it

    path = os.path.join(os.path.abspath(folder), DATA)
    # a link there leads out of the vault: nothing of ours to count (never followed)
    return dir_size(path) if os.path.isdir(path) and not os.path.islink(path) else 0


def _is_summary_event(f: FoundFile) -> bool:
    # (the name after the last '/': os.path.basename's, asked ~3 times a file)
    return not f.is_symlink and cat.is_summary_event_file_name(f.rel[f.rel.rfind("/") + 1:])


def _event_stats(f: FoundFile, cache: ScanCache, counters: dict, opener: Optional[Callable] = None,
                 ready: Optional[Dict[str, tuple]] = None):
    if ready is None:
        stats, from_cache = cached_stats(cache, f), True
    else:  # the cache was asked already
        stats, from_cache = ready.get(f.rel, (None, False))
    if stats is not None and from_cache:
        counters["cached"] += 1
        return stats
    if stats is None:
        # imported only to read a file: the parser brings numpy, a scan served from its cache none
        from tb_footprint_plugin.scan.eventfile import event_file_stats

        source = opener(f) if opener else f.abspath
        stats = event_file_stats(source, display_name=display(f.rel), size=f.size)
    counters["read"] += 1
    # A file being appended to changes key on every scan anyway; caching it is harmless.
    if stats.status != "unreadable":
        cache.put(f.rel, f.cache_key, stats.to_dict())
    return stats


def _run_footprint(found: FoundRun, cache: ScanCache, counters: dict, tick,
                   opener: Optional[Callable] = None, names: Optional[Dict[str, str]] = None,
                   ready: Optional[Dict[str, tuple]] = None) -> RunFootprint:
    """One run's footprint. ``names``: the scan's own table of category and tag names, so a name
    100,000 runs share is one string (each cache hit parses its own copies), and of what like
    runs share (``fold``); ``ready``: its event files' stats already at hand (``parse_ahead``: a
    file not in it was neither cached nor parsed)."""
    names = {} if names is None else names  # also: a tuple of tags -> the one list of them
    run = RunFootprint(
        name=found.name, path=found.name, has_event_files=found.has_event_files, uid=found.uid
    )
    others: List[Tuple[str, int]] = []  # (category, size) of each file not an event file
    event_stats = []  # (FoundFile, EventFileStats) in filename order, as TensorBoard reads
    for f in found.files:
        run.newest_mtime = max(run.newest_mtime, f.mtime)
        run.total_bytes += f.size
        if _is_summary_event(f):
            event_stats.append((f, _event_stats(f, cache, counters, opener, ready)))
            tick()
            continue
        category = cat.SYMLINK if f.is_symlink else cat.classify_file(
            f.run_rel_parts, f.rel[f.rel.rfind("/") + 1:]
        )
        run.files.append(
            FileEntry(path=f.rel, size=f.size, mtime=f.mtime, kind="symlink" if f.is_symlink else "file",
                      categories={category: f.size}, links=f.nlink,
                      allocated=f.allocated, uid=f.uid)
        )
        others.append((category, f.size))
    fold_run(run, others, event_stats, names)
    run.files = sorted(run.files, key=lambda e: e.path)  # as long as it is (appended to, it kept spare room)
    run.sessions = _sessions(found, names)
    return run


def _sessions(found: FoundRun, names: Optional[Dict[str, str]] = None) -> List[ProfileSession]:
    """The run's profile sessions; ``names``: the scan's table of shared strings (a sweep's runs
    mostly profile on the same few hosts: one string per host name, not one per run)."""
    names = {} if names is None else names
    sessions: Dict[str, ProfileSession] = {}
    hosts: Dict[str, List[str]] = {}  # session -> its hosts (sessions without any share one empty list)
    out: List[ProfileSession] = []
    for f in found.files:
        parts = f.run_rel_parts
        name = f.rel[f.rel.rfind("/") + 1:]
        if len(parts) >= 3 and parts[0] == "plugins" and parts[1] == "profile":
            s = sessions.get(parts[2])
            if s is None:
                prefix = f.rel[: -len("/".join(parts[3:] + (name,))) - 1]
                s = sessions[parts[2]] = ProfileSession(
                    name=parts[2], path=prefix, mtime=0.0, bytes=0, files=0, kind="xprof"
                )
            s.bytes += f.size
            s.files += 1
            s.mtime = max(s.mtime, f.mtime)
            for suffix in (".xplane.pb", ".xplane.riegeli"):
                # a link named like an xplane is no host: it is never followed, so nothing says it holds one
                if name.endswith(suffix) and len(parts) == 3 and not f.is_symlink:
                    host = name[: -len(suffix)]
                    hosts.setdefault(parts[2], []).append(names.setdefault(host, host))
        elif not f.is_symlink and cat.is_torch_trace_name(name):
            out.append(ProfileSession(name=name, path=f.rel, mtime=f.mtime, bytes=f.size, files=1,
                                      hosts=[cat.torch_worker(name) or name], kind="torch"))
    for path, mtime in found.empty_sessions:
        out.append(ProfileSession(name=os.path.basename(path), path=path, mtime=mtime, bytes=0, files=0))
    for key, found_hosts in hosts.items():
        # like runs profile on the same hosts: one list no one may change for each list of them
        hkey = tuple(found_hosts)
        shared = names.get(hkey)
        if shared is None:
            shared = names[hkey] = FrozenList(hkey)
        sessions[key].hosts = shared
    out.extend(sessions.values())
    return sorted(out, key=lambda s: (s.kind, s.mtime, s.name))  # a list as long as it is


__all__ = ["scan", "LogdirFootprint", "RunFootprint", "UNATTRIBUTED"]
