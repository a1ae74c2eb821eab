"""Mutating routes (POST, JSON body, token): each checks the request, submits one library call
(``api``) as a background job and answers with the job."""
from __future__ import annotations

from tb_footprint_plugin import api
from tb_footprint_plugin.plugin.jobs import Busy, Job
from tb_footprint_plugin.plugin.http import JOB_ID_RE, OP_ID_RE, HttpError, RouteBase

#: HTTP status of a restore that cannot start, by ``api.NotRestorable.code``
_RESTORE_STATUS = {"not_found": 404, "blocked": 409, "already_restored": 409}


class ActionRoutes(RouteBase):
    """``/reduce``, ``/restore``, ``/purge``, ``/cancel``, ``/rescan``."""

    def reduce(self, request, body):
        fp, _meta = self._scan(wait=0.0)
        policy = self._custom_policy(self._policy(body.get("policy")), body.get("custom"))
        if "match" in body:  # "reduce all matching": exactly the to-do list of the plan the user saw
            names = self._confirmed_matching(fp, policy, body)
        else:
            names = self._run_names(fp, body.get("runs", body.get("run")), changing=True)
        confirmed = body.get("digests")  # the plans the dialog showed (``/plan``'s per-run ``digest``)
        if confirmed is not None and (not isinstance(confirmed, list)
                                      or not all(isinstance(x, str) for x in confirmed)):
            raise HttpError(400, "digests must be a list of the confirmed plans' digests")
        token = _cancel_token()
        job = Job("reduce", names, {"policy": policy.name}, cancel_token=token)
        before = {n: {c.name: c.bytes for c in fp.run(n).categories.values()} for n in names}
        p = self.p

        def work(job: Job) -> dict:
            report = api.reduce_logdir(p.logdir, p.config.backup_dir, policy=policy, dry_run=False, runs=names,
                                       quiet_period=p.config.quiet_period, progress=job.report, cancel=token,
                                       confirmed=confirmed)
            d = api.reduce_summary(report, names, before, with_files=False)
            for o in d["outcomes"]:
                job.finish_run(o["run"], o["status"])
            return d

        return self._submit(request, job, work)

    def _confirmed_matching(self, fp, policy, body) -> list:
        """The runs of a "reduce all matching": the to-do list of ``/plan?q=``, recomputed by the
        same rule, only if its digest is the one the confirmed dialog showed (``digest``). A run
        that appeared, changed or left its quiet period since is never acted on unseen: 409."""
        match, digest = body["match"], body.get("digest")
        if not isinstance(match, dict) or set(match) - {"q"}:
            raise HttpError(400, 'match must be an object {"q": filter}')
        if not isinstance(digest, str) or not digest:
            raise HttpError(400, "digest is required: send back the digest of the /plan?q= you confirmed")
        _names, _plan, todo, _skipped, now = self.matching_todo(fp, policy, match.get("q"))
        if now != digest:
            raise HttpError(409, "The runs to reduce changed since the plan you confirmed (runs appeared, "
                                 "changed or left their quiet period); look at the new plan and confirm again",
                            reason_code=api.Skip.NOT_IN_PLAN.value, todo_runs=len(todo))
        if not todo:
            raise HttpError(409, "no run matching the filter has anything to reduce")
        return [rp.run for rp in todo]

    @staticmethod
    def _custom_policy(base, custom):
        """The tab's custom rules on top of a named policy: ``{"delete": [category], "keep": [category],
        "keep_latest": N, "keep_per_tag": {plugin: N}}``, checked by the library's rules (as the CLI's flags)."""
        if custom is None:
            return base
        if not isinstance(custom, dict) or set(custom) - {"delete", "keep", "keep_latest", "keep_per_tag"}:
            raise HttpError(400, "custom must be an object with delete, keep, keep_latest and/or keep_per_tag")
        try:
            return api.get_policy(api.custom_policy(base.name, delete=custom.get("delete", []),
                                                keep=custom.get("keep", []), keep_latest=custom.get("keep_latest"),
                                                keep_per_tag=custom.get("keep_per_tag")))
        except (api.PolicyError, ValueError) as e:
            raise HttpError(400, str(e)) from None

    def restore(self, request, body):
        op_id, run = body.get("op"), body.get("run")
        if op_id is not None and (not isinstance(op_id, str) or not OP_ID_RE.match(op_id)):
            raise HttpError(400, "a valid operation id is required")
        if run is not None and not isinstance(run, str):
            raise HttpError(400, "run must be a string")
        if op_id is None and run is None:
            raise HttpError(400, "give the operation to restore (op) or a run (run)")
        if op_id is not None and self._find_op(op_id).get("kind") == "retire":
            return self.unretire(request, body)  # a retired run: the Retire page's restore
        p = self.p
        try:
            target = api.restore_target(p.logdir, op=op_id, run=run if op_id is None else None,
                                        backup_dir=p.config.backup_dir)
        except api.NotRestorable as e:
            raise HttpError(_RESTORE_STATUS.get(e.code, 409), str(e)) from None
        runs = [target["run"]]
        params = {"run": target["run"]} if target["run_only"] else {"op": target["op"]}
        # cancellable until its first original goes back (the library then says "restore"): a
        # restore is finished, never undone, but one waiting on a lock or checking a remote
        # vault's backups can still be called off with nothing changed
        token = _cancel_token()
        job = Job("restore", runs, params, cancel_token=token)

        def work(job: Job) -> dict:
            job.report(runs[0], "starting", 0.05)
            outs = api.restore(p.logdir, run=params.get("run"), op=params.get("op"), backup_dir=p.config.backup_dir,
                               cancel=token, progress=job.report)
            for o in outs:
                job.finish_run(o.run, o.status)
            return api.restore_summary(outs)

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
        shown = body.get("op_ids")
        if shown is not None and (not isinstance(shown, list) or not all(isinstance(x, str) for x in shown)):
            raise HttpError(400, "op_ids must be a list of operation ids")
        p = self.p
        kwargs = dict(older_than=older, run=run, backup_dir=p.config.backup_dir, op=op_id)
        if confirm and shown is not None:
            # the tab's preview listed these operations: only they may go (an operation committed
            # since was never shown), whatever this purge would select now
            kwargs["op_ids"] = sorted(set(shown))
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
            again = api.purge(p.logdir, yes=False, **kwargs)
            now = again.originals_lost
            if now != confirmed:
                raise HttpError(409, f"this purge would now lose {now} original file(s) for good, not the {confirmed} "
                                     "you confirmed; look again", originals_lost=now)
            if shown is not None and sorted(o["op_id"] for o in again.ops) != kwargs["op_ids"]:
                raise HttpError(409, "the backups this purge would delete changed since the preview; look again",
                                originals_lost=now)
        # cancellable until the library reports "purge", right before its first intent (its
        # commit point): from there on it finishes, and a cancel is refused with why
        token = _cancel_token()
        job = Job("purge", [], {k: v for k, v in kwargs.items() if k != "backup_dir"}, cancel_token=token)

        def work(job: Job) -> dict:
            rep = api.purge(p.logdir, yes=True, cancel=token, progress=lambda step, frac: job.report(None, step, frac),
                            **kwargs)
            # a purge stopped before its intent deleted nothing: the job then reads "cancelled"
            return dict(rep.to_dict(), committed_any=bool(rep.ops))

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
        if not job.request_cancel():
            if job.kind == "restore":
                raise HttpError(409, "the originals are going back: a restore is finished once it has begun, "
                                     "never undone (reduce the run again afterwards if you wish)", job=job.to_dict())
            if job.kind == "purge":
                raise HttpError(409, "the purge has recorded its intent: the backups are being deleted, and a "
                                     "purge past its intent always finishes (it cannot be undone)", job=job.to_dict())
            raise HttpError(409, "past the commit point: the change is being committed and can no longer be "
                                 "cancelled (restore it afterwards instead)", job=job.to_dict())
        return self._json(request, {"job": job.to_dict()})

    def rescan(self, request, body):
        if not self.p.readable:
            raise HttpError(409, "Footprint reads local logdirs and s3://, gs://, az:// buckets, not this logdir")
        self.p.scans.refresh()
        return self._json(request, {"scan": self.p.scans.get(wait=0.0)[1]}, code=202)


def _cancel_token():
    from tb_footprint_plugin.api import CancelToken

    return CancelToken()
