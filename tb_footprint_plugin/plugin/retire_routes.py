"""Routes of the tab's Retire page: the dry run of a selection (GET ``/retire_plan``), the list of
retired runs (GET ``/retired``), and two mutating routes (POST + token, see ``security``):
``/retire`` (a background job over ``api.retire``) and ``/unretire`` (``api.restore`` of one
retirement). The selection rules themselves live in the library (``plan.retire``)."""
from __future__ import annotations

import math
from typing import List, Optional

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.plugin.http import HttpError, RouteBase
from tb_footprint_plugin.plugin.jobs import Job

MAX_PATTERN = 500


def _number(value, name: str, *, whole: bool = False) -> Optional[float]:
    if value in (None, ""):
        return None
    try:
        x = int(value) if whole else float(value)
    except (TypeError, ValueError):
        raise HttpError(400, f"{name} must be a {'whole ' if whole else ''}number") from None
    if isinstance(value, bool) or x < 0 or (isinstance(x, float) and not math.isfinite(x)):
        raise HttpError(400, f"{name} must be a non-negative {'whole ' if whole else ''}number")
    return x


def _text(value, name: str) -> Optional[str]:
    if value in (None, ""):
        return None
    if not isinstance(value, str) or len(value) > MAX_PATTERN:
        raise HttpError(400, f"{name} must be a string of at most {MAX_PATTERN} characters")
    return value


