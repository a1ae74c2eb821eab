"""The verification's fixed cost is cut without weakening what it compares (issue #28 item 3).

* the route crawl leaves out the routes of a dashboard TensorBoard's own plugins listing shows
  disabled on both sides (``routes.INACTIVE_SKIPPABLE``), and says so on its line; a dashboard
  with data is still crawled;
* a dashboard enabled on one side only is still a difference (the listing is compared), so a
  reduction that drops or adds such data is still caught and rolled back;
* the time-series and images groups, now concurrent, still fetch each blob once per side.
"""
import random
import shutil
from pathlib import Path

import pytest

from tb_footprint_plugin import synth
from tb_footprint_plugin.verify import Expectations, data_server_binary, dashboard, routes

needs_rust = pytest.mark.skipif(data_server_binary() is None, reason="no data server binary")


def _run(run: Path, text: bool = False, steps: int = 60) -> Path:
    """Scalars, a histogram tag, an image every 10 steps; text summaries when asked."""
    rng = random.Random(0)
    png = synth.make_png(8, 8, seed=1)
    run.mkdir(parents=True)
    with synth.EventWriter(str(run)) as w:
        for step in range(steps):
            w.scalar("loss", step, 1.0 / (step + 1))
            w.histogram("layer/weight", step, [rng.gauss(0, 1) for _ in range(50)])
            if step % 10 == 0:
                w.image("sample", step, png, 8, 8)
                if text:
                    w.text("notes", step, f"step {step}")
        path = w.path
    return Path(path)


def _route_check(orig: Path, red: Path, requests: list):
    """``dashboard.route_check`` (Rust, default view) of two runs, every request path noted."""
    real_get = routes._Client.get

    def noting_get(self, path, data=None):
        requests.append(path)
        return real_get(self, path, data)

    readers = dashboard.open_pair(str(orig), str(red), "rust", None, store_all=False, timeout_s=120)
    routes._Client.get = noting_get
    try:
        return dashboard.route_check("rust", readers["before"], readers["after"], Expectations(),
                                     ", default view", heavy_via_provider=True)
    finally:
        routes._Client.get = real_get
        for r in readers.values():
            r.close()


@needs_rust
def test_disabled_dashboards_are_not_crawled_enabled_ones_are(tmp_path):
    orig = _run(tmp_path / "orig").parent
    same = tmp_path / "same"
    shutil.copytree(orig, same)
    asked: list = []
    check = _route_check(orig, same, asked)
    assert check.ok, check.detail
    assert ("not crawled, disabled on both sides in TensorBoard's plugins listing: audio, "
            "custom_scalars, hparams, mesh, pr_curves, text") in check.detail, check.detail
    for plugin in routes.INACTIVE_SKIPPABLE:
        assert not [p for p in asked if p.startswith(f"/data/plugin/{plugin}/")], plugin
    # what the run holds is still crawled, and the listing that decided it is compared
    for route in ("/data/plugins_listing", "/data/plugin/scalars/scalars",
                  "/data/plugin/images/individualImage", "/data/plugin/timeseries/tags",
                  "/data/plugin/graphs/info"):
        assert any(p.startswith(route) for p in asked), route

    with_text = _run(tmp_path / "text", text=True).parent
    copy = tmp_path / "text-copy"
    shutil.copytree(with_text, copy)
    asked = []
    check = _route_check(with_text, copy, asked)
    assert check.ok, check.detail
    assert any(p.startswith("/data/plugin/text/text?") for p in asked), asked
    assert "text" not in check.detail.split("plugins listing:")[-1].split(", ")


@needs_rust
@pytest.mark.parametrize("direction", ["dropped", "added"])
def test_a_dashboard_enabled_on_one_side_only_fails_the_check(tmp_path, direction):
    """Text summaries dropped by a (planted) wrong reduction, or added: the plugins listing
    differs, so the skip never hides it; the check names the dashboard."""
    with_text = _run(tmp_path / "with", text=True).parent
    without = _run(tmp_path / "without", text=False).parent
    orig, red = (with_text, without) if direction == "dropped" else (without, with_text)
    check = _route_check(orig, red, [])
    assert not check.ok
    assert "/data/plugins_listing" in check.detail and "dashboard text" in check.detail, check.detail
    assert ("no longer enabled" if direction == "dropped" else "enabled after reduction") in check.detail


