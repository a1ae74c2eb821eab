"""Read routes (GET): each parses the request, calls the library (``api``) and answers.

The overview scales to 100,000 runs: ``/runs`` answers one page of runs (sorted, filtered and
paged here, on the server) beside aggregates of fixed size (category totals, the logdir map's
top groups + "other", the matching runs' totals), so neither the payload nor the browser's work
grows with the number of runs. The overview of a scan under a policy is kept (``RunsIndex``)
until the scan's content changes, a run leaves its quiet period or it is ``MEMO_MAX_AGE_S`` old
(then rebuilt in the background while the kept one is served).

Why one module: one class of GET routes (``ReadRoutes``) sharing the
request parsing and the overview's memo (``RunsIndex``, its tiles and validity), so that every
read route answers from the same kept overview.
"""
from __future__ import annotations

import collections
import hashlib
import json
import math
import os
import threading
import time
from typing import Dict, List, Optional, Tuple

from tensorboard.backend import http_util

from tb_footprint_plugin import api
from tb_footprint_plugin.plugin.security import TOKEN_HEADER
from tb_footprint_plugin.plugin.http import JOB_ID_RE, MAX_FILES_LISTED, MAX_TAGS_LISTED, OP_ID_RE, HttpError, RouteBase

#: the runs page: default and largest size
DEFAULT_LIMIT = 100
MAX_LIMIT = 500
#: sort keys of ``/runs`` and the row field each sorts on
SORTS = {"size": "total_bytes", "name": "name", "reclaimable": "removable_bytes", "modified": "newest_mtime"}
#: rectangles of the logdir map: the biggest groups (or runs), then one "other" (60 leave each
#: rectangle room for its name on the tab's ~1400 x 260 px map; 150 made unlabelled specks)
MAP_TILES = 60
MAX_QUERY = 500
#: a kept overview older than this is rebuilt in the background (open writers, journals, vault)
MEMO_MAX_AGE_S = 30.0
#: filters (and their aggregates) kept per overview
FILTERS_KEPT = 16
#: the dry run of "reduce all matching" lists this many runs' plans; the rest are counted
PLAN_VIEWS_LISTED = 8
#: the Activity page's newest change-log entries (``/history``; ``total`` counts them all)
_ACTIVITY_SHOWN = 500


def _matches(name_lower: str, q: str) -> bool:
    return q in name_lower


def _tiles(rows: List[dict], idxs: List[int], limit: Optional[int] = None) -> dict:
    """The logdir map's rectangles for these runs, bounded: each run when they are few, else
    folders (the first path level that splits them) — the biggest ``limit - 1`` and one "other"."""
    limit = limit or MAP_TILES
    sized = [i for i in idxs if rows[i]["total_bytes"] > 0]
    if len(sized) <= limit:
        return {"level": "run", "tiles": [_tile_of_run(rows[i]) for i in
                                          sorted(sized, key=lambda i: (-rows[i]["total_bytes"], rows[i]["name"]))],
                "other": None}
    parts = {i: rows[i]["name"].split("/") for i in sized}
    depth = 1
    while True:
        keys = {i: "/".join(p[:depth]) if len(p) > depth else rows[i]["name"] for i, p in parts.items()}
        if len(set(keys.values())) > 1 or depth >= 4 or all(len(p) <= depth for p in parts.values()):
            break
        depth += 1
    groups: Dict[str, dict] = {}
    for i, key in keys.items():
        r = rows[i]
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"kind": "group", "name": key, "runs": 0, "total_bytes": 0, "removable_bytes": 0,
                               "categories": {}, "run": None}
        g["runs"] += 1
        g["total_bytes"] += r["total_bytes"]
        g["removable_bytes"] += r["removable_bytes"]
        g["run"] = r["name"] if key == r["name"] else g["run"]
        cats = g["categories"]
        for c, b in r["categories"].items():
            cats[c] = cats.get(c, 0) + b
    ordered = sorted(groups.values(), key=lambda g: (-g["total_bytes"], g["name"]))
    shown, rest = ordered[:limit - 1], ordered[limit - 1:]
    for g in shown:
        if g["runs"] == 1 and g["run"] == g["name"]:
            g["kind"] = "run"
        g.pop("run")
    other = None
    if rest:
        other = {"groups": len(rest), "runs": sum(g["runs"] for g in rest),
                 "total_bytes": sum(g["total_bytes"] for g in rest)}
    return {"level": "group", "depth": depth, "tiles": shown, "other": other}


