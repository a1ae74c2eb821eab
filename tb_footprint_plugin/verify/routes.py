"""What the dashboard fetches, through TensorBoard's own WSGI application.

The reader-level checks (``views``) compare what the DataProvider API returns; this layer
asks what the *frontend* gets: TensorBoard's own ``TensorBoardWSGIApp`` with its own
first-party plugins is built in-process over a data provider (the Python multiplexer or a
private Rust data server) and crawled the way the dashboards crawl it — listings first, then
every series each listing offers, then every blob (image, audio, time-series image) those
series point at. Two applications (original, reduced) are crawled in lockstep and each
response is compared and dropped at once, so memory is a few responses (per concurrent group
of routes), not one run.

Every response is turned into one of three shapes before comparison:

* ``listing`` — ``{key: info}`` (runs, plugins, tags): a key that disappears is a failure
  unless the plugin's contract is "removed"; a key that appears is always one;
* ``points``  — ``{series: [point, ...]}``: identical under an exact contract, else an
  in-order subset keeping what the contract says must stay (first/last point);
* ``exact``   — anything else (graphs, hparams): identical, or gone where "removed".

Blob references (``blob_key=...`` queries, time-series ``imageId``) are replaced by the
sha256 of the bytes the blob route serves, so two runs are compared by what the browser
would receive, not by opaque keys.

Why one module: the two applications are crawled in lockstep and each
response is compared and dropped at once (memory bounded by a few responses), so the per-plugin
crawlers and the comparison of the three response shapes work on the same ``Response`` /
``_Side`` values; crawler and comparer apart would need a whole crawl kept or a callback protocol
between them.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import json
import logging
import os
import queue
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

from tb_footprint_plugin.verify.stop import NEVER, POLL_S, Stop

#: What the graph dashboard asks for attributes (``tf-graph-loader``: attribute values over
#: 1 KB are listed by name under this key instead of being sent). The 2.21 bundle's
#: ``_load`` calls ``/graph`` without them: both requests are crawled.
GRAPH_LIMIT_ATTR_SIZE = 1024
GRAPH_LARGE_ATTRS_KEY = "_too_large_attrs"

#: Dashboard plugin name -> the data plugin whose contract governs its routes.
ROUTE_PLUGIN = {
    "distributions": "histograms",
    "custom_scalars": "scalars",
    "timeseries": "scalars",  # per request item: the item's own plugin (see _timeseries)
    "hparams": "hparams",
}

#: Dashboard plugins whose data a policy may remove as a whole: their routes are not served
#: by the first-party application and are reported "removed by policy" when the plan says so.
PROFILE_PLUGINS = ("profile", "pytorch_profiler")

GRAPH_DATA_PLUGINS = (
    "graphs", "graph_run_metadata", "graph_run_metadata_graph", "graph_keras_model",
    "graph_tagged_run_metadata",
)


@dataclass
class Response:
    """One crawled route, normalized."""

    route: str  # e.g. "/data/plugin/scalars/scalars?run=run&tag=loss"
    plugin: str  # data plugin whose contract applies
    shape: str  # listing | points | exact
    status: int
    value: Any
    #: sha256 of the body as served: equal digests are equal responses, without walking
    #: the (possibly large) parsed value. Blob references are resolved in ``value`` only.
    body_sha256: str = ""


@dataclass
class RouteDiff:
    route: str
    plugin: str
    why: str


@dataclass
class CrawlResult:
    """Outcome of one lockstep crawl (one backend)."""

    routes: int = 0
    blobs: int = 0
    by_plugin: dict = field(default_factory=dict)  # plugin -> routes compared
    diffs: list = field(default_factory=list)  # RouteDiff, in crawl order
    notes: list = field(default_factory=list)
    #: dashboards TensorBoard's plugins listing shows disabled on both sides whose routes were
    #: therefore not crawled (``INACTIVE_SKIPPABLE``)
    skipped: list = field(default_factory=list)


# --- the application -------------------------------------------------------------------------


_SKIPPED_LOADERS = ("profile_redirect", "wit_redirect")


_PREWARM: Optional[threading.Thread] = None
_PREWARM_LOCK = threading.Lock()


#: A 1x1 PNG: what ``first_uses`` hands TensorBoard's image MIME detection.
_PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108000000003a7e9b550000000a49444154789c"
    "636000000002000148afa4710000000049454e44ae426082")


def first_uses(app) -> None:
    """What the crawl's first requests would import, done now (``prewarm``): one request
    through TensorBoard's app under the test client (werkzeug decodes the host through the
    ``idna`` codec: ``encodings.idna``, ``stringprep``), and the image routes' MIME detection
    (``img_mime_type_detector.from_bytes``: PIL's first ``Image.open`` imports its BMP, GIF,
    JPEG, PNG and PPM plugins, ~0.05 s of a core). Inside a verification the image group's
    blob fetches, up to ``BLOB_WORKERS`` threads, all waited on the import lock for them
    (timelines of a 20 MB reduce: 0.05-0.07 s of the route crawl). The request reads no data
    provider (``/data/logdir``); nothing of any run is read."""
    from tensorboard.util import img_mime_type_detector

    _Client(app).get("/data/logdir")
    img_mime_type_detector.from_bytes(_PNG_1X1)


def prewarm() -> None:
    """Build TensorBoard's app once, on a thread, so that its imports (~0.4 s: every
    first-party plugin; once per process) and its first requests' (``first_uses``) happen
    while the caller is busy elsewhere (a big run's backup) instead of inside its
    verification. The app is over a logdir that does not exist and no data provider: nothing
    is read or written. ``make_app`` waits for it.

    TensorBoard's file layer is imported first, here in the caller's thread
    (``views.import_tensorboard_io``: its S3 and fsspec clients deferred to their first use,
    which it can only arrange while no other thread runs): were the app's imports the first of
    TensorBoard's in the process, its gfile would import boto3 and fsspec itself on the
    prewarm's thread, 0.13-0.19 s of a core for paths the verification never reads."""
    global _PREWARM
    with _PREWARM_LOCK:
        if _PREWARM is not None:
            return
        from tb_footprint_plugin.formats import views

        views.import_tensorboard_io()

        def build() -> None:
            try:
                first_uses(_build_app(os.path.join(os.sep, "nonexistent-tb-footprint-prewarm"),
                                      None))
            except Exception:  # noqa: BLE001 - the real build raises it where it is reported
                pass

        _PREWARM = threading.Thread(target=build, name="footprint-tb-imports", daemon=True)
        _PREWARM.start()


#: Seconds ``make_app`` callers of this process spent waiting for the prewarm's thread
#: (``prewarm_waited``): what a route crawl lost to TensorBoard's imports not being done yet.
_PREWARM_WAITED = [0.0]


def prewarm_waited() -> float:
    """Seconds this process's ``make_app`` calls waited for ``prewarm``'s thread, in all (the
    bench prints it beside a reduce: whether starting the imports earlier could shorten it)."""
    return _PREWARM_WAITED[0]


def make_app(logdir: str, provider, multiplexer=None, samples_per_plugin: str = ""):
    """TensorBoard's own WSGI app (first-party plugins, its own flags) over ``provider``."""
    t = _PREWARM
    if t is not None and t.is_alive():
        start = time.perf_counter()
        t.join()
        waited = time.perf_counter() - start
        with _PREWARM_LOCK:
            _PREWARM_WAITED[0] += waited
    return _build_app(logdir, provider, multiplexer, samples_per_plugin)


_BUILD_LOCK = threading.Lock()  # one build at a time: the logger level it sets is process-wide


def _build_app(logdir: str, provider, multiplexer=None, samples_per_plugin: str = ""):
    with _BUILD_LOCK:
        return _build_app_locked(logdir, provider, multiplexer, samples_per_plugin)


def _build_app_locked(logdir: str, provider, multiplexer=None, samples_per_plugin: str = ""):
    from tensorboard import default, program
    from tensorboard.backend import application

    # The redirect loaders only probe whether xprof / WIT are installed (importing xprof
    # imports TensorFlow: ~10 s, ~500 MB) and serve no data: the Profile dashboards are not
    # compared (a policy's profile removal is reported as such).
    loaders = [p for p in default.get_static_plugins()
               if not any(f".{n}." in getattr(p, "__module__", "") for n in _SKIPPED_LOADERS)]
    tb = program.TensorBoard(plugins=loaders)
    argv = ["", f"--logdir={logdir}"]
    if samples_per_plugin:
        argv.append(f"--samples_per_plugin={samples_per_plugin}")
    tb.configure(tuple(argv))
    quiet = logging.getLogger("tensorboard")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # plugin loaders log about optional features at WARNING
    try:
        return application.TensorBoardWSGIApp(
            tb.flags, tb.plugin_loaders, provider, None, multiplexer
        )
    finally:
        quiet.setLevel(level)


class _Client:
    """A werkzeug test client over one app, counting what it fetched."""

    def __init__(self, app) -> None:
        from werkzeug.test import Client

        self.client = Client(app)
        self.blobs = 0
        #: blob key -> future digest: the images and time-series routes point at the same
        #: blobs, and their groups run at once: the second asker waits for the first fetch
        self._digests: dict[str, concurrent.futures.Future] = {}
        self._lock = threading.Lock()

    def get(self, path: str, data: Optional[dict] = None) -> tuple[int, bytes, str]:
        if data is None:
            return self._call(lambda: self.client.get(path))
        # the frontend POSTs form-encoded requests to these routes
        return self._call(lambda: self.client.post(path, data=data))

    def post_json(self, path: str, body: dict) -> tuple[int, bytes, str]:
        return self._call(lambda: self.client.post(path, data=json.dumps(body),
                                                   content_type="application/json"))

    @staticmethod
    def _call(request: Callable) -> tuple[int, bytes, str]:
        try:
            r = request()
        except Exception as e:  # noqa: BLE001 - the server would answer 500: compare that
            # (e.g. the graphs route on a corrupt GraphDef raises out of its own handler)
            return 500, f"<{type(e).__name__}: {e}>".encode("utf-8", "replace"), ""
        return r.status_code, r.get_data(), r.headers.get("Content-Type", "")

    def blob_digest(self, path: str, key: Optional[str] = None) -> str:
        """sha256 of what ``path`` serves (once per blob ``key`` when given)."""
        if key is None:
            return self._fetch_digest(path)
        with self._lock:  # blobs are asked for by several threads and groups
            got = self._digests.get(key)
            mine = got is None
            if mine:
                got = self._digests[key] = concurrent.futures.Future()
        if mine:
            try:
                got.set_result(self._fetch_digest(path))
            except BaseException as e:  # noqa: BLE001 - every asker gets the same failure
                got.set_exception(e)
        return got.result()

    def _fetch_digest(self, path: str) -> str:
        status, body, _ = self.get(path)
        with self._lock:
            self.blobs += 1
        return f"<HTTP {status}>" if status != 200 else hashlib.sha256(body).hexdigest()


def _json(status: int, body: bytes) -> Any:
    if status != 200:
        return {"<http status>": status, "<body>": body[:200].decode("utf-8", "replace")}
    try:
        return json.loads(body)
    except ValueError:
        return {"<body sha256>": hashlib.sha256(body).hexdigest()}


def _q(**kw) -> str:
    return urllib.parse.urlencode({k: v for k, v in kw.items() if v is not None})


# --- the crawl ---------------------------------------------------------------------------------


class _Side:
    """One application and the listings already fetched from it."""

    def __init__(self, app, provider=None) -> None:
        self.c = _Client(app)
        #: The data provider the app serves from: heavy routes are compared at this level.
        self.provider = provider

    def json(self, path: str) -> tuple[int, Any]:
        status, body, _ = self.c.get(path)
        return status, _json(status, body)


def _listing_keys(value: Any, depth: int) -> set:
    """Flatten a nested listing to tuples of keys ``depth`` deep."""
    if depth == 0 or not isinstance(value, dict):
        return {()}
    return {(k, *rest) for k, v in value.items() for rest in _listing_keys(v, depth - 1)}


def _union(a: Any, b: Any, depth: int) -> list:
    return sorted(_listing_keys(a, depth) | _listing_keys(b, depth), key=repr)


#: Blobs of one series fetched at a time: each is a round trip to the data server (~45 ms for
#: a Rust server's image: its small stream frames wait for a delayed ACK), and the app serves
#: requests concurrently, as for a browser. A default-view image series (10 samples) takes one round.
BLOB_WORKERS = 16


def _with_blobs(side: _Side, points: list, key: str, route: str, extra: str = "") -> list:
    """Replace ``point[key]`` (a blob query or id) by the sha256 of the served bytes."""
    out, wanted = [], []
    for p in points:
        if isinstance(p, dict) and key in p:
            p = dict(p)
            ref = p.pop(key)
            target = f"{route}?{ref}{extra}" if key == "query" else f"{route}?{_q(imageId=ref)}"
            blob_key = (urllib.parse.parse_qs(ref).get("blob_key", [None])[0]
                        if key == "query" else ref)
            wanted.append((p, target, blob_key))
        out.append(p)
    if len(wanted) > 1:
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(max_workers=BLOB_WORKERS) as pool:
            digests = list(pool.map(lambda w: side.c.blob_digest(w[1], w[2]), wanted))
    else:
        digests = [side.c.blob_digest(t, k) for _, t, k in wanted]
    for (p, _, _), d in zip(wanted, digests):
        p["<bytes sha256>"] = d
    return out


#: Dashboards whose routes are not crawled when TensorBoard's own plugins listing
#: (``/data/plugins_listing``, compared as any listing) shows them disabled on *both* sides.
#: Checked in TensorBoard 2.21's code: each of these plugins' ``is_active()`` is ``False``
#: ("``list_plugins`` as called by TB core suffices"), so ``enabled`` is exactly "the data
#: provider's ``list_plugins`` holds one of its ``data_plugin_names()``" (its own name), and
#: every route the crawl asks of it reads the provider under that name only: pr_curves, text,
#: mesh (``list_tensors``/``read_tensors``), audio (``list_blob_sequences``/``read_blob*``),
#: custom_scalars (``/layout`` reads its own tensors; ``/scalars`` is crawled only for the
#: regexes that layout names). hparams also asks the provider's ``list_hyperparameters`` /
#: ``read_hyperparameters``: it is skipped only when both providers keep the base class's
#: (empty) ones, as both of ours do (``_provider_hparams_empty``). Disabled on both sides,
#: those routes read nothing on either: there is nothing to compare, and a reduction that
#: adds or removes such data changes the listing, which is compared. Graphs, images, scalars,
#: histograms and the time series are always crawled (the Python loader shows a run graph
#: without listing a plugin for it).
INACTIVE_SKIPPABLE = ("pr_curves", "text", "audio", "mesh", "custom_scalars", "hparams")


def _provider_hparams_empty(provider) -> bool:
    """Whether ``provider`` answers hyperparameter calls with the base class's empty result."""
    from tensorboard.data import provider as tb_provider

    base = tb_provider.DataProvider
    return provider is not None and all(
        getattr(type(provider), m, None) is getattr(base, m)
        for m in ("list_hyperparameters", "read_hyperparameters"))


def _disabled_on_both(pair: tuple, providers: tuple) -> frozenset:
    """The ``INACTIVE_SKIPPABLE`` dashboards both sides' plugins listings show disabled."""
    out = set()
    for name in INACTIVE_SKIPPABLE:
        if all(r.status == 200 and isinstance(r.value, dict) and r.value.get(name) is False
               for r in pair):
            out.add(name)
    if "hparams" in out and not all(_provider_hparams_empty(p) for p in providers):
        out.discard("hparams")
    return frozenset(out)


def crawl_pair(app_before, app_after, sides: Optional[list] = None,
               providers: Optional[tuple] = None, skipped: Optional[list] = None,
               stop: Stop = NEVER) -> Iterator[tuple[Response, Response]]:
    """Yield ``(before, after)`` normalized responses for every route the dashboards fetch.

    Which series to fetch is the union of both sides' listings, so a series that vanished
    is fetched (and found missing) as well as one that appeared. With ``providers`` (the
    two apps' data providers), the histogram series behind the histograms, distributions
    and time-series routes are compared where those routes read them (``_heavy_histograms``).
    The routes of a dashboard in ``INACTIVE_SKIPPABLE`` that both plugins listings show
    disabled are not fetched; ``skipped`` (a list) receives their names. ``stop``: the
    crawl ends (``Stopped``) at the next response it waits for, its groups at their next one.
    """
    if sides is None:
        sides = []
    pv = providers or (None, None)
    sides[:] = [_Side(app_before, pv[0]), _Side(app_after, pv[1])]
    heavy = providers is not None
    # The two sides are asked at once: each request mostly waits for its app's data provider
    # (a data server in another process), the two apps share nothing. So are the dashboards'
    # groups of routes (``_crawl_groups``): measured, the crawl of a reduced 1 GB run was
    # three-quarters waiting, for histogram series over gRPC and for image blobs.
    other = concurrent.futures.ThreadPoolExecutor(max_workers=_GROUPS,
                                                  thread_name_prefix="footprint-crawl")

    def both(call: Callable[[_Side], Any]) -> list:
        first = other.submit(call, sides[0])
        second = call(sides[1])
        return [first.result(), second]

    def listing(route: str, plugin: str, pick: Callable[[Any], Any] = lambda v: v):
        got = both(lambda s: s.json(route))
        pair = tuple(Response(route, plugin, "listing", st, pick(v) if st == 200 else v)
                     for st, v in got)
        return pair

    def fetch(route: str, plugin: str, shape: str, norm: Callable[[_Side, int, Any], Any],
              post: Optional[dict] = None, post_json: Optional[dict] = None,
              path: Optional[str] = None):
        def one(s: _Side) -> Response:
            if post_json is not None:
                status, body, _ = s.c.post_json(path or route, post_json)
            else:
                status, body, _ = s.c.get(path or route, post)
            value = _json(status, body)
            return Response(route, plugin, shape, status,
                            norm(s, status, value) if status == 200 else value,
                            hashlib.sha256(body).hexdigest())

        return tuple(both(one))

    listed: concurrent.futures.Future = concurrent.futures.Future()

    def plugins_listing() -> tuple:
        """The plugins listing's pair (the core group asks for it first); the groups that may
        leave a dashboard out wait for what it shows disabled on both sides (``listed``)."""
        try:
            pair = listing("/data/plugins_listing", "<core>",
                           lambda v: {p: bool(i.get("enabled")) for p, i in v.items()})
            off = _disabled_on_both(pair, (sides[0].provider, sides[1].provider)
                                    if providers is not None else (None, None))
        except BaseException as e:
            listed.set_exception(e)
            raise
        if skipped is not None:
            skipped[:] = sorted(off)
        listed.set_result(off)
        return pair

    groups = _crawl_groups(sides, listing, fetch, heavy, plugins_listing, listed.result)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(groups),
                                                 thread_name_prefix="footprint-crawl-group")
    done = threading.Event()  # the caller is done (stopped early, or failed): groups end
    stop.on_stop(done.set)  # a stopped verification: at once, not when the caller next looks
    # each group runs ahead of the caller by at most _AHEAD responses: memory stays a few
    # responses per group, not the run's
    queues = [queue.Queue(maxsize=_AHEAD) for _ in groups]
    try:
        for g, q in zip(groups, queues):
            pool.submit(_produce, g, q, done)
        for q in queues:  # in the dashboards' order
            while True:
                try:
                    kind, item = q.get(timeout=POLL_S) if stop.active else q.get()
                except queue.Empty:
                    stop.check()
                    continue
                if kind == "end":
                    break
                if kind == "error":
                    raise item
                yield item
    finally:
        done.set()
        if not listed.done():  # the core group ended before the listing: nobody waits on
            listed.set_exception(RuntimeError("the crawl stopped before the plugins listing"))
        pool.shutdown(wait=True, cancel_futures=True)
        other.shutdown(wait=True)


