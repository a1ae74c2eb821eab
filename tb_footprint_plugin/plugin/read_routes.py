"""Read routes (GET): each parses the request, calls the library (``api``) and answers."""
from __future__ import annotations

import json

import os
import time

from tensorboard.backend import http_util

from tb_footprint_plugin import api
from tb_footprint_plugin.plugin.security import TOKEN_HEADER
from tb_footprint_plugin.plugin.http import JOB_ID_RE, MAX_FILES_LISTED, MAX_TAGS_LISTED, OP_ID_RE, HttpError, RouteBase


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

    def _runs_payload(self, fp, meta, policy) -> dict:
        """The overview (totals, categories, runs with their plan), memoized per scan and policy."""
        bucket = int(time.time() // 10)  # 'active' (quiet period) depends on the clock
        # keyed by the policy's whole content, never its name: a policy file may carry a
        # built-in's name ("archive") with other rules, and each must get its own numbers
        key = (id(fp), meta["generation"], json.dumps(policy.to_dict(), sort_keys=True, default=str), bucket)
        with self._memo_lock:
            hit = self._memo.get(key)
        if hit is not None:
            return hit
        payload = api.overview(fp, self._plan(fp, policy))
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
        payload["policy_key"] = self._policy_key(request)
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
        names = request.args.getlist("run")
        runs = self._run_names(fp, names) if names else None
        plan = self._plan(fp, policy, runs=runs)
        d = plan.to_dict()
        cats = {a.category for rp in plan.runs for a in rp.actions}
        labels = self._labels(cats)
        d["runs"] = [api.plan_run_view(rp, labels) for rp in plan.runs]
        d["labels"] = labels
        d["scan"] = meta
        d["policy_key"] = self._policy_key(request)
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
        if not JOB_ID_RE.match(jid):
            raise HttpError(400, "a job id is required")
        j = self.p.jobs.get(jid)
        if j is None:
            raise HttpError(404, f"no job {jid!r}")
        return self._json(request, {"job": j.to_dict()})

    def history(self, request):
        if self.p.local:
            entries = api.history(self.p.logdir) if os.path.isdir(self.p.logdir) else []
        else:
            entries = api.history(self.p.logdir, backup_dir=self.p.config.backup_dir)
        entries = list(reversed(entries))
        return self._json(request, {"entries": entries[:500], "total": len(entries)})

    def operations(self, request):
        run = request.args.get("run")
        ops = self._operations()
        if run is not None:
            ops = [m for m in ops if m.get("run") == run]  # compared, never joined
        out = api.summarize_operations(ops)
        return self._json(request, {"operations": out, "kept_blobs": self._kept_blobs() if run is None else []})

    def _kept_blobs(self) -> list:
        """Bytes a restore or rollback found in a file's place and kept in the vault (late records
        among them), as ``api.status`` lists them: the Operations page shows each and how to bring it back."""
        if self.p.local and not os.path.isdir(self.p.logdir):
            return []
        try:
            return api.status(self.p.logdir, backup_dir=self.p.config.backup_dir).get("kept_blobs") or []
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