def _tile_of_run(r: dict) -> dict:
    return {"kind": "run", "name": r["name"], "runs": 1, "total_bytes": r["total_bytes"],
            "removable_bytes": r["removable_bytes"], "categories": r["categories"]}


class RunsIndex:
    """One overview (a scan under a policy) kept for paging: rows sorted per key on first use,
    filters and their aggregates kept (a few); every answer it gives is bounded in size."""

    def __init__(self, payload: dict, valid_until: float):
        self.payload = payload
        self.rows: List[dict] = payload["runs"]
        self.made_at = time.time()
        self.valid_until = valid_until
        self.max_run_bytes = max((r["total_bytes"] for r in self.rows), default=0)
        self._lower = [r["name"].lower() for r in self.rows]
        self._orders: Dict[Tuple[str, bool], List[int]] = {}
        self._filtered: "collections.OrderedDict[tuple, List[int]]" = collections.OrderedDict()
        self._aggregates: "collections.OrderedDict[str, dict]" = collections.OrderedDict()
        self._lock = threading.Lock()
        self.rebuilding = False

    def order(self, sort: str, desc: bool) -> List[int]:
        """Row indices sorted by ``sort`` (ties by name, ascending), kept."""
        key = (sort, desc)
        with self._lock:
            hit = self._orders.get(key)
        if hit is not None:
            return hit
        field_ = SORTS[sort]
        rows = self.rows
        by_name = sorted(range(len(rows)), key=lambda i: rows[i]["name"])
        if field_ == "name":
            out = by_name[::-1] if desc else by_name
        else:  # a stable sort keeps the names' order among equals, descending too
            out = sorted(by_name, key=lambda i: rows[i][field_] or 0, reverse=desc)
        with self._lock:
            self._orders[key] = out
        return out

    def matching(self, q: str, sort: str, desc: bool) -> List[int]:
        """Indices of the rows whose name holds ``q`` (case-insensitive), in the sort's order."""
        order = self.order(sort, desc)
        if not q:
            return order
        key = (q, sort, desc)
        with self._lock:
            hit = self._filtered.get(key)
            if hit is not None:
                self._filtered.move_to_end(key)
                return hit
        lower = self._lower
        out = [i for i in order if q in lower[i]]
        with self._lock:
            self._filtered[key] = out
            while len(self._filtered) > FILTERS_KEPT:
                self._filtered.popitem(last=False)
        return out

    def aggregates(self, q: str) -> dict:
        """Totals of the runs matching ``q`` and their logdir map (bounded), kept."""
        with self._lock:
            hit = self._aggregates.get(q)
            if hit is not None:
                self._aggregates.move_to_end(q)
                return hit
        idxs = self.matching(q, "size", True)
        rows = self.rows
        agg = {
            "runs": len(idxs),
            "total_bytes": sum(rows[i]["total_bytes"] for i in idxs),
            "reclaimable_bytes": sum(rows[i]["removable_bytes"] for i in idxs),
            "reducible_runs": sum(1 for i in idxs if rows[i]["removable_bytes"] > 0),
            "map": _tiles(rows, idxs),
        }
        with self._lock:
            self._aggregates[q] = agg
            while len(self._aggregates) > FILTERS_KEPT:
                self._aggregates.popitem(last=False)
        return agg

    def names_matching(self, q: str) -> List[str]:
        """Every run whose name holds ``q``, largest first (a selector sent by the tab)."""
        return [self.rows[i]["name"] for i in self.matching(q, "size", True)]


