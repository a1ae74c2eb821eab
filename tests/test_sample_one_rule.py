"""The check page's sample is one rule for every store (issue #26 item 2: ``engine.sample``):
which event files make the "before" and "after" side, and when a side is refused (``restored``,
``purged``, ``not_found``), is written once; a disk (``engine.local_sample``) and a bucket
(``engine.bucket_sample``) say only where the bytes come from. The rest of the behaviour is held
by test_bucket_unfinished_sample (a bucket's answers equal a disk's, and what a page downloads
is read once), test_tab_summary and test_vault_compressed."""
import inspect
import os

import pytest

from helpers_runs import write_image_run
from tb_footprint_plugin import api, synth
from tb_footprint_plugin.codes import Outcome
from tb_footprint_plugin.engine import bucket_sample, local_sample


def test_the_rule_of_the_sides_is_written_once():
    from tb_footprint_plugin.engine import sample

    for mod in (local_sample, bucket_sample):
        src = inspect.getsource(mod)
        for word in ("restored_by", "backup_purged", '"purged"', '"restored"', '"tfevents"', "created"):
            assert word not in src, (mod.__name__, word)
    assert issubclass(local_sample.LocalSource, sample.Source)
    assert issubclass(bucket_sample.BucketSource, sample.Source)
    assert local_sample.SampleUnavailable is bucket_sample.SampleUnavailable is sample.SampleUnavailable


def _root_run(logdir) -> str:
    """A logdir whose run is the logdir itself (run ``.``): 30 images, of which archive keeps some."""
    write_image_run(logdir)
    return str(logdir)


@pytest.mark.parametrize("where", ["disk", "s3"])
def test_a_root_run_s_before_side_reads_its_backed_up_originals(tmp_path, where, request):
    """The run ``.`` (event files in the logdir itself): "before" shows an image only its
    backed-up original holds, on a disk as on a bucket (a disk's own rule compared the manifest's
    folder "" with the run's "." and left every backup out: not_found)."""
    local = _root_run(tmp_path / "logs")
    url = request.getfixturevalue("s3_bucket").upload(local, "logs") if where == "s3" else None
    rep = api.reduce_logdir(local, policy="archive", dry_run=False)  # the disk says which steps it dropped
    assert [(o.run, o.status) for o in rep.outcomes] == [(".", Outcome.VERIFIED)]
    img = api.operations(local)[0]["verification"]["tag_summaries"]["images"]["tags"]["img"]
    dropped = sorted(set(range(30)) - set(img["shown"][1]))[0]
    logdir = local
    if url:
        logdir = url
        rep = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0)
        assert [(o.run, o.status) for o in rep.outcomes] == [(".", Outcome.VERIFIED)]
    op = api.operations(logdir)[0]["op_id"]
    assert api.sample(logdir, op, "before", "images", "img", dropped, 0) == (synth.make_png(8, 8, seed=dropped),
                                                                            "image/png")
    with pytest.raises(api.SampleUnavailable) as e:
        api.sample(logdir, op, "after", "images", "img", dropped, 0)
    assert e.value.code == "not_found"


def test_the_rule_of_the_sides_loads_no_bucket_module():
    """The store-neutral rule and the disk's source load no module of the bucket engine (review R r20
    R5: ``engine.sample`` imported ``bucket_state`` and ``bucket_steps`` for two one-liners, which
    pulled the bucket engine into every disk process)."""
    import subprocess
    import sys

    code = ("import sys; import tb_footprint_plugin.engine.sample, tb_footprint_plugin.engine.local_sample; "
            "print(sorted(m for m in sys.modules if m.startswith('tb_footprint_plugin.engine.bucket_') "
            "or m.endswith('.journal_object')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
