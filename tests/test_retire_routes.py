"""The Retire page's routes through TensorBoard's WSGI app: dry run, retire as a job, the retired
list, restore from the Operations list (``/restore`` with a retirement's op id) and from the page
(``/unretire``), and the write routes' security checks; the tree is hashed before and after."""
import pytest

from test_plugin_routes import App, PREFIX, file_shas, logdir, outside, tree_hash  # noqa: F401  (fixtures)


@pytest.fixture
def app(logdir):  # noqa: F811
    a = App(logdir)
    yield a
    a.close()


def test_dry_run_retire_list_and_restore_from_operations(app, logdir):  # noqa: F811
    before = tree_hash(logdir)
    shas = file_shas(logdir)
    r = app.get("/retire_plan", query_string={"run": ["small", "mid"]})
    assert r.status_code == 200, r.get_data(as_text=True)
    plan = r.get_json()
    assert plan["runs"] == 2 and plan["bytes"] > 0
    assert {i["run"] for i in plan["items"] if i["selected"]} == {"small", "mid"}
    assert "reload" in plan["reload_note"]
    assert tree_hash(logdir) == before  # a dry run changes nothing

    r = app.post("/retire", {"runs": ["small"]})
    assert r.status_code == 202, r.get_data(as_text=True)
    job = app.wait_job(r.get_json()["job"]["id"])
    assert job["state"] == "done" and job["kind"] == "retire", job
    [o] = job["result"]["outcomes"]
    assert o["status"] == "verified" and o["dashboards"]
    assert not (logdir / "small").exists()

    retired = app.get("/retired", query_string={"q": "SMA"}).get_json()
    small = next(i for i in plan["items"] if i["run"] == "small")
    assert [x["run"] for x in retired["retired"]] == ["small"] and retired["bytes"] == small["bytes"]
    assert app.get("/retired", query_string={"q": "zzz"}).get_json()["retired"] == []
    app.fresh_scan()
    names = [x["name"] for x in app.get("/runs").get_json()["runs"]]
    assert "small" not in names
    ops = app.get("/operations").get_json()["operations"]
    op = next(x for x in ops if x["kind"] == "retire")
    assert op["restorable"] and op["run"] == "small" and op["backup_bytes"] > 0

    r = app.post("/restore", {"op": op["op_id"]})  # the Operations page's restore link
    assert r.status_code == 202, r.get_data(as_text=True)
    job = app.wait_job(r.get_json()["job"]["id"])
    assert job["result"]["outcomes"][0]["status"] == "restored", job
    assert app.get("/retired").get_json()["retired"] == []
    # every user file is back byte for byte, with its mtime
    assert file_shas(logdir) == shas


def test_unretire_by_run_and_errors(app, logdir):  # noqa: F811
    shas = file_shas(logdir)
    job = app.wait_job(app.post("/retire", {"runs": ["mid"]}).get_json()["job"]["id"])
    assert job["result"]["outcomes"][0]["status"] == "verified"
    assert app.post("/unretire", {"run": "nope"}).status_code == 404
    assert app.post("/unretire", {}).status_code == 400
    r = app.post("/unretire", {"run": "mid"})
    assert r.status_code == 202
    job = app.wait_job(r.get_json()["job"]["id"])
    assert job["result"]["ok"], job
    assert file_shas(logdir) == shas
    op = job["result"]["outcomes"][0]
    assert op["status"] == "restored"


@pytest.mark.parametrize("body,code", [
    ({"runs": ["../outside"]}, 404),
    ({"runs": "/etc"}, 404),
    ({"runs": []}, 400),
    ({"runs": ["small"], "with_nested": "yes"}, 400),
    ({"runs": ["small"], "keep_best": 2}, 400),  # no metric
    ({"runs": ["small"], "older_than_s": -1}, 400),
])
def test_bad_requests_change_nothing(app, logdir, body, code):  # noqa: F811
    before = tree_hash(logdir)
    r = app.post("/retire", body)
    assert r.status_code == code, r.get_data(as_text=True)
    assert tree_hash(logdir) == before


