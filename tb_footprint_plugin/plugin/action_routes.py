"""Mutating routes (POST, JSON body, token): each checks the request, submits one library call
(``api``) as a background job and answers with the job."""
from __future__ import annotations

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome, Skip
from tb_footprint_plugin.plugin.jobs import Busy, Job
from tb_footprint_plugin.plugin.http import JOB_ID_RE, HttpError, RouteBase


class ActionRoutes(RouteBase):
    """``/reduce``, ``/restore``, ``/purge``, ``/cancel``, ``/rescan``."""

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
            d["dashboards"] = api.dashboards_summary(
                "reduce", [(o, plan_runs.get(o["run"], {}).get("actions", [])) for o in d.get("outcomes", [])])
            d.pop("removed_files", None)
            return d

        return self._submit(request, job, work)

    def restore(self, request, body):
        op_id = body.get("op")
        run = body.get("run")
        p = self.p
        if op_id is not None and self._find_op(op_id).get("kind") == "retire":
            return self.unretire(request, body)  # a retired run: the Retire page's restore
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
                    "dashboards": api.dashboards_summary("restore", [(o, None) for o in outcomes]),
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
        confirmed = body.get("originals_lost")
        if confirmed is not None:
            # the tab's second confirmation named this many originals lost for good: purge only
            # if that is still what would happen (nothing reduced or restored meanwhile)
            if isinstance(confirmed, bool) or not isinstance(confirmed, int) or confirmed < 0:
                raise HttpError(400, "originals_lost must be a non-negative whole number")
            now = api.purge(p.logdir, yes=False, **kwargs).originals_lost
            if now != confirmed:
                raise HttpError(409, f"this purge would now lose {now} original file(s) for good, not the {confirmed} "
                                     "you confirmed; look again", originals_lost=now)
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
        if not isinstance(jid, str) or not JOB_ID_RE.match(jid):
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
        if not self.p.readable:
            raise HttpError(409, "Footprint reads local logdirs and s3://, gs://, az:// buckets, not this logdir")
        self.p.scans.refresh()
        return self._json(request, {"scan": self.p.scans.get(wait=0.0)[1]}, code=202)


def _cancel_token():
    from tb_footprint_plugin.api import CancelToken

    return CancelToken()
