"""A run whose folder name is not valid UTF-8 (``os.listdir`` gives it surrogate-escaped) no longer
takes the tab's overview down for the whole logdir (review R23 T1): ``/runs`` and ``/summary``
answered 500 ``UnicodeEncodeError`` because the overview's cache key hashed the name as strict
UTF-8. Both now answer 200 and list that run beside the others.
"""
import os

from test_plugin_routes import App, _age, _write_run


def test_a_run_named_with_a_byte_not_utf8_is_listed_beside_the_others(tmp_path):
    logdir = tmp_path / "logs"
    _write_run(str(logdir / "plain"), seed=1)
    odd = os.path.join(os.fsencode(str(logdir)), b"bad\xffname")
    _write_run(os.fsdecode(odd), seed=2)
    _age(str(logdir))
    app = App(logdir)
    try:
        runs = app.get("/runs")
        assert runs.status_code == 200, runs.get_data(as_text=True)
        names = [r["name"] for r in runs.get_json()["runs"]]
        assert sorted(names) == sorted(["plain", os.fsdecode(b"bad\xffname")]), names
        summary = app.get("/summary")
        assert summary.status_code == 200, summary.get_data(as_text=True)
    finally:
        app.close()