class RetireRoutes(RouteBase):
    """``/retire_plan``, ``/retired`` (read); ``/retire``, ``/unretire`` (write)."""

    def _retire_rule(self, get, runs: Optional[List[str]]):
        """A ``RetireRule`` from request parameters (``get(name)`` reads one); 400 when it means nothing."""
        keep_best = _number(get("keep_best"), "keep_best", whole=True)
        try:
            return api.retire_rule(
                runs=runs or None, run_glob=_text(get("glob"), "glob"), group=_text(get("group"), "group"),
                older_than=_number(get("older_than_s"), "older_than_s"),
                min_size=int(_number(get("min_size"), "min_size", whole=True) or 0),
                keep_best=int(keep_best) if keep_best is not None else None, metric=_text(get("metric"), "metric"),
                mode=get("mode") or "min", value=get("value") or "last",
                include_nested=get("with_nested") in (True, "1", "true"))
        except ValueError as e:
            raise HttpError(400, str(e)) from None

    def _reload_note(self) -> str:
        interval = getattr(self.p.flags, "reload_interval", 5.0)
        if not interval:
            return "TensorBoard loads the logdir only once (--reload_interval 0): restart it to see the change"
        return (f"TensorBoard's run list changes on its next reload (every {interval:g} s); "
                "reload the page to see it")

    # --- read -----------------------------------------------------------------------------
    def retire_plan(self, request):
        fp, _meta = self._scan(request)
        names = request.args.getlist("run")
        runs = self._run_names(fp, names, changing=True) if names else None
        rule = self._retire_rule(request.args.get, runs)
        plan = api.retire_plan(self.p.logdir, rule, backup_dir=self.p.config.backup_dir,
                               quiet_period=self.p.config.quiet_period, footprint=fp)
        busy = self._busy()
        d = plan.to_dict()
        for item in d["items"]:
            if item["selected"] and any(r in busy for r in [item["run"]] + item["takes_along"]):
                item["selected"], item["code"] = False, "locked"
                item["reason"] = "a job is running on this run"
        d["bytes"] = sum(i["bytes"] for i in d["items"] if i["selected"])
        d["runs"] = sum(1 for i in d["items"] if i["selected"])
        d["reload_note"] = self._reload_note()
        return self._json(request, d)

    def retired(self, request):
        q = (request.args.get("q") or "").lower()
        # a bucket's retirements too (engine.bucket_retire): api.retired reads its vault's manifests
        rows = api.retired(self.p.logdir, backup_dir=self.p.config.backup_dir) if self.p.readable else []
        rows = [r for r in rows if not q or q in r["run"].lower()]
        return self._json(request, {"retired": rows, "bytes": sum(r["bytes"] for r in rows)})

    # --- write ----------------------------------------------------------------------------
    def retire(self, request, body):
        fp, _meta = self._scan(wait=0.0)
        names = self._run_names(fp, body.get("runs"), changing=True)
        if not isinstance(body.get("with_nested", False), bool):
            raise HttpError(400, "with_nested must be true or false")
        rule = self._retire_rule(lambda k: body.get(k), names)
        p = self.p
        plan = api.retire_plan(p.logdir, rule, backup_dir=p.config.backup_dir, quiet_period=p.config.quiet_period,
                               footprint=fp)
        moving = sorted({r for i in plan.selected for r in [i.run] + i.takes_along})
        if not plan.selected:
            reasons = "; ".join(f"{i.run}: {i.reason}" for i in plan.items)
            raise HttpError(409, f"nothing to retire: {reasons}", plan=plan.to_dict())
        from tb_footprint_plugin.api import CancelToken

        token = CancelToken()
        job = Job("retire", moving, {"runs": [i.run for i in plan.selected], "bytes": plan.bytes}, cancel_token=token)
        note = self._reload_note()

        def work(job: Job) -> dict:
            rep = api.retire(p.logdir, rule, dry_run=False, backup_dir=p.config.backup_dir,
                             quiet_period=p.config.quiet_period, only=[i.run for i in plan.selected],
                             progress=job.report, cancel=token, footprint=fp)
            d = rep.to_dict()
            for o in d["outcomes"]:
                o["kind"] = "retire"
                o["dashboards"] = [note] if o["status"] == Outcome.VERIFIED else []
                job.finish_run(o["run"], o["status"])
                for r in next((i.takes_along for i in plan.selected if i.run == o["run"]), []):
                    job.finish_run(r, o["status"])
            d["committed_any"] = any(o["status"] == Outcome.VERIFIED for o in d["outcomes"])
            return d

        return self._submit(request, job, work)

    def unretire(self, request, body):
        op_id, run = body.get("op"), body.get("run")
        rows = api.retired(self.p.logdir, backup_dir=self.p.config.backup_dir)
        if op_id is not None:
            m = self._find_op(op_id)
            if m.get("kind") != "retire":
                raise HttpError(409, f"operation {op_id} is a {m.get('kind')}, not a retirement")
            row = next((r for r in rows if r["op_id"] == op_id), None)
            if row is None:
                why = ("already restored by " + m["restored_by"]) if m.get("restored_by") else \
                    "its files were purged" if m.get("backup_purged") else f"it ended {m.get('outcome')}"
                raise HttpError(409, f"retirement {op_id} cannot be restored: {why}")
        elif isinstance(run, str):
            row = next((r for r in rows if r["run"] == run), None)
            if row is None:
                raise HttpError(404, f"run {run!r} is not retired")
        else:
            raise HttpError(400, "give the retirement to restore (op) or a retired run (run)")
        p = self.p
        job = Job("restore", [row["run"]] + row["takes_along"], {"op": row["op_id"], "retired": True},
                  cancel_token=None, cancellable=False)
        note = self._reload_note()

        def work(job: Job) -> dict:
            job.report(row["run"], "restore", 0.1)
            outs = api.restore(p.logdir, op=row["op_id"], backup_dir=p.config.backup_dir)
            outcomes = []
            for o in outs:
                d = o.to_dict()
                d["kind"] = "unretire"
                d["dashboards"] = [note] if o.status == Outcome.RESTORED else []
                outcomes.append(d)
                job.finish_run(o.run, o.status)
            for r in row["takes_along"]:
                job.finish_run(r, outcomes[0]["status"] if outcomes else "failed")
            return {"outcomes": outcomes, "ok": all(o["status"] == Outcome.RESTORED for o in outcomes),
                    "committed_any": any(o["status"] == Outcome.RESTORED for o in outcomes)}

        return self._submit(request, job, work)


__all__ = ["RetireRoutes"]
