"""Reading a bucket logdir's manifests from its vault: untrusted input, read through the one schema.

Every verb of the bucket engine that asks what the vault holds (status, history, re-check, restore,
purge, kept objects) reads the manifests here: listed by one paginated listing of the vault's store,
read a few at once, each checked (``engine.manifest.read`` and a bucket's file entries), whose it is
told (``bucket_moved.whose``: this logdir's, another logdir's sharing the vault, or unsure when a
listing failed), and the ones a verb may act on picked out (``own_manifests``).
"""
from __future__ import annotations

from typing import Iterable, Iterator, List, Optional

from tb_footprint_plugin.codes import Failure, Finding, StoreError
from tb_footprint_plugin.engine import manifest
from tb_footprint_plugin.engine.bucket_blobs import entry_ok, names_our_backup
from tb_footprint_plugin.engine.bucket_moved import MADE_AT, OTHERS, UNSURE, made_at_words, map_moved, unsure_row, whose
from tb_footprint_plugin.engine.bucket_state import BucketState, BucketVault, vault_url
from tb_footprint_plugin.engine.trust import Untrusted
from tb_footprint_plugin.storage.remote import map_ordered
from tb_footprint_plugin.storage.store import StoreFailure
from tb_footprint_plugin.storage.store_object import ObjectStore, listing_of

__all__ = ["manifest_listing", "manifests", "own_manifests", "read_listed", "usable_manifest"]


def _entries_damage(doc: dict) -> Optional[str]:
    """What a bucket's file entries need beyond the one schema's checks (``engine.manifest.read``):
    a backup key, or a blob of the folder with its digest; the store's checksums as an object."""
    for f in doc["files"]:
        if not (isinstance(f.get("backup"), str) or (entry_ok(f) and f.get("sha256"))) \
                or not isinstance(f.get("checksums", {}), dict):
            return "a file entry is not a path, backup, size and checksums"
    return None


