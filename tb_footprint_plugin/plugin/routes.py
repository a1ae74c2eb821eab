"""HTTP routes of the Footprint tab, served under ``/data/plugin/footprint/``.

Read routes (GET): ``/status``, ``/token``, ``/policies``, ``/summary``, ``/runs``, ``/run``,
``/plan``, ``/jobs``, ``/job``, ``/history``, ``/operations``, ``/operation``, and the tab's
static files (``/index.js``, ``/model.js``, ``/style.css``, ``/views/*.js``).

Mutating routes (POST, JSON body, token; see ``security``): ``/reduce``, ``/restore``,
``/purge``, ``/cancel``, ``/rescan``.

Every answer goes through ``tensorboard.backend.http_util.Respond``. Run names coming from a
request are only ever looked up in the scan's own run list (or in the vault's operations),
never joined onto the logdir.
"""
from __future__ import annotations

import importlib.resources
import logging
import mimetypes
import os
import re
import threading
import time
from typing import Dict, List, Optional

from werkzeug import wrappers

from tensorboard.backend import http_util

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome, Skip
from tb_footprint_plugin.scan.model import UNATTRIBUTED
from tb_footprint_plugin.plugin.jobs import Busy, Job
from tb_footprint_plugin.plugin.security import TOKEN_HEADER, Rejected

logger = logging.getLogger("tb_footprint_plugin.plugin")

MAX_FILES_LISTED = 1000
MAX_TAGS_LISTED = 100
MAX_RUNS_PER_JOB = 10000
_OP_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_JOB_ID_RE = re.compile(r"^[0-9a-f]{1,64}$")
_KEEP_LATEST_RE = re.compile(r"^keep-latest=\d{1,4}$")
_MIME = {".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css",
         ".svg": "image/svg+xml", ".json": "application/json", ".png": "image/png"}


class HttpError(Exception):
    """An answer other than 200, with a sentence the tab shows as is."""

    def __init__(self, code: int, message: str, **extra):
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra


# ---------------------------------------------------------------------------------------
# static files of the tab
# ---------------------------------------------------------------------------------------
class Assets:
    """The tab's files: from the installed ``tb_footprint_plugin.frontend`` package, else the
    repository's ``frontend/`` folder (tests run from a checkout)."""

    def __init__(self):
        self.root = self._find_root()

    @staticmethod
    def _find_root():
        try:
            root = importlib.resources.files("tb_footprint_plugin.frontend")
            if root.joinpath("index.js").is_file():
                return root
        except (ModuleNotFoundError, TypeError, OSError):
            pass
        here = os.path.dirname(os.path.abspath(__file__))
        repo = os.path.join(os.path.dirname(os.path.dirname(here)), "frontend")
        import pathlib

        return pathlib.Path(repo)

    def names(self) -> List[str]:
        """Servable relative paths: ``*.js``/``*.css`` at the top and ``views/*.js``."""
        out = []
        try:
            for entry in self.root.iterdir():
                if entry.is_file() and os.path.splitext(entry.name)[1] in (".js", ".css"):
                    out.append(entry.name)
                elif entry.is_dir() and entry.name == "views":
                    out += [f"views/{v.name}" for v in entry.iterdir() if v.is_file() and v.name.endswith(".js")]
        except OSError:
            pass
        return sorted(out)

    def read(self, rel: str) -> bytes:
        node = self.root
        for part in rel.split("/"):
            node = node.joinpath(part)
        return node.read_bytes()


