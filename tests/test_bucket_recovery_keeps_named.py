"""What a bucket recovery that keeps backups leaves is said and reachable (r27 W5 items 2-4).

- ``recover``'s line for a ``backups_kept`` outcome read "✓" as a success: it now reads "!" and
  says nothing is lost and how the originals come back (each original's bring-back command, or the
  restore of the operation when its manifest still says the reduction), and that command works.
- ``purge`` neither freed nor listed a rolled-back manifest's kept copies: it now lists them as
  kept (``not_restored``: a kept original's copy is its only one), as it lists a restore's, and
  frees none of them.
- A rollback before the run's manifest was written (killed once its backups were made, a writer
  then rewrote an original) kept that original's backup with nothing naming it: no status row,
  restore, bring-back or purge reached it. It now writes the manifest as rolled back, keeping.
"""
import pytest

from helpers_crash import Killed, kill
from tb_footprint_plugin import api, cli
from tb_footprint_plugin.codes import Finding, Outcome, Recovery
from tb_footprint_plugin.engine import faults

from test_bucket_status_judges_journals import RUN, _logdir

pytestmark = pytest.mark.usefixtures("disarm_faults")

NEW = b"a writer's new bytes"


def _killed_then_rewritten(s3_bucket, tmp_path, point: str):
    """A reduction of RUN killed at ``point`` (before its swap record), then its first deleted
    original rewritten whole by a writer: the logdir's URL, the victim's key, the original's bytes."""
    url = s3_bucket.upload(_logdir(tmp_path), "logs")
    plan = api.plan(url, "archive", quiet_period=0)
    victim = next(a.path for rp in plan.runs for a in rp.actions if a.kind == "delete")
    original = s3_bucket.fs.cat_file(s3_bucket.key("logs/" + victim))
    faults.arm(point, kill)
    try:
        with pytest.raises(Killed):
            api.reduce_logdir(url, policy="archive", dry_run=False, runs=[RUN], quiet_period=0)
    finally:
        faults.disarm_all()
    s3_bucket.fs.pipe_file(s3_bucket.key("logs/" + victim), NEW)
    return url, victim, original


def _recover_said(url, capsys):
    rc = cli.main(["recover", url])
    return rc, capsys.readouterr().out


@pytest.mark.parametrize("point", ["reduce.verify",  # its manifest written, no swap record
                                   "reduce.backup"])  # its backups made, no manifest yet
def test_recover_says_backups_kept_and_names_how_to_bring_the_original_back(s3_bucket, tmp_path, capsys, point):
    url, victim, original = _killed_then_rewritten(s3_bucket, tmp_path, point)
    rc, out = _recover_said(url, capsys)
    [line] = [ln for ln in out.splitlines() if f"{Recovery.BACKUPS_KEPT} [{Finding.ORIGINAL_NOT_IN_PLACE}]" in ln]
    assert line.startswith("! ") and "✓" not in line, out
    assert "nothing lost" in out and rc == cli.EXIT_OK, out
    [cmd] = [ln.split(": ", 1)[1] for ln in out.splitlines() if "original back beside it: " in ln]
    assert cmd.startswith("tb-footprint vault bring-back ") and victim in cmd, out
    # the command named brings the original back beside the writer's bytes
    words = cmd.split()[1:]
    assert cli.main(words) == cli.EXIT_OK, capsys.readouterr()
    got = {k.split("/logs/", 1)[1]: s3_bucket.fs.cat_file(k) for k in s3_bucket.fs.find(s3_bucket.key("logs"))
           if "/.tb-footprint/" not in k}
    assert got[victim] == NEW and original in got.values(), sorted(got)


@pytest.mark.parametrize("point", ["reduce.verify", "reduce.backup"])
def test_purge_lists_a_rolled_back_reductions_kept_copies_and_frees_none(s3_bucket, tmp_path, point):
    url, victim, original = _killed_then_rewritten(s3_bucket, tmp_path, point)
    outs = api.recover_logdir(url)
    [o] = [o for o in outs if o.run == RUN]
    assert o.action == Recovery.BACKUPS_KEPT, outs
    [op] = [m for m in api.operations(url) if m.get("run") == RUN]
    assert op["outcome"] == Outcome.ROLLED_BACK, op
    vault = {k: s3_bucket.fs.cat_file(k) for k in s3_bucket.fs.find(s3_bucket.key("logs/.tb-footprint"))}
    assert original in vault.values()  # the only copy of the victim's original
    for yes in (False, True):
        rep = api.purge(url, yes=yes).to_dict()
        assert [(k["op_id"], k["code"]) for k in rep["kept"]] == [(op["op_id"], Finding.NOT_RESTORED)], rep
        assert victim in rep["kept"][0]["detail"] and rep["kept"][0]["bytes"] > 0, rep
        assert not rep["ops"] and rep["freed_bytes"] == 0, rep
    after = {k: s3_bucket.fs.cat_file(k) for k in s3_bucket.fs.find(s3_bucket.key("logs/.tb-footprint"))}
    assert original in after.values()
    rows = [k for k in api.status(url)["kept_blobs"] if k.get("of_op") == op["op_id"]]
    assert [(k["path"], k["present"], k["code"]) for k in rows] == [(victim, True, Finding.NOT_RESTORED)], rows


def test_recover_names_the_restore_when_the_manifest_still_says_the_reduction(s3_bucket, tmp_path, capsys):
    """A journal older than its run (R7 F2: the reduction finished, its journal as it stood at
    ``reduce.backup`` put back): the manifest stays verified (the kept key holds the staged bytes),
    so the restore of that operation is the command named, and it gives every original back."""
    from test_objstore import _write_rewrite_logdir

    url = s3_bucket.upload(_write_rewrite_logdir(tmp_path / "src"), "logs")
    jkey = s3_bucket.key("logs/.tb-footprint/journal")
    stale = {}

    def capture():
        [k] = [k for k in s3_bucket.fs.find(jkey) if k.endswith(".json")]
        stale[k] = s3_bucket.fs.cat_file(k)

    def user():
        s3_bucket.fs.invalidate_cache()
        return {k: s3_bucket.fs.cat_file(k) for k in s3_bucket.fs.find(s3_bucket.key("logs"))
                if "/.tb-footprint/" not in k}

    before = user()
    faults.arm("reduce.backup", capture)
    [o] = [o for o in api.reduce_logdir(url, policy="archive", dry_run=False, runs=["exp/hist"],
                                        quiet_period=0).outcomes if o.run == "exp/hist"]
    faults.disarm_all()
    assert o.status == Outcome.VERIFIED and user() != before
    [(k, doc)] = stale.items()
    s3_bucket.fs.pipe_file(k, doc)
    rc, out = _recover_said(url, capsys)
    assert rc == cli.EXIT_OK and any(ln.startswith("! ") for ln in out.splitlines()), out
    [cmd] = [ln.split(": ", 1)[1] for ln in out.splitlines() if "give the originals back: " in ln]
    assert cmd.split()[:2] == ["tb-footprint", "restore"] and f"--op {o.op_id}" in cmd, out
    assert cli.main(cmd.split()[1:]) == cli.EXIT_OK, capsys.readouterr()
    assert user() == before
