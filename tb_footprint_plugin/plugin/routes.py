"""HTTP routes of the Footprint tab, served under ``/data/plugin/footprint/``.

Read routes (GET): ``/status``, ``/token``, ``/policies``, ``/summary``, ``/runs``, ``/run``,
``/plan``, ``/jobs``, ``/job``, ``/history``, ``/operations``, ``/operation``, and the tab's
static files (``/index.js``, ``/model.js``, ``/style.css``, ``/views/*.js``).

Mutating routes (POST, JSON body, token; see ``security``): ``/reduce``, ``/restore``,
``/purge``, ``/cancel``, ``/rescan``; the Retire page's ``/retire_plan``, ``/retired`` (GET) and
``/retire``, ``/unretire`` (POST), in ``retire_routes``.

Every answer goes through ``tensorboard.backend.http_util.Respond``. Run names coming from a
request are only ever looked up in the scan's own run list (or in the vault's operations),
never joined onto the logdir.
"""
from __future__ import annotations

from tb_footprint_plugin.plugin.action_routes import ActionRoutes
from tb_footprint_plugin.plugin.read_routes import ReadRoutes
from tb_footprint_plugin.plugin.retire_routes import RetireRoutes


class Routes(ReadRoutes, ActionRoutes, RetireRoutes):
    """Every route of the tab: the read and the mutating handlers, mapped to their URLs."""

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
            "/retire_plan": self.retire_plan,
            "/retired": self.retired,
            "/sample": self.sample,
        }
        write = {
            "/reduce": self.reduce,
            "/restore": self.restore,
            "/purge": self.purge,
            "/cancel": self.cancel,
            "/rescan": self.rescan,
            "/retire": self.retire,
            "/unretire": self.unretire,
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