# ---------------------------------------------------------------------------------------
# the routes
# ---------------------------------------------------------------------------------------
class Routes:
    def __init__(self, plugin):
        self.p = plugin
        self.assets = Assets()
        self._memo_lock = threading.Lock()
        self._memo: Dict[tuple, dict] = {}

    # --- plumbing -------------------------------------------------------------------------
    def apps(self) -> dict:
        read = {
            "/status": self.status,
            "/policies": self.policies,
            "/summary": self.summary,
            "/runs": self.runs,
            "/run": self.run,
            "/plan": self.plan,
            "/jobs": self.jobs,
            "/job": self.job,
            "/history": self.history,
            "/operations": self.operations,
            "/operation": self.operation,
        }
        write = {
            "/reduce": self.reduce,
            "/restore": self.restore,
            "/purge": self.purge,
            "/cancel": self.cancel,
            "/rescan": self.rescan,
        }
        # rescan and cancel change nothing in the logdir: allowed even when write actions are off
        harmless = {"/rescan", "/cancel"}
        apps = {route: self._wrap(fn, "read") for route, fn in read.items()}
        apps.update({route: self._wrap(fn, "write" if route not in harmless else "harmless")
                     for route, fn in write.items()})
        apps["/token"] = self._wrap(self.token, "token")
        for name in self.assets.names():
            apps["/" + name] = self._wrap(self._static_for(name), "read")
        return apps

    def _wrap(self, fn, kind: str):
        sec = self.p.security

        @wrappers.Request.application
        def app(request):
            try:
                if kind == "read":
                    sec.check_read(request)
                    return fn(request)
                if kind == "token":
                    sec.check_token_request(request)
                    return fn(request)
                body = sec.check_write(request, needs_actions=kind == "write")
                return fn(request, body)
            except Rejected as e:
                return self._error(request, e.code, e.reason, headers=e.headers, rejected=True)
            except HttpError as e:
                return self._error(request, e.code, e.message, **e.extra)
            except Exception as e:  # never a bare werkzeug 500 page: say what failed
                logger.exception("Footprint: %s %s failed", request.method, request.path)
                return self._error(request, 500, f"internal error: {type(e).__name__}: {e}")

        return app

    @staticmethod
    def _json(request, obj, code: int = 200, headers=None):
        return http_util.Respond(request, obj, "application/json", code=code, headers=headers)

    def _error(self, request, code: int, message: str, headers=None, **extra):
        body = {"error": message, "code": code}
        body.update(extra)
        return self._json(request, body, code=code, headers=headers)

    def _static_for(self, name: str):
        def serve(request):
            try:
                data = self.assets.read(name)
            except OSError:
                raise HttpError(404, f"{name} is missing from the installed package") from None
            ctype = _MIME.get(os.path.splitext(name)[1]) or mimetypes.guess_type(name)[0] or "application/octet-stream"
            return http_util.Respond(request, data, ctype)

        return serve

    # --- shared lookups -------------------------------------------------------------------
    def _policy(self, value):
        from tb_footprint_plugin.plan.policies import BUILTIN, PolicyError, get_policy

        name = value if value not in (None, "") else self.p.config.default_policy
        if not isinstance(name, str):
            raise HttpError(400, "policy must be a string")
        # A request may name a built-in policy or the one TensorBoard was started with, never
        # a path of its choosing (get_policy would open it).
        if name != self.p.config.default_policy and name not in BUILTIN and not _KEEP_LATEST_RE.match(name):
            raise HttpError(400, f"unknown policy {name!r}: use one of {', '.join(BUILTIN)} or keep-latest=N")
        try:
            return get_policy(name)
        except (PolicyError, ValueError) as e:
            raise HttpError(400, str(e)) from None

    def _scan(self, request=None, wait: Optional[float] = None):
        if not self.p.local:
            raise HttpError(409, "the logdir is not on a local disk; Footprint only reads local logdirs")
        if request is not None and wait is None:
            w = request.args.get("wait")
            if w is not None:
                try:
                    wait = max(0.0, min(120.0, float(w)))
                except ValueError:
                    raise HttpError(400, "wait must be a number of seconds") from None
        fp, meta = self.p.scans.get(wait=wait)
        if fp is None:
            raise HttpError(503, meta.get("error") or "the first scan of the logdir is still running; try again",
                            scan=meta)
        return fp, meta

    @staticmethod
    def _lookup_run(fp, name):
        if not isinstance(name, str) or not name:
            raise HttpError(400, "a run name is required")
        run = fp.run(name)  # exact match against the scan's own list: never a path
        if run is None:
            raise HttpError(404, f"no run named {name!r} in the last scan")
        return run

    def _run_names(self, fp, value, *, changing: bool = False) -> List[str]:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not value:
            raise HttpError(400, "runs must be a non-empty list of run names")
        if len(value) > MAX_RUNS_PER_JOB:
            raise HttpError(400, f"at most {MAX_RUNS_PER_JOB} runs per request")
        names = []
        for v in value:
            r = self._lookup_run(fp, v)
            if changing and r.name == UNATTRIBUTED:
                raise HttpError(404, f"no run named {r.name!r}: those files belong to no run and are never changed")
            if r.name not in names:
                names.append(r.name)
        return names

    def _labels(self, names) -> dict:
        return api.labels_for(names)

    def _plan(self, fp, policy, runs=None):
        return api.plan(self.p.logdir, policy, backup_dir=self.p.config.backup_dir, runs=runs,
                        quiet_period=self.p.config.quiet_period, footprint=fp)

    def _operations(self, run: Optional[str] = None) -> List[dict]:
        if not os.path.isdir(self.p.logdir):
            return []
        return api.operations(self.p.logdir, run=run, backup_dir=self.p.config.backup_dir)

    def _busy(self) -> Dict[str, str]:
        return self.p.jobs.busy_runs()

    # --- read routes ----------------------------------------------------------------------
    def token(self, request):
        return self._json(request, {"token": self.p.security.token, "header": TOKEN_HEADER,
                                    "actions": self.p.security.describe()})

    def status(self, request):
        from tb_footprint_plugin.scan import categories
        from tb_footprint_plugin.version import __version__

        fp, meta = self.p.scans.get(wait=0.0) if self.p.local else (None, {})
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
        from tb_footprint_plugin.plan.policies import get_policy, list_policies

        pols = [p.to_dict() for p in list_policies()]
        default = self.p.config.default_policy
        if default not in [p["name"] for p in pols]:
            try:
                pols.append(get_policy(default).to_dict())
                pols[-1]["name"] = default
            except Exception as e:
                pols.append({"name": default, "description": f"unavailable: {e}"})
        return self._json(request, {"default": default, "policies": pols})

    def _runs_payload(self, fp, meta, policy) -> dict:
        """The overview (totals, categories, runs with their plan), memoized per scan and policy."""
        bucket = int(time.time() // 10)  # 'active' (quiet period) depends on the clock
        key = (id(fp), meta["generation"], policy.name, bucket)
        with self._memo_lock:
            hit = self._memo.get(key)
        if hit is not None:
            return hit
        plan = self._plan(fp, policy)
        plans = {rp.run: rp for rp in plan.runs}
        runs = []
        for r in fp.runs:
            rp = plans.get(r.name)
            runs.append({
                "name": r.name,
                "total_bytes": r.total_bytes,
                "newest_mtime": r.newest_mtime,
                "categories": {c.name: c.bytes for c in r.categories.values() if c.bytes},
                "biggest": r.biggest_category(),
                "sessions": len(r.sessions),
                "warnings": len(r.warnings),
                "has_event_files": r.has_event_files,
                "removable_bytes": rp.removable_bytes if rp and not rp.skipped else 0,
                "planned_removable_bytes": rp.removable_bytes if rp else 0,
                "skipped": rp.skipped if rp else "not a run TensorBoard reads",
                "code": rp.code if rp else Skip.NOT_A_RUN,
                "actions": len(rp.actions) if rp else 0,
            })
        cats = [{"name": c.name, "label": self._labels([c.name])[c.name], "bytes": c.bytes, "files": c.files,
                 "records": c.records} for c in fp.categories.values()]
        payload = {
            "logdir": fp.logdir,
            "policy": policy.name,
            "total_bytes": fp.total_bytes,
            "vault_bytes": fp.vault_bytes,
            "reclaimable_bytes": plan.removable_bytes,
            "expected_after_bytes": plan.expected_after_bytes,
            "run_count": len(fp.runs),
            "active_runs": sum(1 for rp in plan.runs if rp.code == Skip.ACTIVE),
            "categories": cats,
            "warnings": list(fp.warnings)[:50],
            "runs": runs,
        }
        with self._memo_lock:
            if len(self._memo) > 16:
                self._memo.clear()
            self._memo[key] = payload
        return payload

    def summary(self, request):
        fp, meta = self._scan(request)
        policy = self._policy(request.args.get("policy"))
        payload = dict(self._runs_payload(fp, meta, policy))
        payload.pop("runs")
        payload["scan"] = meta
        payload["actions"] = self.p.security.describe()
        return self._json(request, payload)

    def runs(self, request):
        fp, meta = self._scan(request)
        policy = self._policy(request.args.get("policy"))
        payload = dict(self._runs_payload(fp, meta, policy))
        busy = self._busy()
        if busy:
            payload["runs"] = [dict(r, job=busy.get(r["name"])) for r in payload["runs"]]
        payload["busy"] = busy
        payload["scan"] = meta
        payload["actions"] = self.p.security.describe()
        return self._json(request, payload)

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
        names = request.args.getlist("run")
        runs = self._run_names(fp, names) if names else None
        plan = self._plan(fp, policy, runs=runs)
        d = plan.to_dict()
        cats = {a.category for rp in plan.runs for a in rp.actions}
        labels = self._labels(cats)
        d["runs"] = [api.plan_run_view(rp, labels) for rp in plan.runs]
        d["labels"] = labels
        d["scan"] = meta
        d["dry_run"] = True
        return self._json(request, d)

    def jobs(self, request):
        out = []
        for j in self.p.jobs.list():
            d = j.to_dict()
            d.pop("result", None)
            out.append(d)
        return self._json(request, {"jobs": out})

    def job(self, request):
        jid = request.args.get("id", "")
        if not _JOB_ID_RE.match(jid):
            raise HttpError(400, "a job id is required")
        j = self.p.jobs.get(jid)
        if j is None:
            raise HttpError(404, f"no job {jid!r}")
        return self._json(request, {"job": j.to_dict()})

    def history(self, request):
        entries = api.history(self.p.logdir) if os.path.isdir(self.p.logdir) else []
        entries = list(reversed(entries))
        return self._json(request, {"entries": entries[:500], "total": len(entries)})

    def operations(self, request):
        run = request.args.get("run")
        ops = self._operations()
        if run is not None:
            ops = [m for m in ops if m.get("run") == run]  # compared, never joined
        out = api.summarize_operations(ops)
        return self._json(request, {"operations": out})

    def _find_op(self, op_id) -> dict:
        if not isinstance(op_id, str) or not _OP_ID_RE.match(op_id):
            raise HttpError(400, "a valid operation id is required")
        for m in self._operations():
            if m.get("op_id") == op_id:
                return m
        raise HttpError(404, f"no operation {op_id!r} in the vault")

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
            "files": [{"path": f.get("path"), "size": f.get("size"), "action": f.get("action")}
                      for f in m.get("files", [])][:MAX_FILES_LISTED],
            "created": [{"path": c.get("path"), "size": c.get("size")} for c in m.get("created", [])],
            "labels": labels,
        })

    # --- mutating routes ------------------------------------------------------------------
    def reduce(self, request, body):
        fp, _meta = self._scan(wait=0.0)
        names = self._run_names(fp, body.get("runs", body.get("run")), changing=True)
        policy = self._policy(body.get("policy"))
        token = _cancel_token()
        job = Job("reduce", names, {"policy": policy.name}, cancel_token=token)
        before = {n: {c.name: c.bytes for c in fp.run(n).categories.values()} for n in names}
        p = self.p

        def work(job: Job) -> dict:
            report = api.reduce_logdir(p.logdir, p.config.backup_dir, policy=policy, dry_run=False, runs=names,
                                       quiet_period=p.config.quiet_period, progress=job.report, cancel=token)
            d = report.to_dict()
            plan_runs = {rp["run"]: rp for rp in d.get("plan", {}).get("runs", [])}
            seen = set()
            for o in d.get("outcomes", []):
                seen.add(o["run"])
                job.finish_run(o["run"], o["status"])
                rp = plan_runs.get(o["run"], {})
                labels = self._labels({a.get("category") for a in rp.get("actions", [])})
                o["category_changes"] = api.category_changes(rp, labels) if o["status"] == "verified" else []
                o["categories_before"] = before.get(o["run"], {})
                o["fidelity"] = rp.get("fidelity", [])
                o["dashboards"] = api.dashboards_note("reduce", o, rp.get("actions", []))
                if o.get("verification"):
                    o["verification"] = {k: v for k, v in o["verification"].items()
                                         if not k.startswith("_") and k != "views"}
            for n in names:
                if n not in seen:
                    job.finish_run(n, "skipped")
                    d.setdefault("outcomes", []).append({
                        "run": n, "status": Outcome.SKIPPED, "reason": "not in the plan any more (the run changed "
                        "since the scan); rescan and look again", "code": Skip.NOT_IN_PLAN,
                        "bytes_before": 0, "bytes_after": 0,
                        "saved_bytes": 0})
            d["committed_any"] = any(o["status"] == "verified" for o in d.get("outcomes", []))
            d.pop("removed_files", None)
            return d

        return self._submit(request, job, work)

    def restore(self, request, body):
        op_id = body.get("op")
        run = body.get("run")
        p = self.p
        if op_id is not None:
            m = self._find_op(op_id)
            if m.get("kind") != "reduce":
                raise HttpError(409, f"operation {op_id} is a {m.get('kind')}, not a reduction")
            if m.get("outcome") != "verified":
                raise HttpError(409, f"operation {op_id} did not change the run ({m.get('outcome')}); nothing to restore")
            if m.get("restored_by"):
                raise HttpError(409, f"operation {op_id} was already restored by {m['restored_by']}")
            if m.get("backup_purged"):
                raise HttpError(409, f"the backup of {op_id} was purged; nothing to restore from")
            newer = [x for x in self._operations() if x.get("run") == m.get("run") and x.get("kind") == "reduce"
                     and x.get("outcome") == "verified" and not x.get("restored_by") and not x.get("backup_purged")
                     and (x.get("started_at") or 0) > (m.get("started_at") or 0)]
            if newer:
                raise HttpError(409, f"operation {newer[0]['op_id']} on this run is newer: restore it first")
            runs, params = [m["run"]], {"op": op_id}
        elif run is not None:
            if not isinstance(run, str):
                raise HttpError(400, "run must be a string")
            ops = [m for m in self._operations() if m.get("run") == run and m.get("kind") == "reduce"
                   and m.get("outcome") == "verified" and not m.get("restored_by") and not m.get("backup_purged")]
            if not ops:
                raise HttpError(404, f"nothing to restore for run {run!r}")
            runs, params = [ops[0]["run"]], {"run": ops[0]["run"]}
        else:
            raise HttpError(400, "give the operation to restore (op) or a run (run)")
        job = Job("restore", runs, params, cancel_token=None, cancellable=False)

        def work(job: Job) -> dict:
            job.report(runs[0], "restore", 0.1)
            outs = api.restore(p.logdir, run=params.get("run"), op=params.get("op"), backup_dir=p.config.backup_dir)
            outcomes = []
            for o in outs:
                d = o.to_dict()
                d["dashboards"] = api.dashboards_note("restore", d)
                outcomes.append(d)
                job.finish_run(o.run, o.status)
            return {"outcomes": outcomes, "ok": all(o["status"] == "restored" for o in outcomes),
                    "committed_any": any(o["status"] == "restored" for o in outcomes)}

        return self._submit(request, job, work)

    def purge(self, request, body):
        older = body.get("older_than_s")
        if older is not None and (isinstance(older, bool) or not isinstance(older, (int, float)) or older < 0
                                  or older != older):
            raise HttpError(400, "older_than_s must be a non-negative number of seconds")
        run = body.get("run")
        if run is not None and not isinstance(run, str):
            raise HttpError(400, "run must be a string")
        op_id = body.get("op")
        if op_id is not None:
            self._find_op(op_id)
        if run is not None and run not in {m.get("run") for m in self._operations()}:
            raise HttpError(404, f"no operation on run {run!r}")
        confirm = body.get("confirm", False)
        if not isinstance(confirm, bool):
            raise HttpError(400, "confirm must be true or false")
        p = self.p
        kwargs = dict(older_than=older, run=run, backup_dir=p.config.backup_dir, op=op_id)
        if not confirm:
            if p.jobs.any_active():
                raise HttpError(409, "a job is running; purge once it has finished")
            rep = api.purge(p.logdir, yes=False, **kwargs)
            return self._json(request, {"preview": rep.to_dict()})
        job = Job("purge", [], {k: v for k, v in kwargs.items() if k != "backup_dir"}, cancel_token=None,
                  cancellable=False)

        def work(job: Job) -> dict:
            rep = api.purge(p.logdir, yes=True, **kwargs)
            return dict(rep.to_dict(), committed_any=True)

        return self._submit(request, job, work)

    def _submit(self, request, job: Job, work):
        try:
            self.p.jobs.submit(job, work)
        except Busy as e:
            raise HttpError(409, str(e), job=e.job_id, runs=e.runs) from None
        return self._json(request, {"job": job.to_dict()}, code=202)

    def cancel(self, request, body):
        jid = body.get("job")
        if not isinstance(jid, str) or not _JOB_ID_RE.match(jid):
            raise HttpError(400, "a job id is required")
        job = self.p.jobs.get(jid)
        if job is None:
            raise HttpError(404, f"no job {jid!r}")
        if not job.cancellable:
            raise HttpError(409, f"a {job.kind} cannot be cancelled", job=job.to_dict())
        if not job.active:
            raise HttpError(409, f"job {jid} has already finished ({job.state})", job=job.to_dict())
        if not job.to_dict()["cancellable"]:
            raise HttpError(409, "past the commit point: the change is being committed and can no longer be "
                                 "cancelled (restore it afterwards instead)", job=job.to_dict())
        self.p.jobs.cancel(jid)
        return self._json(request, {"job": job.to_dict()})

    def rescan(self, request, body):
        if not self.p.local:
            raise HttpError(409, "the logdir is not on a local disk")
        self.p.scans.refresh()
        return self._json(request, {"scan": self.p.scans.get(wait=0.0)[1]}, code=202)


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------
def _cancel_token():
    from tb_footprint_plugin.api import CancelToken

    return CancelToken()