def test_write_routes_need_post_token_and_same_origin(app, logdir):  # noqa: F811
    before = tree_hash(logdir)
    assert app.client.get(PREFIX + "/retire").status_code in (403, 405)
    no_token = {"Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"}
    assert app.post("/retire", {"runs": ["small"]}, headers=no_token).status_code == 403
    foreign = app.headers(Origin="http://evil.example")
    assert app.post("/retire", {"runs": ["small"]}, headers=foreign).status_code == 403
    assert app.post("/unretire", {"run": "small"}, headers=no_token).status_code == 403
    assert tree_hash(logdir) == before


def test_symlinked_run_is_left_alone(app, logdir, outside):  # noqa: F811
    before = tree_hash(logdir, outside)
    r = app.post("/retire", {"runs": ["linked"]})
    if r.status_code == 202:
        job = app.wait_job(r.get_json()["job"]["id"])
        assert [o["status"] for o in job["result"]["outcomes"]] == ["failed"], job
    else:
        assert r.status_code in (404, 409), r.get_data(as_text=True)
    assert tree_hash(logdir, outside) == before


def test_read_only_refuses_retire(logdir):  # noqa: F811
    a = App(logdir, footprint_read_only=True)
    try:
        before = tree_hash(logdir)
        r = a.post("/retire", {"runs": ["small"]})
        assert r.status_code == 403, r.get_data(as_text=True)
        assert a.get("/retire_plan", query_string={"run": "small"}).status_code == 200
        assert tree_hash(logdir) == before
    finally:
        a.close()


def test_retired_lists_a_bucket_logdirs_retirements(s3_bucket, logdir):  # noqa: F811
    # retire works on buckets (engine/bucket_retire.py): the Retire page lists those retirements too
    from tb_footprint_plugin import api

    for link in (logdir / "linked", logdir / "big" / "plugins" / "linked_profile"):
        link.unlink()  # a bucket has no symlinks
    url = s3_bucket.upload(logdir, "logs")
    a = App(url)
    try:
        assert a.get("/retired").get_json() == {"retired": [], "bytes": 0}
        rep = api.retire(url, api.retire_rule(runs=["small"]), dry_run=False, quiet_period=0)
        assert [(o.run, o.status) for o in rep.outcomes] == [("small", "verified")], [o.reason for o in rep.outcomes]
        d = a.get("/retired", query_string={"q": "SMA"}).get_json()
        assert [(x["run"], x["op_id"]) for x in d["retired"]] == [("small", rep.outcomes[0].op_id)]
        assert d["bytes"] == rep.outcomes[0].bytes_before > 0
        assert a.get("/retired", query_string={"q": "zzz"}).get_json()["retired"] == []
    finally:
        a.close()


def test_a_restore_by_run_name_that_brings_a_retired_run_back_offers_no_cancel_it_would_ignore(app, logdir):  # noqa: F811
    """A restore by run name puts a retired run back first (``unretire``), which is not stopped
    once started: the job says so as it starts it (step ``restore``, not cancellable), where it
    kept offering a cancel it then ignored (review R18 N1)."""
    import threading

    from tb_footprint_plugin.engine import faults

    shas = file_shas(logdir)
    job = app.wait_job(app.post("/reduce", {"runs": ["mid"]}).get_json()["job"]["id"])  # then retired
    assert job["result"]["outcomes"][0]["status"] == "verified"
    job = app.wait_job(app.post("/retire", {"runs": ["mid"]}).get_json()["job"]["id"])
    assert job["result"]["outcomes"][0]["status"] == "verified"
    reached, go = threading.Event(), threading.Event()

    def pause():
        reached.set()
        go.wait(30)

    faults.arm("unretire.journal", pause)
    try:
        r = app.post("/restore", {"run": "mid"})
        assert r.status_code == 202, r.get_data(as_text=True)
        jid = r.get_json()["job"]["id"]
        assert reached.wait(60)
        job = app.get("/job", query_string={"id": jid}).get_json()["job"]
        assert job["cancellable"] is False and job["per_run"]["mid"]["step"] == "restore", job
        assert app.post("/cancel", {"job": jid}).status_code == 409
    finally:
        go.set()
        faults.disarm_all()
    job = app.wait_job(jid)
    assert job["state"] == "done" and [o["status"] for o in job["result"]["outcomes"]] == ["restored"] * 2, job
    assert file_shas(logdir) == shas  # the retirement, then the reduction: every original back