def _signature(fp) -> str:
    """What the overview of a scan depends on, hashed: a scan of an unchanged logdir (the
    background refresh's) gets the same signature, so its overview is not computed again."""
    h = hashlib.sha256()
    h.update(repr((fp.logdir, fp.total_bytes, fp.vault_bytes, len(fp.runs), list(fp.warnings)[:50])).encode())
    for r in fp.runs:  # ~1 s per 100,000 runs: once per scan, on the scan's thread (``prepare``)
        cats = ",".join(sorted(f"{c.name}={c.bytes}" for c in r.categories.values()))
        # whose it is decides its verdict (others_run): a chown changes no size (review R12 H2);
        # a file's uid is set only when another user's, so a run all yours adds nothing here
        uids = [f.uid for f in r.files if f.uid is not None]
        h.update(f"{r.name}\0{r.total_bytes}\0{r.newest_mtime!r}\0{len(r.files)}\0{len(r.sessions)}\0"
                 f"{len(r.warnings)}\0{r.has_event_files}\0{cats}\0{r.uid}\0{uids}\n".encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def _valid_until(fp, quiet_period: float, now: float) -> float:
    """When the first run still inside its quiet period leaves it (its plan changes then)."""
    ends = [r.newest_mtime + quiet_period for r in fp.runs if r.newest_mtime and r.newest_mtime + quiet_period > now]
    return min(ends) if ends else math.inf


def _int_arg(request, name: str, default: int, lo: int, hi: int) -> int:
    value = request.args.get(name)
    if value in (None, ""):
        return default
    try:
        n = int(value)
    except ValueError:
        raise HttpError(400, f"{name} must be a whole number") from None
    if n < lo or n > hi:
        raise HttpError(400, f"{name} must be between {lo} and {hi}")
    return n


def query_text(value) -> str:
    """A run-name filter from a request: a string of at most ``MAX_QUERY`` characters, lower case."""
    if value in (None, ""):
        return ""
    if not isinstance(value, str) or len(value) > MAX_QUERY:
        raise HttpError(400, f"q must be a string of at most {MAX_QUERY} characters")
    return value.strip().lower()


class ReadRoutes(RouteBase):
    """``/status``, ``/token``, ``/policies``, ``/summary``, ``/runs``, ``/run``, ``/plan``, ``/jobs``,
    ``/job``, ``/history``, ``/operations``, ``/operation``."""

    def token(self, request):
        return self._json(request, {"token": self.p.security.token, "header": TOKEN_HEADER,
                                    "actions": self.p.security.describe()})

    def status(self, request):
        from tb_footprint_plugin.api import categories
        from tb_footprint_plugin.version import __version__

        fp, meta = self.p.scans.get(wait=0.0) if self.p.readable else (None, {})
        return self._json(request, {
            "version": __version__,
            "logdir": self.p.logdir,
            "backup_dir": self.p.config.backup_dir,
            "default_policy": self.p.config.default_policy,
            "quiet_period_s": self.p.config.quiet_period,
            "actions": self.p.security.describe(),
            "recovery": self.p.recovery.to_dict(),
            "scan": meta,
            "jobs": [j.to_dict() for j in self.p.jobs.list() if j.active],
            "labels": dict(categories.LABELS),
            "category_order": list(categories.LABELS),
            "token_header": TOKEN_HEADER,
        })

    def policies(self, request):
        from tb_footprint_plugin.api import get_policy, list_policies

        pols = [p.to_dict() for p in list_policies()]
        default = self.p.config.default_policy
        if default not in [p["name"] for p in pols]:
            try:
                pols.append(get_policy(default).to_dict())
                pols[-1]["name"] = default
            except Exception as e:
                pols.append({"name": default, "description": f"unavailable: {e}"})
        return self._json(request, {"default": default, "policies": pols})

    def __init__(self, plugin):
        super().__init__(plugin)
        self._indexes: "collections.OrderedDict[tuple, RunsIndex]" = collections.OrderedDict()
        self._building: Dict[tuple, threading.Event] = {}
        self._sigs: Tuple[object, str] = (None, "")
        self._sig_lock = threading.Lock()

    def _signature(self, fp) -> str:
        # one computation per scan: a request arriving meanwhile waits for the listener's
        with self._sig_lock:
            kept_fp, sig = self._sigs
            if kept_fp is not fp:
                sig = _signature(fp)
                self._sigs = (fp, sig)
            return sig

    def runs_index(self, fp, policy) -> RunsIndex:
        """The overview of ``fp`` under ``policy``, kept per scan content and policy content (never
        its name: a policy file may carry a built-in's name with other rules). Built once at a
        time per key; a kept one past its age is served while its successor is built."""
        key = (self._signature(fp), json.dumps(policy.to_dict(), sort_keys=True, default=str))
        while True:
            with self._memo_lock:
                hit = self._indexes.get(key)
                if hit is not None:
                    self._indexes.move_to_end(key)
                    now = time.time()
                    if (now >= hit.valid_until or now - hit.made_at > MEMO_MAX_AGE_S) and not hit.rebuilding:
                        hit.rebuilding = True
                        threading.Thread(target=self._build, args=(key, fp, policy), daemon=True,
                                         name="footprint-overview").start()
                    return hit
                building = self._building.get(key)
                if building is None:
                    building = self._building[key] = threading.Event()
                    mine = True
                else:
                    mine = False
            if mine:
                try:
                    return self._build(key, fp, policy)
                finally:
                    with self._memo_lock:
                        self._building.pop(key, None)
                    building.set()
            building.wait(600.0)

    def _build(self, key, fp, policy) -> RunsIndex:
        now = time.time()
        try:
            index = RunsIndex(api.overview(fp, self._plan(fp, policy)),
                              _valid_until(fp, self.p.config.quiet_period, now))
        except Exception:
            with self._memo_lock:
                old = self._indexes.get(key)
                if old is not None:
                    old.rebuilding = False  # try again on a later request
            raise
        with self._memo_lock:
            self._indexes[key] = index
            self._indexes.move_to_end(key)
            while len(self._indexes) > 8:
                self._indexes.popitem(last=False)
        return index

    def prepare(self, fp) -> None:
        """After a scan: the overview under TensorBoard's default policy, so the tab's next
        request finds it ready (a scan of an unchanged logdir finds it kept)."""
        try:
            policy = self._policy(None)
        except HttpError:
            return
        self.runs_index(fp, policy)

    def _runs_payload(self, fp, meta, policy) -> dict:
        """The overview (totals, categories, runs with their plan) of the kept index."""
        return self.runs_index(fp, policy).payload

    def _head(self, index: RunsIndex, meta, request) -> dict:
        """What ``/summary`` and ``/runs`` both answer: totals, categories, the disk numbers, the
        logdir map; never a list that grows with the runs."""
        d = {k: v for k, v in index.payload.items() if k != "runs"}
        d["scan"] = meta
        d["actions"] = self.p.security.describe()
        d["policy_key"] = self._policy_key(request)
        d["disk"] = self.p.disk.get()
        d["max_run_bytes"] = index.max_run_bytes
        return d

    def summary(self, request):
        fp, meta = self._scan(request)
        index = self.runs_index(fp, self._policy(request.args.get("policy")))
        d = self._head(index, meta, request)
        d["map"] = index.aggregates("")["map"]
        return self._json(request, d)

    def runs(self, request):
        """One page of runs, sorted and filtered here: ``offset``, ``limit`` (default 100, at most
        500), ``sort`` (size, name, reclaimable, modified), ``order`` (asc, desc), ``q`` (the
        name holds it, case-insensitive); ``total`` runs match, ``matched`` sums them."""
        fp, meta = self._scan(request)
        policy = self._policy(request.args.get("policy"))
        sort = request.args.get("sort") or "size"
        if sort not in SORTS:
            raise HttpError(400, f"sort must be one of {', '.join(SORTS)}")
        order = request.args.get("order") or ("asc" if sort == "name" else "desc")
        if order not in ("asc", "desc"):
            raise HttpError(400, "order must be asc or desc")
        q = query_text(request.args.get("q"))
        offset = _int_arg(request, "offset", 0, 0, 10 ** 9)
        limit = _int_arg(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        index = self.runs_index(fp, policy)
        idxs = index.matching(q, sort, order == "desc")
        agg = index.aggregates(q)
        page = [index.rows[i] for i in idxs[offset:offset + limit]]
        busy = self._busy()
        if busy:
            page = [dict(r, job=busy.get(r["name"])) for r in page]
        d = self._head(index, meta, request)
        d.update({
            "runs": page, "total": len(idxs), "offset": offset, "limit": limit, "sort": sort, "order": order, "q": q,
            "matched": {k: v for k, v in agg.items() if k != "map"}, "map": agg["map"],
            # only the shown runs' jobs: a job over 100,000 runs must not send 100,000 names
            "busy": {r["name"]: busy[r["name"]] for r in page if r["name"] in busy},
            "busy_runs": len(busy),
        })
        return self._json(request, d)

    def runs_matching(self, fp, policy, match) -> List[str]:
        """The runs a selector names (``{"q": filter}``: every run whose name holds it), for an
        action over "all matching" runs without sending their names."""
        if not isinstance(match, dict) or set(match) - {"q"}:
            raise HttpError(400, 'match must be an object {"q": filter}')
        return self.runs_index(fp, policy).names_matching(query_text(match.get("q")))

    def run(self, request):
        fp, meta = self._scan(request)
        r = self._lookup_run(fp, request.args.get("run"))
        policy = self._policy(request.args.get("policy"))
        plan = self._plan(fp, policy, runs=[r.name])
        rp = plan.run(r.name)
        files = sorted(r.files, key=lambda f: (-f.size, f.path))
        cats = sorted(r.categories.values(), key=lambda c: -c.bytes)
        labels = self._labels([c.name for c in cats] + [a.category for a in (rp.actions if rp else [])])
        ops = api.summarize_operations(self._operations(run=r.name))
        return self._json(request, {
            "run": {
                "name": r.name,
                "total_bytes": r.total_bytes,
                "newest_mtime": r.newest_mtime,
                "has_event_files": r.has_event_files,
                "warnings": list(r.warnings),
                "categories": [{"name": c.name, "label": labels.get(c.name, c.name), "bytes": c.bytes,
                                "files": c.files, "records": c.records, "tags": c.tags[:MAX_TAGS_LISTED],
                                "tag_count": len(c.tags), "min_step": c.min_step, "max_step": c.max_step}
                               for c in cats],
                "files": [{"path": f.path, "size": f.size, "mtime": f.mtime, "kind": f.kind,
                           "categories": f.categories, "warning": f.warning} for f in files[:MAX_FILES_LISTED]],
                "file_count": len(files),
                "sessions": [{"name": s.name, "path": s.path, "mtime": s.mtime, "bytes": s.bytes, "files": s.files,
                              "hosts": s.hosts, "kind": s.kind} for s in r.sessions],
            },
            "policy": policy.name,
            "policy_key": self._policy_key(request),
            "plan": api.plan_run_view(rp, labels) if rp else None,
            "operations": ops,
            "job": self._busy().get(r.name),
            "labels": labels,
            "scan": meta,
            "actions": self.p.security.describe(),
        })

    def plan(self, request):
        fp, meta = self._scan(request)
        policy = self._policy(request.args.get("policy"))
        if "q" in request.args:
            return self._plan_matching(request, fp, meta, policy)
        names = request.args.getlist("run")
        runs = self._run_names(fp, names) if names else None
        plan = self._plan(fp, policy, runs=runs)
        d = plan.to_dict()
        cats = {a.category for rp in plan.runs for a in rp.actions}
        labels = self._labels(cats)
        # each run's plan digest: the dialog's "Reduce" sends back those it showed, and the reduce
        # leaves alone a run whose plan is another by then (``api.hold_to_confirmed``)
        d["runs"] = [dict(api.plan_run_view(rp, labels), digest=api.plan_digest(rp)) for rp in plan.runs]
        d["labels"] = labels
        d["scan"] = meta
        d["policy_key"] = self._policy_key(request)
        d["dry_run"] = True
        return self._json(request, d)

    def matching_todo(self, fp, policy, q) -> Tuple[List[str], object, list, list, str]:
        """The runs ``q`` matches, their dry run, the runs it would change (the to-do list) and
        those it leaves alone, and the digest of that to-do list: sorted names + the policy's
        content + the scan's signature. "Reduce all matching" acts on exactly the to-do list
        whose digest the user confirmed, so ``/plan?q=`` and ``/reduce`` share this one rule."""
        names = [n for n in self.runs_matching(fp, policy, {"q": q}) if n != api.UNATTRIBUTED]
        plan = self._plan(fp, policy, runs=names) if names else None
        todo = [rp for rp in plan.runs if rp.actions and not rp.skipped] if plan else []
        skipped = [rp for rp in plan.runs if rp.skipped] if plan else []
        h = hashlib.sha256()
        h.update(json.dumps({"policy": policy.to_dict(), "scan": self._signature(fp)},
                            sort_keys=True, default=str).encode())
        for n in sorted(rp.run for rp in todo):  # streamed: no second list of 100,000 names
            h.update(b"\0" + n.encode("utf-8", "surrogateescape"))
        return names, plan, todo, skipped, h.hexdigest()

    def _plan_matching(self, request, fp, meta, policy):
        """The dry run of every run matching ``q`` (the tab's "Reduce all matching"), bounded: its
        totals, the first ``PLAN_VIEWS_LISTED`` runs' plans, the first runs left alone, and the
        ``digest`` of its to-do list that the POST sends back."""
        names, _plan, todo, skipped, digest = self.matching_todo(fp, policy, request.args.get("q", ""))
        shown = todo[:PLAN_VIEWS_LISTED]
        labels = self._labels({a.category for rp in shown for a in rp.actions})
        return self._json(request, {
            "policy": policy.name, "policy_key": self._policy_key(request), "dry_run": True, "scan": meta,
            "q": query_text(request.args.get("q")), "matched_runs": len(names),
            "todo_runs": len(todo), "removable_bytes": sum(rp.removable_bytes for rp in todo),
            "bytes_before": sum(rp.bytes_before for rp in todo),
            "runs": [api.plan_run_view(rp, labels) for rp in shown],
            "skipped_runs": len(skipped),
            "skipped": [{"run": rp.run, "skipped": rp.skipped, "code": rp.code} for rp in skipped[:5]],
            "labels": labels, "digest": digest,
        })

    def jobs(self, request):
        out = []
        for j in self.p.jobs.list():
            d = j.to_dict()
            d.pop("result", None)
            out.append(d)
        return self._json(request, {"jobs": out})

    def job(self, request):
        jid = request.args.get("id", "")
        if not JOB_ID_RE.match(jid):
            raise HttpError(400, "a job id is required")
        j = self.p.jobs.get(jid)
        if j is None:
            raise HttpError(404, f"no job {jid!r}")
        return self._json(request, {"job": j.to_dict()})

    def history(self, request):
        # the newest 500 (newest first) and how many there are: a local log is read a block at a
        # time holding only those 500 (issue #28: 100,000 runs' lines are not held to show 500)
        if self.p.local:
            page = (api.history_page(self.p.logdir, newest=_ACTIVITY_SHOWN) if os.path.isdir(self.p.logdir)
                    else {"entries": [], "total": 0, "total_exact": True})
        else:
            page = api.history_page(self.p.logdir, backup_dir=self.p.config.backup_dir, newest=_ACTIVITY_SHOWN)
        return self._json(request, {"entries": list(reversed(page["entries"])), "total": page["total"],
                                    "total_exact": page["total_exact"]})

    def operations(self, request):
        run = request.args.get("run")
        ops = self._operations()
        kept = self._kept_blobs(ops) if run is None else []
        if run is not None:
            ops = [m for m in ops if m.get("run") == run]  # compared, never joined
        return self._json(request, {"operations": api.summarize_operations(ops), "kept_blobs": kept})

    def _kept_blobs(self, ops: List[dict]) -> list:
        """Bytes a restore or rollback found in a file's place and kept in the vault (late records
        among them), as ``api.status`` lists them: the Operations page shows each and how to bring it
        back. From the manifests ``ops`` the page just read (``api.kept_blobs``), not a whole
        ``status``: no change log, journal or ledger read and no walk of the disk per page load."""
        if self.p.local and not os.path.isdir(self.p.logdir):
            return []
        try:
            return api.kept_blobs(self.p.logdir, backup_dir=self.p.config.backup_dir, manifests=ops)
        except (OSError, ValueError) as e:
            return [{"error": str(e)}]

    def _find_op(self, op_id) -> dict:
        if not isinstance(op_id, str) or not OP_ID_RE.match(op_id):
            raise HttpError(400, "a valid operation id is required")
        for m in self._operations():
            if m.get("op_id") == op_id:
                return m
        raise HttpError(404, f"no operation {op_id!r} in the vault")

    def sample(self, request):
        """One image/audio sample of an operation's run, before or after (the check page)."""
        a = request.args
        op_id = a.get("op")
        if not isinstance(op_id, str) or not OP_ID_RE.match(op_id):
            raise HttpError(400, "a valid operation id is required")
        try:
            step, index = int(a.get("step", "")), int(a.get("index", "0"))
        except ValueError:
            raise HttpError(400, "step and index must be integers") from None
        self._find_op(op_id)  # 404 for an unknown operation
        try:
            data, ctype = api.sample(self.p.logdir, op_id, a.get("side", ""), a.get("plugin", ""), a.get("tag", ""),
                                     step, index, backup_dir=self.p.config.backup_dir)
        except api.SampleUnavailable as e:
            code = {"bad_request": 400, "restored": 410, "purged": 410}.get(e.code, 404)
            raise HttpError(code, str(e)) from None
        return http_util.Respond(request, data, ctype)

    def operation(self, request):
        m = self._find_op(request.args.get("op"))
        same_run = api.summarize_operations([x for x in self._operations() if x.get("run") == m.get("run")])
        summary = next((s for s in same_run if s["op_id"] == m.get("op_id")), None) or api.operation_summary(m)
        plan = m.get("plan") or {}
        cats = {a.get("category") for a in plan.get("actions", [])}
        labels = self._labels([c for c in cats if c])
        ver = m.get("verification") or {}
        return self._json(request, {
            "operation": summary,
            "verification": {k: v for k, v in ver.items() if not k.startswith("_") and k != "views"},
            "category_changes": api.category_changes(plan, labels),
            "fidelity": plan.get("fidelity", []),
            "fidelity_details": plan.get("fidelity_details", []),
            "files": [{"path": f.get("path"), "size": f.get("size"), "action": f.get("action")}
                      for f in m.get("files", [])][:MAX_FILES_LISTED],
            "created": [{"path": c.get("path"), "size": c.get("size")} for c in m.get("created", [])],
            "labels": labels,
        })