#: responses a group of routes may fetch ahead of the comparison
_AHEAD = 32


def _produce(group: Callable[[], Iterator[tuple]], q: "queue.Queue", done: threading.Event) -> None:
    """Run one group of ``crawl_pair``, putting ``("item", pair)``, then ``("end", None)`` or
    ``("error", exception)`` on ``q``; ends at once when ``done`` is set."""

    def put(entry: tuple) -> bool:
        while not done.is_set():
            try:
                q.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    try:
        for item in group():
            if not put(("item", item)):
                return
        put(("end", None))
    except BaseException as e:  # noqa: BLE001 - handed to the caller, which raises it in order
        put(("error", e))


#: ``_crawl_groups``' number of groups
_GROUPS = 8


def _crawl_groups(sides, listing, fetch, heavy: bool, plugins: Callable[[], tuple],
                  disabled: Callable[[], frozenset]) -> list:
    """``crawl_pair``'s routes as ``_GROUPS`` groups that share nothing but the blobs' digests
    (each lists what it fetches), in the dashboards' order: callables returning an iterator of
    response pairs. ``plugins`` fetches the plugins listing's pair (the core group's second);
    ``disabled`` is what it shows disabled on both sides, waited for only by the groups that
    may leave a dashboard out. hparams is a group of its own: its session groups are the
    slowest route of a run without hyperparameters (~70 ms), and behind four listings it was
    the crawl's longest."""

    def core() -> Iterator[tuple]:
        # runs and the plugin listing the dashboard tabs come from, then the scalars
        yield listing("/data/runs", "<core>", lambda v: {r: True for r in v})
        yield plugins()
        yield from _scalar_like(sides, listing, fetch, "scalars", "/scalars")

    def histograms() -> Iterator[tuple]:
        if heavy:
            yield from _heavy_histograms(sides, listing)
        else:
            yield from _scalar_like(sides, listing, fetch, "histograms", "/histograms")
            yield from _scalar_like(sides, listing, fetch, "distributions", "/distributions")

    def small() -> Iterator[tuple]:
        off = disabled()
        if "pr_curves" not in off:
            yield from _scalar_like(sides, listing, fetch, "pr_curves", "/pr_curves")
        if "text" not in off:
            yield from _text(listing, fetch)

    def rest() -> Iterator[tuple]:
        off = disabled()
        if "audio" not in off:
            yield from _blobs(listing, fetch, "audio", "/audio", "/individualAudio")
        if "mesh" not in off:
            yield from _mesh(listing, fetch)
        if "custom_scalars" not in off:
            yield from _custom_scalars(sides, fetch)

    def hparams() -> Iterator[tuple]:
        if "hparams" not in disabled():
            yield from _hparams(fetch)

    def images() -> Iterator[tuple]:
        yield from _blobs(listing, fetch, "images", "/images", "/individualImage")

    def timeseries() -> Iterator[tuple]:
        # the time-series image routes point at the images' blobs: each is fetched once, by
        # whichever group asks first (``_Client.blob_digest``)
        yield from _timeseries(listing, fetch, skip=("histograms",) if heavy else ())

    return [core, histograms, small, images, timeseries, rest, hparams,
            lambda: _graphs(listing, fetch)]


