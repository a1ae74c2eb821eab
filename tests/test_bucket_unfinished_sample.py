"""The two verbs a bucket logdir lacked (issue #26, task K2): ``api.unfinished`` (the CLI's
warnings and ``recover``'s "still" lines) and ``api.sample`` (the tab's before/after of one sample
of a reduced run) answer on a bucket what they answer on a local copy of the same logdir, in the
same shape. Before, both raised ``not_supported`` on a bucket.

``sample`` runs on each store (the backups are server-side copies of that store, read by ranged
reads), and on S3 with a local vault of blobs; ``unfinished`` on S3 alone (journal and lock
objects read through ``BucketState``: nothing per store).
"""
import json
import os
import shutil

import pytest

from helpers_crash import Killed, kill
from helpers_runs import write_image_run
from tb_footprint_plugin import api, cli, synth
from tb_footprint_plugin.codes import Finding, Outcome
from tb_footprint_plugin.engine import faults
from tb_footprint_plugin.engine.bucket_objects import BucketState
from tb_footprint_plugin.engine.context import TransactionError
from tb_footprint_plugin.storage.paths import is_op_id

RUN = "r"


def _logdir(root) -> str:
    """One run whose event file archive rewrites: scalars, histograms and 30 images (some of
    which the reduced run no longer holds), dated long ago."""
    logdir = os.path.join(str(root), "logs")
    write_image_run(os.path.join(logdir, RUN))
    return logdir


def _answer(logdir, *a, backup_dir=None):
    """``api.sample``'s answer: the bytes and type, or the refusal's code."""
    try:
        return api.sample(logdir, *a, backup_dir=backup_dir)
    except api.SampleUnavailable as e:
        return ("unavailable", e.code)


@pytest.mark.parametrize("scheme", ["s3", "gs", "az", "s3blobs"])
def test_a_bucket_s_samples_before_and_after_are_the_local_copy_s(objstore_pool, tmp_path, monkeypatch, scheme):
    from objstore_servers import Bucket

    bucket = Bucket(objstore_pool.get(scheme[:2]))
    local = _logdir(tmp_path / "local")
    url = bucket.upload(local, "logs")
    vault = str(tmp_path / "blobs") if scheme == "s3blobs" else None
    rep = api.reduce_logdir(local, None, policy="archive", dry_run=False, runs=[RUN])
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED]
    rep = api.reduce_logdir(url, vault, policy="archive", dry_run=False, quiet_period=0, runs=[RUN])
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], [(o.status, o.reason) for o in rep.outcomes]
    lop, bop = api.operations(local)[0]["op_id"], api.operations(url, backup_dir=vault)[0]["op_id"]
    img = api.operations(local)[0]["verification"]["tag_summaries"]["images"]["tags"]["img"]
    kept = img["shown"][1][-1]
    dropped = (sorted(set(range(30)) - set(img["shown"][1])) or [None])[0]
    assert dropped is not None  # archive thins the images: the vault alone holds this step
    asks = [(side, "images", "img", step, 0) for side in ("before", "after") for step in (kept, dropped)]
    asks += [("before", "images", "img", kept, 5), ("before", "images", "nope", kept, 0)]
    seen = {a: _answer(local, lop, *a) for a in asks}
    assert seen[("before", "images", "img", dropped, 0)] == (synth.make_png(8, 8, seed=dropped), "image/png")
    assert seen[("after", "images", "img", dropped, 0)] == ("unavailable", "not_found")
    assert {a: _answer(url, bop, *a, backup_dir=vault) for a in asks} == seen  # before: not_supported
    # the page's next sample reads what the last ones downloaded: no event object read again
    reads = []
    real = BucketState.open_read
    monkeypatch.setattr(BucketState, "open_read", lambda self, path, size: reads.append(path) or real(self, path, size))
    assert [_answer(url, bop, *a, backup_dir=vault) for a in asks] == [seen[a] for a in asks] and reads == []
    monkeypatch.undo()
    with pytest.raises(TransactionError):
        api.sample(url, "20200101-000000-0000-nope", "before", "images", "img", kept, 0, backup_dir=vault)

    # restored: the reduced run exists no more; the originals are back in the run
    for ld, op, bd in ((local, lop, None), (url, bop, vault)):
        assert [o.status for o in api.restore(ld, op=op, backup_dir=bd)] == [Outcome.RESTORED]
    restored = [("after", "images", "img", kept, 0), ("before", "images", "img", dropped, 0)]
    seen = {a: _answer(local, lop, *a) for a in restored}
    assert seen[restored[0]] == ("unavailable", "restored")
    assert {a: _answer(url, bop, *a, backup_dir=vault) for a in restored} == seen


def test_a_bucket_s_unfinished_operations_are_said_as_on_a_disk(s3_bucket, tmp_path, monkeypatch):
    local = _logdir(tmp_path / "local")
    url = s3_bucket.upload(local, "logs")
    clean = {"unfinished_operations": [], "problems": [], "settle_command": None}
    assert api.unfinished(local) == clean and api.unfinished(url) == clean  # before: not_supported

    # a reduce killed once its backups are made: one unfinished operation of the run, said alike
    for ld, quiet in ((local, None), (url, 0)):
        faults.arm("reduce.backup", kill)
        try:
            with pytest.raises(Killed):
                api.reduce_logdir(ld, policy="archive", dry_run=False, runs=[RUN],
                                  **({} if quiet is None else {"quiet_period": quiet}))
        finally:
            faults.disarm_all()
    mine, theirs = api.unfinished(local), api.unfinished(url)
    assert mine["problems"] == theirs["problems"] == []
    assert [(o["run"], o["kind"]) for o in theirs["unfinished_operations"]] == \
        [(o["run"], o["kind"]) for o in mine["unfinished_operations"]] == [(RUN, "reduce")]
    assert [set(o) for o in theirs["unfinished_operations"]] == [set(o) for o in mine["unfinished_operations"]]
    assert all(is_op_id(o["op_id"]) for o in theirs["unfinished_operations"])
    assert mine["settle_command"] == f"tb-footprint recover {local}"
    assert theirs["settle_command"] == f"tb-footprint recover {url}"

    # the command it names settles it (before: `recover` failed at its last step, not_supported)
    assert cli.main(["recover", url]) == cli.EXIT_OK
    assert api.unfinished(url) == clean

    # a journal object that is no journal: a problem named by its URL as status names it, never an
    # operation, and no settle command (recover leaves it in place)
    key = f"{s3_bucket.key('logs')}/.tb-footprint/journal/20200101-000000-0000-aaaa.json"
    s3_bucket.fs.pipe_file(key, json.dumps({"no": "journal"}).encode())
    found = api.unfinished(url)
    assert found["unfinished_operations"] == [] and found["settle_command"] is None
    assert [(p["code"], p["file"]) for p in found["problems"]] == \
        [(Finding.DAMAGED_FILE, f"{url}/.tb-footprint/journal/20200101-000000-0000-aaaa.json")]
    assert found["problems"][0] in api.status(url)["problems"]
    shutil.rmtree(local)