@needs_rust
def test_each_image_blob_is_fetched_once_a_side_by_the_concurrent_groups(tmp_path):
    orig = _run(tmp_path / "orig").parent
    same = tmp_path / "same"
    shutil.copytree(orig, same)
    asked: list = []
    check = _route_check(orig, same, asked)
    assert check.ok, check.detail
    blobs = [p for p in asked if p.startswith(("/data/plugin/images/individualImage",
                                               "/data/plugin/timeseries/imageData"))]
    # 6 images a side (steps 0, 10, ..., 50), each fetched once although both groups point at it
    assert len(blobs) == 12, blobs
    assert "and 12 blobs" in check.detail, check.detail


# --- the Python loader of a reduce: in this process for a small input, else a child ----------


def _logdir_with_a_big_run(tmp_path: Path) -> Path:
    from test_verify_handover import _age, _histogram_run

    logdir = tmp_path / "logdir"
    _histogram_run(logdir / "run", steps=300)
    _age(logdir)
    return logdir


@pytest.fixture
def sides(monkeypatch):
    """Every ``PythonSide`` told its run, with where it chose to read it; the big-run path."""
    from tb_footprint_plugin.verify import pyside

    told = []
    real_go = pyside.PythonSide.go

    def noting_go(self, *a, **kw):
        out = real_go(self, *a, **kw)
        told.append(self)
        return out

    monkeypatch.setattr(pyside.PythonSide, "go", noting_go)
    monkeypatch.setattr(dashboard, "FULL_READ_BYTES", 0)
    yield told
    from tb_footprint_plugin.verify import original

    original.release_parked()


@needs_rust
def test_a_reduce_reads_a_small_reduced_run_with_the_python_loader_in_process(tmp_path, sides):
    from tb_footprint_plugin import api
    from test_verify_handover import BOTH

    logdir = _logdir_with_a_big_run(tmp_path)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=BOTH)
    out = [o for o in rep.outcomes if o.status != "skipped"]
    assert [o.status for o in out] == ["verified"], [o.to_dict() for o in out]
    assert [s.where for s in sides] == ["in-process"]
    assert sides[0]._proc is None  # no interpreter started for it
    python = [c for c in out[0].verification["checks"] if c["name"] == "python"]
    assert python and python[0]["ok"] and "tags listed as before" in python[0]["detail"], python


@needs_rust
def test_a_bigger_loader_input_still_goes_to_a_child(tmp_path, sides, monkeypatch):
    from tb_footprint_plugin import api
    from tb_footprint_plugin.verify import pyside
    from test_verify_handover import BOTH

    monkeypatch.setattr(pyside, "IN_PROCESS_BYTES", 0)
    logdir = _logdir_with_a_big_run(tmp_path)
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=BOTH)
    out = [o for o in rep.outcomes if o.status != "skipped"]
    assert [o.status for o in out] == ["verified"], [o.to_dict() for o in out]
    assert [s.where for s in sides] == ["child"] and sides[0]._proc is not None
    assert sides[0]._proc.poll() is not None  # it answered and is gone


@needs_rust
@pytest.mark.parametrize("planted", ["tag missing", "loader fails"])
def test_what_the_in_process_loader_sees_wrong_rolls_the_run_back(tmp_path, sides, monkeypatch,
                                                                   planted):
    """The in-process Python loader's view decides as the child's did: a tag it does not list
    (a reduction the Python reader shows wrong) or a loader that breaks fails the verification,
    and the run is rolled back to its exact bytes."""
    from conftest import tree_hashes
    from tb_footprint_plugin import api
    from tb_footprint_plugin.verify import pyside
    from test_verify_handover import BOTH

    real = pyside.read_listing

    def wrong(run_dir, timeout_s):
        if planted == "loader fails":
            raise RuntimeError("planted loader failure")
        listing = real(run_dir, timeout_s)
        listing.plugins["histograms"].pop("layer2/weight")
        return listing

    monkeypatch.setattr(pyside, "read_listing", wrong)
    logdir = _logdir_with_a_big_run(tmp_path)
    before = {k: v for k, v in tree_hashes(logdir).items() if not k.startswith(".tb-footprint")}
    rep = api.reduce_logdir(str(logdir), policy="archive", dry_run=False, verify_backends=BOTH)
    out = [o for o in rep.outcomes if o.status != "skipped"]
    assert [o.status for o in out] == ["rolled_back"], [o.to_dict() for o in out]
    assert [s.where for s in sides] == ["in-process"]
    why = "missing from the Python listing" if planted == "tag missing" else "planted loader failure"
    assert why in out[0].reason, out[0].reason
    after = {k: v for k, v in tree_hashes(logdir).items() if not k.startswith(".tb-footprint")}
    assert after == before