def _points_by_series(series: str):
    def norm(side, status, value):
        return {series: value if isinstance(value, list) else [value]}

    return norm


def _scalar_like(sides, listing, fetch, plugin: str, data_route: str):
    base = f"/data/plugin/{plugin}"
    tags = listing(f"{base}/tags", ROUTE_PLUGIN.get(plugin, plugin))
    yield tags
    for run, tag in _union(tags[0].value, tags[1].value, 2):
        yield fetch(f"{base}{data_route}?{_q(run=run, tag=tag)}", ROUTE_PLUGIN.get(plugin, plugin),
                    "points", _points_by_series(f"{run}/{tag}"))


def _text(listing, fetch):
    tags = listing("/data/plugin/text/tags", "text",
                   lambda v: {r: {t: True for t in ts} for r, ts in v.items()})
    yield tags
    for run, tag in _union(tags[0].value, tags[1].value, 2):
        yield fetch(f"/data/plugin/text/text?{_q(run=run, tag=tag)}", "text", "points",
                    _points_by_series(f"{run}/{tag}"))


def _blobs(listing, fetch, plugin: str, meta_route: str, blob_route: str):
    base = f"/data/plugin/{plugin}"
    tags = listing(f"{base}/tags", plugin)
    yield tags
    for run, tag in _union(tags[0].value, tags[1].value, 2):
        samples = max(
            int(((t.value.get(run) or {}).get(tag) or {}).get("samples", 1) or 1)
            if isinstance(t.value, dict) else 1
            for t in tags
        )
        for sample in range(samples):
            def norm(side, status, value, run=run, tag=tag, sample=sample):
                pts = _with_blobs(side, value if isinstance(value, list) else [],
                                  "query", f"{base}{blob_route}")
                return {f"{run}/{tag}/sample {sample}": pts}

            yield fetch(f"{base}{meta_route}?{_q(run=run, tag=tag, sample=sample)}", plugin,
                        "points", norm)


