"""The same bucket logdir reached through another spelling of the same endpoint restores from its
local folder of blobs (review R13 F6): the folder records each place in clear when it claims
there (``bucket_identity.note_place``), and the copying rule honours an owner of this logdir's id
whose recorded place is this protocol and prefix, whatever the endpoint's spelling. Another prefix
is never honoured (G10: a planted id and manifest), and the refusal says where the blobs were
claimed."""
import json
import os

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Failure, Outcome

from test_bucket_prefix_moved_blob_folder import DROP, prof_logdir  # noqa: F401
from test_bucket_vault_of_other_logdirs import _other_logdir


def _respell_endpoint(monkeypatch):
    ep = os.environ["AWS_ENDPOINT_URL"]
    assert "127.0.0.1" in ep
    monkeypatch.setenv("AWS_ENDPOINT_URL", ep.replace("127.0.0.1", "localhost"))  # the same moto server
    monkeypatch.setenv("S3_ENDPOINT", ep.replace("127.0.0.1", "localhost"))


def _reduce(url, folder):
    rep = api.reduce_logdir(url, backup_dir=folder, policy=DROP, dry_run=False, quiet_period=0, runs=["r0"],
                            verify_backends=("python",))
    assert [o.status for o in rep.outcomes] == [Outcome.VERIFIED], [o.reason for o in rep.outcomes]


def test_restore_with_the_endpoint_spelled_otherwise(s3_bucket, prof_logdir, tmp_path, monkeypatch):
    url = s3_bucket.upload(prof_logdir, "runs")
    before = s3_bucket.hashes("runs")
    folder = str(tmp_path / "V")
    _reduce(url, folder)
    _respell_endpoint(monkeypatch)
    outs = api.restore(url, backup_dir=folder)
    assert sorted(o.status for o in outs) == ["restored"], [(o.code, o.reason) for o in outs]
    assert {k: v for k, v in s3_bucket.hashes("runs").items() if not k.startswith(".tb-footprint/")} == \
        {k: v for k, v in before.items() if not k.startswith(".tb-footprint/")}


def test_another_prefix_is_never_honoured_through_another_endpoint_spelling(s3_bucket, prof_logdir, tmp_path,
                                                                            monkeypatch):
    """G10 through another spelling: B given A's id and A's manifest (its blob owner as it is),
    reached through localhost: nothing of A's is copied into B, and the refusal says where A's
    blobs were claimed."""
    folder = str(tmp_path / "V")
    a = s3_bucket.upload(prof_logdir, "A")
    _reduce(a, folder)
    b = _other_logdir(s3_bucket, tmp_path, "B")
    fs, ka, kb = s3_bucket.fs, s3_bucket.key("A"), s3_bucket.key("B")
    fs.invalidate_cache()
    fs.pipe_file(f"{kb}/.tb-footprint/identity.json", fs.cat_file(f"{ka}/.tb-footprint/identity.json"))
    (man_key,) = [k for k in fs.find(f"{ka}/.tb-footprint/manifests") if k.endswith(".json")]
    m = json.loads(fs.cat_file(man_key))
    m["logdir"] = b
    fs.pipe_file(f"{kb}/.tb-footprint/manifests/{man_key.rsplit('/', 1)[-1]}", json.dumps(m).encode())
    fs.invalidate_cache()
    _respell_endpoint(monkeypatch)
    outs = api.restore(b, backup_dir=folder)
    assert [o.code for o in outs] == [Failure.REFUSED], [o.to_dict() for o in outs]
    assert f"claimed at s3://{ka} through endpoint http://127.0.0.1" in outs[0].reason, outs[0].reason
    assert f"this logdir is s3://{kb} through http://localhost" in outs[0].reason, outs[0].reason
    fs.invalidate_cache()
    got = sorted(k[len(kb) + 1:] for k in fs.find(kb) if "/.tb-footprint/" not in k)
    assert got == ["x/notes.txt"], "A's backed-up originals were copied into B"
    outs = api.restore(a, backup_dir=folder)  # A itself, through localhost: restored
    assert [o.status for o in outs] == ["restored"], [o.to_dict() for o in outs]
