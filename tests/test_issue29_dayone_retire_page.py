"""Issue 29, day one item 4, the tab's part: a profile-only folder (a JAX profile) is a run on the
Retire page as in ``scan``, the overview and the CLI's ``retire`` — the page's dry run selects it by
name and by glob, and the page's retire moves it into the vault and restores it byte for byte.
(test_cli_dayone covers the CLI; this goes through TensorBoard's WSGI app, as the page does.)"""
import pytest

from conftest import copy_real
from test_plugin_routes import App, file_shas


@pytest.fixture
def app(tmp_path):
    root = tmp_path / "logs"
    copy_real("tf/keras_profiled", root / "keras")
    copy_real("jax/profiled", root / "jax_profile")
    a = App(root)
    yield a, root
    a.close()


def test_a_profile_only_folder_is_a_run_on_the_retire_page(app):
    a, root = app
    shas = file_shas(root)
    names = [r["name"] for r in a.get("/runs").get_json()["runs"]]
    assert "jax_profile" in names  # a run in the overview
    for query in ({"run": "jax_profile"}, {"glob": "jax*"}):
        r = a.get("/retire_plan", query_string=query)
        assert r.status_code == 200, r.get_data(as_text=True)
        plan = r.get_json()
        assert [i["run"] for i in plan["items"] if i["selected"]] == ["jax_profile"], (query, plan["items"])
        assert plan["bytes"] > 0
    r = a.post("/retire", {"runs": ["jax_profile"]})
    assert r.status_code == 202, r.get_data(as_text=True)
    job = a.wait_job(r.get_json()["job"]["id"])
    assert job["state"] == "done" and [o["status"] for o in job["result"]["outcomes"]] == ["verified"], job
    assert not (root / "jax_profile").exists()
    assert [x["run"] for x in a.get("/retired").get_json()["retired"]] == ["jax_profile"]
    r = a.post("/unretire", {"run": "jax_profile"})
    assert r.status_code == 202, r.get_data(as_text=True)
    job = a.wait_job(r.get_json()["job"]["id"])
    assert job["result"]["outcomes"][0]["status"] == "restored", job
    assert file_shas(root) == shas