def _mesh(listing, fetch):
    from tensorboard.plugins.mesh import plugin_data_pb2

    base = "/data/plugin/mesh"
    tags = listing(f"{base}/tags", "mesh")
    yield tags
    for run, tag in _union(tags[0].value, tags[1].value, 2):
        def norm(side, status, value, run=run, tag=tag):
            out = []
            for m in value if isinstance(value, list) else []:
                m = dict(m)
                try:
                    ct = plugin_data_pb2.MeshPluginData.ContentType.Name(m["content_type"])
                except (KeyError, ValueError):
                    ct = None
                if ct is not None:
                    q = _q(run=run, tag=tag, sample=0, content_type=ct, step=m.get("step"))
                    m["<data sha256>"] = side.c.blob_digest(f"{base}/data?{q}")
                out.append(m)
            return {f"{run}/{tag}": out}

        yield fetch(f"{base}/meshes?{_q(run=run, tag=tag, sample=0)}", "mesh", "points", norm)


def _custom_scalars(sides, fetch):
    base = "/data/plugin/custom_scalars"
    layout = fetch(f"{base}/layout", "scalars", "exact", lambda s, st, v: v)
    yield layout
    runs = set()
    for s in sides:
        st, v = s.json("/data/plugin/scalars/tags")
        if st == 200 and isinstance(v, dict):
            runs |= set(v)
    regexes = set()
    for r in layout:
        for cat in (r.value or {}).get("category", []) if isinstance(r.value, dict) else []:
            for chart in cat.get("chart", []):
                regexes |= set((chart.get("multiline") or {}).get("tag", []))
                for series in (chart.get("margin") or {}).get("series", []):
                    regexes |= {series.get(k) for k in ("value", "lower", "upper")} - {None}
    for regex in sorted(regexes):
        for run in sorted(runs):
            yield fetch(f"{base}/scalars?{_q(run=run, tag=regex)}", "scalars", "exact",
                        lambda s, st, v: v)