# --- a data server's load: the end of its load cycle is the signal -------------------------------


class _FakeServer:
    def __init__(self):
        import threading

        self.proc = None
        self.loaded = threading.Event()


class _CountingProvider:
    """A data provider whose listings are counted (one run, no plugins)."""

    def __init__(self):
        self.calls = 0

    def list_runs(self, ctx, *, experiment_id):
        from tb_footprint_plugin.formats import views

        self.calls += 1
        return [type("Run", (), {"run_name": views.RUN_NAME})()]

    def list_plugins(self, ctx, *, experiment_id):
        self.calls += 1
        return []


def test_a_finished_load_cycle_is_waited_for_without_listings():
    """With --reload=once the server commits every run before it logs the end of its load cycle
    and loads no more: once that line is seen nothing is asked of the server; before it, the
    wait ends as soon as the line comes (not after a stable-listing delay)."""
    import threading
    import time

    from tb_footprint_plugin.formats import views

    server, provider = _FakeServer(), _CountingProvider()
    server.loaded.set()
    views.wait_until_loaded(server, provider, 10)
    assert provider.calls == 0

    server = _FakeServer()
    threading.Timer(0.2, server.loaded.set).start()
    t = time.monotonic()
    views.wait_until_loaded(server, provider, 10)
    assert server.loaded.is_set() and time.monotonic() - t < views.UNSIGNALLED_STABLE_S / 2


def test_the_data_server_binary_is_found_as_tensorboard_finds_it(tmp_path, monkeypatch):
    """``views.data_server_binary`` finds the binary without importing TensorBoard's server
    ingester (gRPC: imported while the server starts instead), as that ingester finds it."""
    from tensorboard.data import server_ingester

    from tb_footprint_plugin.formats import views

    monkeypatch.delenv(views.DATA_SERVER_BINARY_ENV, raising=False)
    try:
        theirs = server_ingester.get_server_binary().path
    except server_ingester.NoDataServerError:
        theirs = None
    assert views.data_server_binary() == theirs
    assert views.DATA_SERVER_BINARY_ENV == server_ingester._ENV_DATA_SERVER_BINARY

    fake = tmp_path / "server"
    fake.write_bytes(b"")
    monkeypatch.setenv(views.DATA_SERVER_BINARY_ENV, str(fake))
    assert views.data_server_binary() == server_ingester.get_server_binary().path == str(fake)
    monkeypatch.setenv(views.DATA_SERVER_BINARY_ENV, str(tmp_path / "missing"))
    with pytest.raises(server_ingester.NoDataServerError):
        server_ingester.get_server_binary()
    assert views.data_server_binary() is None


@needs_rust
def test_a_crawl_whose_core_group_fails_first_ends_the_groups_waiting_for_the_listing(tmp_path,
                                                                                   monkeypatch):
    """The groups that may leave a dashboard out wait for the plugins listing the core group
    asks for: a core group that fails before it must not leave them waiting (the crawl ends,
    its failure reaches the caller, no group thread is left)."""
    import threading

    real_json = routes._Side.json

    def failing_json(self, path):
        if path == "/data/runs":
            raise RuntimeError("planted failure")
        return real_json(self, path)

    orig = _run(tmp_path / "orig").parent
    monkeypatch.setattr(routes._Side, "json", failing_json)
    readers = dashboard.open_pair(str(orig), str(orig), "rust", None, store_all=False, timeout_s=120)
    try:
        crawl = routes.crawl_pair(readers["before"].app(), readers["after"].app(),
                                  providers=(readers["before"].provider, readers["after"].provider))
        done = []

        def drain():
            try:
                for _ in crawl:
                    pass
            except RuntimeError as e:
                done.append(str(e))

        t = threading.Thread(target=drain, daemon=True)
        t.start()
        t.join(30)
        assert not t.is_alive(), "the crawl did not end"
        assert done == ["planted failure"], done
    finally:
        for r in readers.values():
            r.close()
    alive = [th.name for th in threading.enumerate() if th.name.startswith("footprint-crawl")]
    assert not alive, alive
