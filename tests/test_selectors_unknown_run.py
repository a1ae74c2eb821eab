"""Review R16 F4: the README says a run name or glob that matches no run is an error (exit 2),
never "nothing to do". ``restore`` of an unknown run exited 1 through the generic error path,
``verify`` of one said "no kept reductions to verify" and exited 0, ``vault lifecycle`` with
neither a logdir nor ``--backup-dir`` exited 1. Damage that may hide a run's backups stays a
failure (exit 1, ``restore_blocked``), not a usage error."""
import json

from helpers_cli import run_cli as tbf
from test_issue29_gaps_purge import reduced_copies


def test_unknown_run_is_a_usage_error_on_restore_and_verify(tmp_path):
    logdir = reduced_copies(tmp_path, ("a",))
    p = tbf("restore", logdir, "nosuchrun", "--yes")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "nosuchrun" in p.stderr and "to restore: a" in p.stderr, p.stderr  # names what there is
    p = tbf("verify", logdir, "nosuchrun")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "nosuchrun" in p.stderr and "no kept reductions to verify" not in p.stdout, p.stdout + p.stderr
    p = tbf("verify", logdir, "a", "--verify", "python", "--json")  # a known run still verifies
    assert p.returncode == 0 and [r["run"] for r in json.loads(p.stdout)] == ["a"], p.stdout + p.stderr
    p = tbf("restore", logdir, "a", "--yes")
    assert p.returncode == 0, p.stdout + p.stderr
    p = tbf("restore", logdir, "a", "--yes")  # restored already: said, not an error
    assert p.returncode == 0 and "already" in p.stdout, p.stdout + p.stderr


def test_vault_lifecycle_without_a_logdir_or_url_is_a_usage_error():
    p = tbf("vault", "lifecycle")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "--backup-dir" in p.stderr


def test_mistyped_operation_id_is_a_usage_error_on_restore_verify_purge(tmp_path):
    """R16 F4's rest: a mistyped --op exited 1 on restore and verify, and 0 on purge having purged
    nothing. An id that names no operation is a usage error (exit 2) on each, coded not_found."""
    logdir = reduced_copies(tmp_path, ("a",))
    bad = "20990101T000000-abcdef"
    for verb in (("restore", "--op", bad, "--yes"), ("verify", "--op", bad), ("purge", "--op", bad, "--yes")):
        p = tbf(verb[0], logdir, *verb[1:])
        assert p.returncode == 2, (verb, p.stdout + p.stderr)
        assert bad in p.stderr and "no operation" in p.stderr, (verb, p.stderr)
    p = tbf("purge", logdir, "-n", "--json")  # nothing was purged
    assert [o["run"] for o in json.loads(p.stdout)["ops"]] == ["a"], p.stdout