def _hparams(fetch):
    base = "/data/plugin/hparams"
    exp = fetch(f"{base}/experiment", "hparams", "exact", lambda s, st, v: v,
                post_json={"experimentName": ""})
    yield exp
    cols: list = []
    for r in exp:
        if isinstance(r.value, dict):
            for h in r.value.get("hparamInfos", []):
                c = {"hparam": h.get("name"), "includeInResult": True}
                if c not in cols:
                    cols.append(c)
            for m in r.value.get("metricInfos", []):
                c = {"metric": m.get("name"), "includeInResult": True}
                if c not in cols:
                    cols.append(c)
    request = {
        "experimentName": "",
        "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE",
                            "STATUS_RUNNING"],
        "colParams": cols,
        "startIndex": 0,
        "sliceSize": 1_000_000,
        "includeMetrics": True,
    }
    yield fetch(f"{base}/session_groups", "hparams", "exact", lambda s, st, v: v,
                post_json=request)


def _timeseries(listing, fetch, skip: tuple = ()):
    base = "/data/plugin/timeseries"
    tags = listing(f"{base}/tags", "scalars")
    # The tag listing mixes plugins: compare it per plugin so each has its own contract.
    for plugin in ("scalars", "histograms", "images"):
        pair = tuple(Response(t.route + f" ({plugin})", plugin, "listing", t.status,
                              _ts_listing(t.value, plugin)) for t in tags)
        yield pair
        if plugin in skip:
            continue  # its series are compared by _heavy_histograms
        items: set = set()
        for t in pair:
            if isinstance(t.value, dict):
                items |= set(t.value)
        for item in sorted(items, key=repr):
            if plugin == "images":
                run, tag, samples = item
                reqs = [{"plugin": plugin, "tag": tag, "run": run, "sample": i}
                        for i in range(samples)]
            else:
                run, tag = item
                reqs = [{"plugin": plugin, "tag": tag, "run": run}]
            for req in reqs:
                def norm(side, status, value, req=req):
                    out = {}
                    for resp in value if isinstance(value, list) else []:
                        for r, pts in (resp.get("runToSeries") or {}).items():
                            if plugin == "images":
                                pts = _with_blobs(side, pts, "imageId", f"{base}/imageData")
                            out[f"{r}/{req['tag']}" + (f"/sample {req['sample']}"
                                                         if "sample" in req else "")] = pts
                        if resp.get("error"):
                            out["<error>"] = [resp["error"]]
                    return out

                yield fetch(f"{base}/timeSeries [{json.dumps(req, sort_keys=True)}]", plugin,
                            "points", norm, post={"requests": json.dumps([req])},
                            path=f"{base}/timeSeries")