def _strings(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _verification_ok(v) -> bool:
    """Whether a manifest's ``verification`` (``bucket_verified``) is of the shape the operations
    list reads: an object whose ``ok``, when there, is true or false, whose ``checks`` are
    ``{name, ok, detail}`` and ``failed`` a list (its items read as a disk's are: a number that is
    no finite one is null, ``catalogue_rules.operation_summary``; other keys are the writer's own)."""
    if not isinstance(v, dict) or not isinstance(v.get("ok", False), bool) or not isinstance(v.get("failed", []), list):
        return False
    checks = v.get("checks", [])
    return isinstance(checks, list) and all(isinstance(c, dict) and isinstance(c.get("name"), str)
                                            and isinstance(c.get("ok"), bool) and isinstance(c.get("detail"), str)
                                            for c in checks)


def _plan_ok(v) -> bool:
    """Whether a manifest's ``plan`` (``bucket_verified.plan_record``) holds fidelity lines as strings."""
    return isinstance(v, dict) and _strings(v.get("fidelity", [])) and _strings(v.get("fidelity_details", []))


#: a bucket manifest's descriptive fields and the shape each must have to be read (untrusted)
DESCRIBED = {"verification": _verification_ok, "plan": _plan_ok}


def manifests(ostore: ObjectStore, vault: BucketVault, problems: Optional[List[dict]] = None,
              others: Optional[List[dict]] = None, unsure: Optional[List[dict]] = None) -> List[dict]:
    """Every usable manifest of this logdir in the vault (``bucket_moved.whose``; another logdir's,
    sharing the vault, only in ``others`` when given), newest first, read through ``engine.manifest.read``:
    the one schema (without the aliases a bucket also writes for older workers: a writer puts
    them back with ``manifest.bucket_form``) and ``_version``/``_path`` (the object's version
    and key). One that cannot be read or is not a manifest is left out (its backups stay) and,
    with ``problems``, named there by its URL (``Finding.MANIFEST_DAMAGED``, with the reader's
    own code as ``why``); one whose owner cannot be told, too (``bucket_moved.unsure_row``), and
    itself appended to ``unsure`` when given (``read_listed``)."""
    out = list(read_listed(ostore, vault, manifest_listing(vault), problems, others, unsure))
    out.sort(key=lambda d: -(d.get("started_at") or 0))
    return out


def _listed(found: dict) -> List[tuple]:
    """The manifests' ``(key, info)`` of a listing of the vault's store, in key order."""
    return [(key, info) for key, info in sorted(found.items()) if key.startswith("manifests/")]


def manifest_listing(vault: BucketVault) -> List[tuple]:
    """The vault's manifests as one paginated listing of its own store finds them (``_listed``,
    keyed under it: ``manifests/…``)."""
    try:
        return _listed(listing_of(vault.store, "manifests"))
    except StoreFailure as e:
        if e.code != StoreError.NOT_FOUND:
            raise
        return []  # no such bucket (yet): no manifest


def read_listed(ostore: ObjectStore, vault: BucketVault, wanted: Iterable[tuple],
                problems: Optional[List[dict]] = None, others: Optional[List[dict]] = None,
                unsure: Optional[List[dict]] = None) -> Iterator[dict]:
    """The usable manifests of ``wanted`` (``(key, info)`` of the vault's listing) that are this
    logdir's (``bucket_moved.whose``: its own, or a copy's named as one), read a few at once and
    yielded one by one in its order: ``manifests``' reader and its rules (memory: the few in
    flight, not the vault's every manifest). Another logdir's (review R11 G6: a vault prefix
    given to several) is never yielded: appended to ``others`` when given (its op id and logdir
    only), else dropped. One whose owner cannot be told (a listing failed: ``UNSURE``) is neither:
    named in ``problems`` when given (``bucket_moved.unsure_row``), and appended to ``unsure``
    when given (the history's line of it: ``bucket_catalogue.unsure_entry``)."""
    st = BucketState(ostore)
    seen: dict = {}  # the old prefixes listed by this reading (``bucket_moved``)

    def read(item):
        p = f"{vault.root}/{item[0]}"
        return (p, *st.read(p, item[1]))

    # read a few at once: one after the other, a vault of 10,000 operations took minutes to list
    for p, doc, version in map_ordered(read, wanted):
        m = usable_manifest(ostore, p, doc, version, problems, seen) if doc is not None else None
        if m is None:
            continue
        w = whose(ostore, m)
        if w == UNSURE:  # a listing failed: neither ours nor another's, named (R13 F2)
            if problems is not None:
                problems.append(unsure_row(ostore, m))
            if unsure is not None:
                unsure.append(m)
        elif w != OTHERS:
            yield m
        elif others is not None:
            others.append({"op_id": m["op_id"], "run": m["run"], "logdir": m.get("logdir"), "_path": m["_path"]})


def usable_manifest(ostore: ObjectStore, p: str, doc: dict, version: Optional[str],
                    problems: Optional[List[dict]] = None, seen: Optional[dict] = None) -> Optional[dict]:
    """The manifest object at store path ``p`` (``doc``, as read or as written, at ``version``)
    in the one schema with ``_version``/``_path``, or None when it is no usable manifest (named in
    ``problems``, ``Finding.MANIFEST_DAMAGED``): ``read_listed``'s rule, for every reader. The
    backup keys of one made at another prefix this logdir was moved from are read where they
    stand now (``bucket_moved.map_moved``; ``seen``: the old prefixes this reading listed)."""
    url = vault_url(ostore, p)
    why, code = None, None
    try:
        m = manifest.read(doc, url)
        why = _entries_damage(m)
        code = Finding.BAD_MANIFEST if why else None
    except Untrusted as e:
        why, code = e.detail, e.code
    if why:
        if problems is not None:
            problems.append({"code": Finding.MANIFEST_DAMAGED, "why": code, "file": url, "op_id": None, "run": None,
                             "detail": f"{url}: {why}; its backups are kept, and it is not restored until "
                                       "it is mended or moved aside"})
        return None
    # the reader's own private keys are set here only, never taken from the object (a planted
    # ``_moved_from`` would let a restore copy another place's blobs: review R11 G10)
    m = {k: v for k, v in m.items() if not k.startswith("_")}
    for k in [k for k in DESCRIBED if k in m and not DESCRIBED[k](m[k])]:
        del m[k]  # descriptive only (what the tab shows): one of another shape is none, as before it was written
    m["_version"] = version
    m["_path"] = p
    return map_moved(ostore, p, m, seen)


def own_manifests(ostore: ObjectStore, vault: BucketVault, found: List[dict], refused: List[dict]) -> List[dict]:
    """The manifests of ``found`` (``manifests``) a verb acts on: one naming a backup outside this
    vault (planted, copied from another logdir) is never acted on and left in place, named in
    ``refused`` (``Failure.REFUSED``, its URL, op and run): the one rule of purge and re-check."""
    out = []
    for m in found:
        url = vault_url(ostore, m["_path"])
        if m.get(MADE_AT):  # a copy of a logdir that stands at the prefix it names: said so
            refused.append({"code": Finding.PREFIX_MOVED, "file": url, "op_id": m["op_id"], "run": m["run"],
                            "detail": f"{url}: {made_at_words(m[MADE_AT])}"})
            continue
        if whose(ostore, m) in (OTHERS, UNSURE):  # a caller's own list: another logdir's is never acted on
            continue
        if all(names_our_backup(vault, f) for f in m.get("files") or []):
            out.append(m)
            continue
        refused.append({"code": Failure.REFUSED, "file": url, "op_id": m["op_id"], "run": m["run"],
                        "detail": f"{url}: names a backup outside the vault; never acted on, left in place"})
    return out
