"""Each integration with its real framework, on CPU with a tiny model and profiling on
(tests/integration_jobs.py, one subprocess per job so the frameworks stay out of this process):
training ends, the job's own run is reduced and verified, the job exits 0; an injected failure
rolls the run back byte for byte and the job still exits 0."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

import tb_footprint_plugin as fp
from conftest import REPO

JOBS = REPO / "tests" / "integration_jobs.py"
#: framework -> (module that must be importable, policy that has something to do on its run)
FRAMEWORKS = {
    "keras": ("tensorflow", "archive"),  # Keras' profile_batch needs the TensorFlow backend
    "lightning": ("lightning", "lossless"),  # gzip of the PyTorch profiler's trace
    "hf": ("transformers", "lossless"),
    "loop": ("torch", "lossless"),  # reduce_when_done around a plain PyTorch loop
}


def _tensorflow_path():
    """Where scripts/test.sh installed TensorFlow beside the environment (None: in it)."""
    d = os.environ.get("TB_FOOTPRINT_TEST_TENSORFLOW") or str(REPO / ".venv-test" / "tensorflow")
    return d if os.path.isdir(os.path.join(d, "tensorflow")) else None


def _need(module):
    # scripts/test.sh installs every framework; a missing one is a broken environment, not a skip.
    if module == "tensorflow" and _tensorflow_path():
        return
    assert importlib.util.find_spec(module) is not None, \
        f"{module} is not installed: run scripts/test.sh (pip install -e '.[test]', TensorFlow beside it)"


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """framework -> (results per scenario, the job's log); each framework's job runs once."""
    cache = {}

    def get(framework):
        if framework not in cache:
            _need(FRAMEWORKS[framework][0])
            root = tmp_path_factory.mktemp(framework)
            result = root / "result.json"
            path = [str(REPO)]
            if framework == "keras" and _tensorflow_path():
                path.append(_tensorflow_path())  # TensorFlow and its Keras, for this job only
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), TF_CPP_MIN_LOG_LEVEL="2",
                       CUDA_VISIBLE_DEVICES="")
            scenarios = "real,fault,dry" + (",crash" if framework == "lightning" else "")
            p = subprocess.run([sys.executable, str(JOBS), framework, str(root / "logs"), str(result),
                                "--policy", FRAMEWORKS[framework][1], "--scenarios", scenarios],
                               env=env, capture_output=True, text=True, timeout=1200)
            assert p.returncode == 0, f"training job exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}"
            assert "training job done" in p.stdout
            cache[framework] = (json.loads(result.read_text()), p.stderr, root / "logs")
        return cache[framework]

    return get


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_training_ends_and_its_run_is_reduced_and_verified(jobs, framework):
    results, log, root = jobs(framework)
    res, logdir = results["real"], root / "real"
    out = res["outcome"]
    assert out["code"] == "reduced", (out, log[-4000:])
    assert out["runs"], out
    for o in out["report"]["outcomes"]:
        if o["run"] in out["runs"] and o["status"] != "skipped":
            assert o["status"] == "verified" and o["verified"], o
    assert out["saved_bytes"] > 0
    # same vault, history and verification as the CLI
    hist = fp.history(str(logdir))
    assert hist and {e["run"] for e in hist} <= set(out["runs"])
    checks = fp.verify(str(logdir))
    assert checks and all(c["ok"] for c in checks), checks
    assert "footprint: reduced for" in log
    if framework == "keras":
        # the profile session profile_batch wrote is gone (archive), train/validation scalars stay
        assert not any("plugins/profile" in p for p in res["after"])
        assert any(p.startswith("keras_job/validation/events.out") for p in res["after"])
    else:
        assert any(p.endswith(".pt.trace.json.gz") for p in res["after"]), sorted(res["after"])
        assert not any(p.endswith(".pt.trace.json") for p in res["after"])


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_failing_reduction_leaves_the_run_and_the_job_alone(jobs, framework):
    results, log, root = jobs(framework)  # the job exited 0 (checked by the fixture)
    res = results["fault"]
    out = res["outcome"]
    assert out["code"] == "failed", out
    statuses = {o["run"]: o["status"] for o in out["report"]["outcomes"]}
    assert "rolled_back" in statuses.values(), statuses
    assert res["before"] and res["after"] == res["before"]  # byte for byte, as when it started
    assert "footprint: failed for" in log and "injected failure at reduce.verify" in log


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_default_is_a_logged_dry_run(jobs, framework):
    results, log, root = jobs(framework)
    res = results["dry"]
    out = res["outcome"]
    assert out["code"] == "planned" and out["report"]["dry_run"], out
    assert out["report"]["plan"]["policy"]["name"] == "lossless"
    assert fp.history(str(root / "dry")) == []
    assert "dry run: nothing was changed" in log
    if framework != "keras":
        assert any(p.endswith(".pt.trace.json") for p in res["after"])


def test_training_that_raises_is_not_reduced(jobs):
    results, log, root = jobs("lightning")
    res = results["crash"]
    out = res["outcome"]
    assert out["code"] == "training_failed" and "training diverged" in out["reason"], out
    assert out["report"] is None and fp.history(str(root / "crash")) == []
    assert any("/events.out.tfevents." in p for p in res["after"])  # the run is there, as written
    assert not any(p.endswith(".gz") for p in res["after"])