#: What the three histogram routes read from the data provider (TensorBoard 2.21):
#: ``HistogramsPlugin.histograms_route`` -> ``read_tensors(downsample=SAMPLE_SIZE=51)``,
#: ``DistributionsPlugin.distributions_route`` -> the same with ``SAMPLE_SIZE=501``,
#: ``MetricsPlugin`` timeSeries (histograms) -> ``read_tensors(downsample=51)`` (its default
#: ``_plugin_downsampling["histograms"]``; the verifying app sets no sampling hints).
#: Each route then maps every datum through a pure function of (wall_time, step, tensor)
#: (``numpy.tolist``, ``compressor.compress_histogram``, ``_format_histogram_datum_bins``)
#: and JSON-encodes the list: identical datums give identical responses, and rendering 500
#: histograms as JSON on both sides is most of what the route crawl of a big run costs.
METRICS_HISTOGRAM_DOWNSAMPLE = 51


def _histogram_reads() -> dict:
    """``downsample -> [route, ...]`` the dashboards' histogram routes read with."""
    from tensorboard.plugins.distribution import distributions_plugin
    from tensorboard.plugins.histogram import histograms_plugin

    reads: dict = {}
    for n, route in (
        (histograms_plugin.HistogramsPlugin.SAMPLE_SIZE, "/data/plugin/histograms/histograms"),
        (distributions_plugin.DistributionsPlugin.SAMPLE_SIZE,
         "/data/plugin/distributions/distributions"),
        (METRICS_HISTOGRAM_DOWNSAMPLE, "/data/plugin/timeseries/timeSeries"),
    ):
        reads.setdefault(n, []).append(route)
    return reads


def _heavy_histograms(sides, listing):
    """Histogram series compared where the three histogram routes read them: the provider's
    ``read_tensors`` with each route's downsample, datum by datum (step, wall time bits,
    dtype, shape, tensor bytes). The tag listings still go through the HTTP routes."""
    from tensorboard import errors as tb_errors
    from tensorboard.data import provider as tb_provider

    from tb_footprint_plugin.formats import views

    tag_pairs = []
    for plugin in ("histograms", "distributions"):
        tags = listing(f"/data/plugin/{plugin}/tags", "histograms")
        yield tags
        tag_pairs.append(tags)
    series: set = set()
    for tags in tag_pairs:
        series |= set(_union(tags[0].value, tags[1].value, 2))
    ctx = views.request_context()

    def read(side, run, tag, n):
        try:
            data = side.provider.read_tensors(
                ctx, experiment_id=views.EXPERIMENT_ID, plugin_name="histograms",
                downsample=n, run_tag_filter=tb_provider.RunTagFilter(runs=[run], tags=[tag]))
        except tb_errors.PublicError as e:
            return 400, f"{type(e).__name__}: {e}"
        except Exception as e:  # noqa: BLE001 - the route would answer 500: compare that
            return 500, f"{type(e).__name__}: {e}"
        datums = (data.get(run) or {}).get(tag)
        if datums is None:
            return 404, f"No histogram tag {tag!r} for run {run!r}"  # as histograms_impl
        out = []
        for d in datums:
            arr = d.numpy
            h = hashlib.sha256(f"{arr.dtype.str}{arr.shape}".encode())
            h.update(arr.tobytes())
            out.append({"step": d.step, "wall_time": d.wall_time,
                        "<tensor sha256>": h.hexdigest()})
        return 200, out

    for n, route_names in sorted(_histogram_reads().items()):
        for run, tag in sorted(series, key=repr):
            route = (f"{' + '.join(route_names)}?{_q(run=run, tag=tag)} "
                     f"[data provider read_tensors, downsample {n}]")
            pair = []
            for side in sides:
                status, value = read(side, run, tag, n)
                body = json.dumps(value, sort_keys=True).encode()
                if status == 200:
                    value = {f"{run}/{tag}": value}
                else:
                    value = {"<http status>": status, "<body>": value[:200]}
                pair.append(Response(route, "histograms", "points", status, value,
                                     hashlib.sha256(body).hexdigest()))
            yield tuple(pair)


