"""The plumbing of the tab's routes: errors as values with an HTTP code, the packaged static
files, and the base every handler class shares (WSGI wrapping, JSON answers, request lookups)."""
from __future__ import annotations

import importlib.resources
import logging
import mimetypes
import os
import re
import threading
from typing import Dict, List, Optional

from werkzeug import wrappers

from tensorboard.backend import http_util

from tb_footprint_plugin import api
from tb_footprint_plugin.api import UNATTRIBUTED
from tb_footprint_plugin.plugin.security import Rejected

logger = logging.getLogger("tb_footprint_plugin.plugin")

MAX_FILES_LISTED = 1000
MAX_TAGS_LISTED = 100
MAX_RUNS_PER_JOB = 10000
OP_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
JOB_ID_RE = re.compile(r"^[0-9a-f]{1,64}$")
KEEP_LATEST_RE = re.compile(r"^keep-latest=\d{1,4}$")
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
        # A source checkout serves its own frontend/ (the package imported from a worktree
        # must not serve another checkout's files through an editable install's mapping).
        here = os.path.dirname(os.path.abspath(__file__))
        checkout = os.path.dirname(os.path.dirname(here))
        if (os.path.isfile(os.path.join(checkout, "setup.py"))
                and os.path.isfile(os.path.join(checkout, "frontend", "index.js"))):
            import pathlib

            return pathlib.Path(checkout, "frontend")
        try:
            root = importlib.resources.files("tb_footprint_plugin.frontend")
            if root.joinpath("index.js").is_file():
                return root
        except (ModuleNotFoundError, TypeError, OSError):
            pass
        return repo

    def names(self) -> List[str]:
        """Servable relative paths: ``*.js``/``*.css`` at the top, ``views/*.js`` and the vendored
        libraries' ``vendor/*.js``/``*.css``."""
        out = []
        try:
            for entry in self.root.iterdir():
                if entry.is_file() and os.path.splitext(entry.name)[1] in (".js", ".css"):
                    out.append(entry.name)
                elif entry.is_dir() and entry.name == "views":
                    out += [f"views/{v.name}" for v in entry.iterdir() if v.is_file() and v.name.endswith(".js")]
                elif entry.is_dir() and entry.name == "vendor":
                    out += [f"vendor/{v.name}" for v in entry.iterdir()
                            if v.is_file() and os.path.splitext(v.name)[1] in (".js", ".css")]
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
class RouteBase:
    """Plumbing every handler shares: the WSGI wrapping, JSON answers and request lookups."""

    def __init__(self, plugin):
        self.p = plugin
        self.assets = Assets()
        self._memo_lock = threading.Lock()
        self._memo: Dict[tuple, dict] = {}

    # --- plumbing -------------------------------------------------------------------------
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
                return self._error(request, e.code, e.reason, headers=e.headers, rejected=True,
                                   reason_code=e.reason_code)
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
        from tb_footprint_plugin.api import BUILTIN, PolicyError, get_policy

        name = value if value not in (None, "") else self.p.config.default_policy
        if not isinstance(name, str):
            raise HttpError(400, "policy must be a string")
        # A request may name a built-in policy or the one TensorBoard was started with, never
        # a path of its choosing (get_policy would open it).
        if name != self.p.config.default_policy and name not in BUILTIN and not KEEP_LATEST_RE.match(name):
            raise HttpError(400, f"unknown policy {name!r}: use one of {', '.join(BUILTIN)} or keep-latest=N")
        try:
            return get_policy(name)
        except (PolicyError, ValueError) as e:
            raise HttpError(400, str(e)) from None

    def _policy_key(self, request) -> str:
        """How the tab names the policy of a request: what it sent, else TensorBoard's default
        (a built-in name or the path of a policy file). Payloads carry it next to the policy's
        own name, so the tab matches a response to its request by the key it sent."""
        value = request.args.get("policy")
        return value if value not in (None, "") else self.p.config.default_policy

    def _scan(self, request=None, wait: Optional[float] = None):
        if not self.p.readable:
            raise HttpError(409, "Footprint reads local logdirs and s3://, gs://, az:// buckets, not this logdir")
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
        if self.p.local and not os.path.isdir(self.p.logdir):
            return []
        return api.operations(self.p.logdir, run=run, backup_dir=self.p.config.backup_dir)

    def _busy(self) -> Dict[str, str]:
        return self.p.jobs.busy_runs()
