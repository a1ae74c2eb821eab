"""A bucket logdir: a restore of a run restored already says "already restored", as on a disk, and so
does a run its parent's restored retirement took along (``restore exp/eval`` after ``exp``); before,
both were "nothing to restore", a usage error at the CLI (review R20's parity note on ae83518)."""
import getpass
import socket

import pytest

from conftest import copy_real
from tb_footprint_plugin import api

pytestmark = pytest.mark.usefixtures("disarm_faults")


def _logdir_files(bucket, prefix) -> dict:
    return {k: v for k, v in bucket.hashes(prefix).items() if not k.startswith(".tb-footprint/")}


def test_a_bucket_run_restored_already_or_taken_along_is_said_already_restored(tmp_path, s3_bucket):
    logdir = tmp_path / "ld"
    copy_real("tf/keras_profiled/train", logdir / "exp")
    copy_real("tf/keras_profiled/train", logdir / "exp" / "eval")
    url = s3_bucket.upload(logdir, "along")
    before = _logdir_files(s3_bucket, "along")
    (o,) = api.retire(url, api.retire_rule(runs=["exp"], include_nested=True), dry_run=False, quiet_period=0).outcomes
    assert str(o.status) == "verified", o.reason
    (back,) = api.restore(url, run="exp")
    assert str(back.status) == "restored", back.reason
    assert _logdir_files(s3_bucket, "along") == before
    for run in ("exp", "exp/eval"):
        seen = []
        (again,) = api.restore(url, run=run, on_outcome=seen.append)
        assert (again.run, str(again.status), str(again.code)) == (run, "skipped", "already_restored"), again
        assert again.op_id == o.op_id and seen == [again], (again, seen)
    assert _logdir_files(s3_bucket, "along") == before
    # a name nothing recorded is still nothing to restore
    with pytest.raises(api.TransactionError) as e:
        api.restore(url, run="exp/evl")
    # a disk's words, and why (review R21 PD5)
    assert "nothing to restore for run 'exp/evl'" in str(e.value) and "no retirement" in str(e.value), str(e.value)


def test_a_bucket_operation_asked_for_again_by_its_op_id_is_said_already_restored(tmp_path, s3_bucket):
    """``restore --op ID`` of an operation restored already: a disk says "already restored" (exit 0 at
    the CLI); a bucket said "nothing to restore", a usage error, for a retirement and a reduction alike."""
    logdir = tmp_path / "ld"
    copy_real("tf/keras_profiled/train", logdir / "exp")
    copy_real("tf/keras_profiled/train", logdir / "other")
    url = s3_bucket.upload(logdir, "byop")
    before = _logdir_files(s3_bucket, "byop")
    (ret,) = api.retire(url, api.retire_rule(runs=["exp"]), dry_run=False, quiet_period=0).outcomes
    assert str(ret.status) == "verified", ret.reason
    red = api.reduce_logdir(url, runs=["other"], policy="archive", dry_run=False, quiet_period=0).outcomes
    assert [str(o.status) for o in red] == ["verified"], red
    for op in (ret.op_id, red[0].op_id):
        (back,) = api.restore(url, op=op)
        assert str(back.status) == "restored", back.reason
    assert _logdir_files(s3_bucket, "byop") == before
    for op, run in ((ret.op_id, "exp"), (red[0].op_id, "other")):
        seen = []
        (again,) = api.restore(url, op=op, on_outcome=seen.append)
        assert (again.run, str(again.status), str(again.code), again.op_id) == (run, "skipped", "already_restored", op)
        assert seen == [again]
        # a bucket's restore of a reduction has no op id: it is named by when and by whom it ran (review
        # R21 PD4); a retirement's restore has one, named
        named = f"by {getpass.getuser()}@{socket.gethostname()}"
        assert op == ret.op_id or ("by a restore" not in again.reason and named in again.reason), again.reason
    assert _logdir_files(s3_bucket, "byop") == before
    with pytest.raises(api.TransactionError) as e:
        api.restore(url, op="20990101T000000-nosuchop")
    assert "no operation '20990101T000000-nosuchop' in the vault" in str(e.value)  # a disk's words (R21 PD10)


def test_nothing_to_restore_is_said_in_the_same_words_with_the_same_code_on_a_disk_and_a_bucket(tmp_path, s3_bucket):
    """One sentence for every store (review R21 PD5: each front wrote its own): a run nothing recorded,
    on a disk and on a bucket holding the same files, is refused with the same words and code,
    only the logdir named differs."""
    logdir = tmp_path / "ld"
    copy_real("tf/keras_profiled/train", logdir / "exp")
    url = s3_bucket.upload(logdir, "words")
    said = {}
    for where in (str(logdir), url):
        with pytest.raises(api.TransactionError) as e:
            api.restore(where, run="nope")
        said[where] = (str(e.value).replace(where, "LOGDIR"), str(e.value.code))
    assert said[str(logdir)] == said[url], said
    assert said[url] == ("nothing to restore for run 'nope' in LOGDIR (no kept backup of a verified reduction, "
                         "no retirement)", "not_found"), said


def test_a_bucket_runs_restore_names_its_refused_manifest_not_a_typo(tmp_path, s3_bucket):
    """Review R24 F3: ``restore URL a`` of a run whose manifest the one schema refuses (``restored_by``
    a number) was the CLI's usage error "nothing to restore for run 'a'" (exit 2), the engine never
    asked; now the engine's refusal names the manifest (``restore_blocked``, exit 1), as on a disk."""
    import json

    from helpers_cli import run_cli

    logdir = tmp_path / "ld"
    copy_real("tf/keras_profiled/train", logdir / "a")
    copy_real("tf/keras_profiled/train", logdir / "b")
    url = s3_bucket.upload(logdir, "refused")
    red = api.reduce_logdir(url, policy="archive", dry_run=False, quiet_period=0).outcomes
    assert sorted(str(o.status) for o in red) == ["verified", "verified"], red
    op = next(o.op_id for o in red if o.run == "a")
    key = next(k for k in s3_bucket.fs.find(s3_bucket.key("refused/.tb-footprint/manifests")) if op in k)
    m = json.loads(s3_bucket.fs.cat_file(key))
    s3_bucket.fs.pipe_file(key, json.dumps(dict(m, restored_by=7)).encode())
    p = run_cli("restore", url, "a", "--yes")
    assert p.returncode == 1 and "[restore_blocked]" in p.stderr, p.stdout + p.stderr
    assert op in p.stderr or "manifests" in p.stderr, p.stderr
    typo = run_cli("restore", url, "zz", "--yes")
    assert typo.returncode == 1 and "[restore_blocked]" in typo.stderr, typo.stdout + typo.stderr