def _ts_listing(value: Any, plugin: str) -> Any:
    """Per-plugin view of ``/timeseries/tags``: ``{(run, tag[, samples]): description}``."""
    if not isinstance(value, dict) or "<http status>" in value:
        return value
    section = value.get(plugin) or {}
    desc = section.get("tagDescriptions") or {}
    out = {}
    if plugin == "images":
        for tag, runs in (section.get("tagRunSampledInfo") or {}).items():
            for run, info in runs.items():
                out[(run, tag, int(info.get("maxSamplesPerStep", 1)))] = desc.get(tag, "")
    else:
        for run, tags in (section.get("runTagInfo") or {}).items():
            for tag in tags:
                out[(run, tag)] = desc.get(tag, "")
    return out


def _graphs(listing, fetch):
    base = "/data/plugin/graphs"
    info = listing(f"{base}/info", "graphs", _graph_listing)
    yield info
    keys: set = set()
    for r in info:
        if isinstance(r.value, dict):
            keys |= set(r.value)
    limits = {"limit_attr_size": GRAPH_LIMIT_ATTR_SIZE, "large_attrs_key": GRAPH_LARGE_ATTRS_KEY}
    for key in sorted(keys, key=repr):
        run, tag, what = key
        exact = lambda s, st, v: v  # noqa: E731
        if what == "run_graph":
            for extra in ({}, limits):
                yield fetch(f"{base}/graph?{_q(run=run, conceptual='false', **extra)}",
                            "graphs", "exact", exact)
        elif what == "op_graph":
            for extra in ({}, limits):
                yield fetch(f"{base}/graph?{_q(run=run, tag=tag, conceptual='false', **extra)}",
                            _GRAPH_KIND_PLUGIN["op_graph"], "exact", exact)
        elif what == "conceptual_graph":
            yield fetch(f"{base}/graph?{_q(run=run, tag=tag, conceptual='true')}",
                        "graph_keras_model", "exact", exact)
        elif what == "profile":
            yield fetch(f"{base}/run_metadata?{_q(run=run, tag=tag)}",
                        _GRAPH_KIND_PLUGIN["profile"], "exact", exact)


def _graph_listing(value: Any) -> Any:
    """``/graphs/info`` as ``{(run, tag, what): True}`` for every graph the dashboard offers."""
    out = {}
    for run, item in (value or {}).items():
        if item.get("run_graph"):
            out[(run, None, "run_graph")] = True
        for tag, t in (item.get("tags") or {}).items():
            for what in ("op_graph", "conceptual_graph", "profile"):
                if t.get(what):
                    out[(run, tag, what)] = True
    return out


# --- comparison ----------------------------------------------------------------------------------


def shorten(x: Any, limit: int = 120) -> str:
    """A value as short text for a check line: JSON (keys sorted) or the string itself, cut to ``limit``."""
    s = json.dumps(x, sort_keys=True, default=str) if not isinstance(x, str) else x
    return s if len(s) <= limit else s[: limit - 1] + "…"


_FIRST_KEYS = ("step", "wall_time", "wallTime")


def first_difference(a: Any, b: Any, path: str = "") -> Optional[str]:
    """Where two JSON-like values first differ (``None`` if equal). Floats compare bit-exact
    through their JSON text, as the browser receives them."""
    if type(a) is not type(b):
        return f"{path or 'value'}: {shorten(a)} became {shorten(b)}"
    if isinstance(a, dict):
        # A point's step and wall time first: "step 5 became step 165" says more than bytes.
        for k in sorted(set(a) | set(b), key=lambda k: (k not in _FIRST_KEYS, repr(k))):
            if k not in b:
                return f"{path}{shorten(k)}: missing after reduction"
            if k not in a:
                return f"{path}{shorten(k)}: new after reduction"
            d = first_difference(a[k], b[k], f"{path}{shorten(k, 60)}.")
            if d:
                return d
        return None
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}].")
            if d:
                return d
        if len(a) != len(b):
            return f"{path.rstrip('.') or 'list'}: {len(a)} items became {len(b)}"
        return None
    if json.dumps(a) != json.dumps(b):
        return f"{path.rstrip('.') or 'value'}: {shorten(a)} became {shorten(b)}"
    return None


def _canon(p: Any) -> str:
    return json.dumps(p, sort_keys=True)


def _step(p: Any) -> Any:
    if isinstance(p, dict):
        return p.get("step")
    if isinstance(p, list) and len(p) >= 2:
        return p[1]  # [wall_time, step, value]
    return None


def compare_points(before: list, after: list, *, exact: bool, keep_first: bool,
                   keep_last: bool, sampled: bool) -> Optional[str]:
    """Compare one series under a contract; ``sampled``: both are reservoir samples, so only
    the last point (which every reservoir keeps) can be required, not set relations."""
    if exact:
        return first_difference(before, after)
    if sampled:
        # Both sides are samples keeping the last point: the last points must agree.
        if keep_last and before and (not after or _canon(before[-1]) != _canon(after[-1])):
            return f"last point (step {_step(before[-1])}) was not kept"
        return None
    keys = [_canon(p) for p in before]
    if not sampled:
        it = iter(keys)
        for q in after:
            k = _canon(q)
            if not any(k == x for x in it):
                return f"step {_step(q)}: {shorten(q, 80)} is not an original point, in order"
    have = {_canon(p) for p in after}
    needs = []
    if keep_first and not sampled and before:
        needs.append(("first", before[0]))
    if keep_last and before:
        needs.append(("last", before[-1]))
    for label, p in needs:
        if _canon(p) not in have:
            return f"{label} point (step {_step(p)}) was not kept"
    return None


#: plugin -> (exact, keep_first, keep_last, removable). A name may be "a|b": a route served
#: from either data plugin (the Graphs dashboard reads run metadata from two).
Contract = Callable[[str], tuple]


def compare_crawl(app_before, app_after, contract: Contract, *, sampled: bool,
                  graph_attrs_dropped: bool = False,
                  providers: Optional[tuple] = None, stop: Stop = NEVER) -> CrawlResult:
    """Crawl both apps in lockstep and compare every route under ``contract``.

    ``graph_attrs_dropped``: the contract dropped stored graph attribute values over 1 KB
    (opt-in ``strip_large_graph_attrs``); the graph requested with ``limit_attr_size`` must
    still be identical, the one without it is declared changed (the values read "too large").
    ``providers``: compare the histogram routes' series at the data provider (see
    ``crawl_pair``). ``stop``: ``Stopped`` at the next response (``verify.stop``)."""
    res = CrawlResult()
    sides: list = []
    for before, after in crawl_pair(app_before, app_after, sides, providers, res.skipped, stop):
        stop.check()
        res.routes += 1
        res.by_plugin[before.plugin] = res.by_plugin.get(before.plugin, 0) + 1
        if (graph_attrs_dropped and before.plugin == "graphs" and before.route.startswith("/data/plugin/graphs/graph?")
                and "limit_attr_size" not in before.route):
            continue
        why = _compare_response(before, after, contract, sampled)
        if why:
            res.diffs.append(RouteDiff(before.route, before.plugin, why))
    res.blobs = sum(s.c.blobs for s in sides)
    return res


def _compare_response(before: Response, after: Response, contract: Contract,
                      sampled: bool) -> Optional[str]:
    exact, keep_first, keep_last, removable = contract(before.plugin)
    if (before.body_sha256 and before.body_sha256 == after.body_sha256
            and before.shape != "points" or exact and before.shape == "points"
            and _same_points(before, after)):
        return None  # byte-identical as served (and any blobs they point at identical)
    if before.status != after.status:
        if removable and after.status == 404:
            return None
        return f"HTTP {before.status} became {after.status}"
    if before.status != 200:
        return None  # the same error both sides (its text may name each side's temp logdir)
    if before.shape == "listing":
        return _compare_listing(before, after, contract)
    if before.shape == "exact":
        if removable and not after.value:
            return None
        return first_difference(before.value, after.value)
    b, a = before.value, after.value
    for series in sorted(set(b) | set(a)):
        if series not in b:
            return f"series {series!r} is new after reduction"
        if series not in a:
            if removable:
                continue
            return f"series {series!r} is missing after reduction"
        why = compare_points(b[series], a[series], exact=exact, keep_first=keep_first,
                             keep_last=keep_last and not removable, sampled=sampled)
        if why:
            return f"{series}: {why}"
    return None


#: ``/graphs/info`` entry kind -> the data plugin that holds it.
_GRAPH_KIND_PLUGIN = {
    "run_graph": "graphs",
    "op_graph": "graph_run_metadata_graph|graph_run_metadata",
    "conceptual_graph": "graph_keras_model",
    "profile": "graph_run_metadata|graph_tagged_run_metadata",
}


def _listing_plugin(before: Response, key: Any) -> Optional[str]:
    """The data plugin whose contract governs one listing entry (None: never removable)."""
    if before.route == "/data/runs":
        return None
    if before.route == "/data/plugins_listing":
        return ROUTE_PLUGIN.get(str(key), str(key))
    if isinstance(key, tuple) and len(key) == 3 and key[2] in _GRAPH_KIND_PLUGIN:
        return _GRAPH_KIND_PLUGIN[key[2]]
    return before.plugin


def _same_points(before: Response, after: Response) -> bool:
    """Served bodies identical and, where blobs were resolved, the blobs' bytes too."""
    if not before.body_sha256 or before.body_sha256 != after.body_sha256:
        return False
    return before.value == after.value if _has_blobs(before.value) else True


def _has_blobs(value: Any) -> bool:
    if isinstance(value, dict):
        return any(k in ("<bytes sha256>", "<data sha256>") or _has_blobs(v)
                   for k, v in value.items())
    if isinstance(value, list):
        return bool(value) and _has_blobs(value[0])
    return False


def _compare_listing(before: Response, after: Response, contract: Contract) -> Optional[str]:
    b, a = before.value or {}, after.value or {}
    for key in sorted(set(b) | set(a), key=repr):
        name = key if not isinstance(key, tuple) else "/".join(str(k) for k in key if k is not None)
        plugin = _listing_plugin(before, key)
        removable = plugin is not None and contract(plugin)[3]
        if key not in a:
            if removable:
                continue
            return f"{name} is missing from the listing after reduction"
        if key not in b:
            return f"{name} is new in the listing after reduction"
        if before.route == "/data/plugins_listing":
            if b[key] and not a[key] and not removable:
                return f"dashboard {name} is no longer enabled after reduction"
            if a[key] and not b[key]:
                return f"dashboard {name} is enabled after reduction but was not before"
            continue
        d = first_difference(b[key], a[key], f"{name}: ")
        if d:
            return d
    return None
