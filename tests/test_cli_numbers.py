"""Every number option of the CLI follows one rule (``cli._number``): a value that makes no sense
for it (0 or less where a count of at least 1 or a positive duration is needed, a negative size,
age or count, NaN or infinity anywhere) is a usage error, exit 2, naming the option and the value,
before anything runs. A negative value written without '=' (``--timeout -1m``) gets that same
message, not argparse's "expected one argument". The values that do mean something (``0`` for
``--keep-latest``, ``--keep-best``, ``--days``, sizes and durations) are still taken."""
import argparse

import pytest

from conftest import copy_real, user_files
from helpers_cli import run_cli as cli


@pytest.fixture
def logdir(tmp_path):
    return copy_real("tf/keras_profiled", tmp_path / "logdir")


def _main(capsys, *argv):
    from tb_footprint_plugin import cli as cli_mod

    rc = cli_mod.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


# (verb and its positionals, option, value, what the message says of it)
REFUSED = [
    (["scan", "L"], "--top", "0", "must be at least 1"),
    (["scan", "L"], "--top", "-1", "must be at least 1"),
    (["plan", "L"], "--min-size", "-5", "must be at least 0"),
    (["plan", "L"], "--min-size", "inf", "must be a finite number"),
    (["plan", "L"], "--older-than", "nan", "must be a finite number"),
    (["plan", "L"], "--older-than", "-1d", "must be at least 0"),
    (["plan", "L"], "--quiet-period", "-1", "must be at least 0"),
    (["plan", "L"], "--quiet-period", "nan", "must be a finite number"),
    (["plan", "L"], "--keep-latest", "-1", "must be at least 0"),
    (["plan", "L"], "--keep-per-tag", "images=1", "at least 2"),
    (["reduce", "L", "-n"], "--shard-count", "0", "must be at least 1"),
    (["reduce", "L", "-n"], "--shard", "4/4", "out of range"),
    (["reduce", "L", "-n"], "--shard", "0/0", "out of range"),
    (["reduce", "L", "-n"], "--shard", "-1/4", "expected I/N"),
    (["reduce", "L", "-n"], "--timeout", "-1m", "must be above 0"),
    (["reduce", "L", "-n"], "--lease", "-1m", "must be above 0"),
    (["reduce", "L", "-n"], "--max-file-ops-per-second", "0", "must be above 0"),
    (["purge", "L", "-n"], "--older-than", "-1d", "must be at least 0"),
    (["retire", "L", "-n", "--metric", "loss"], "--keep-best", "-1", "must be at least 0"),
    (["retire", "L", "-n"], "--min-size", "-1G", "must be at least 0"),
    (["retire", "L", "-n"], "--quiet-period", "-10m", "must be at least 0"),
    (["vault", "lifecycle", "--backup-dir", "s3://bucket/vaults"], "--days", "-1", "must be at least 0"),
    (["demo", "D"], "--scale", "0", "must be above 0"),
    (["demo", "D"], "--scale", "nan", "must be a finite number"),
]


@pytest.mark.parametrize("words,option,value,said", REFUSED, ids=[f"{w[0]} {o} {v}" for w, o, v, _ in REFUSED])
def test_a_number_out_of_range_is_a_usage_error_naming_option_and_value(capsys, logdir, tmp_path, words, option,
                                                                        value, said):
    """Written without '=' (``--timeout -1m``, ``--shard -1/4``): the option's own check answers."""
    demo = tmp_path / "demo"
    argv = [{"L": logdir, "D": demo}.get(w, w) for w in words] + [option, value]
    before = user_files(logdir)
    rc, out, err = _main(capsys, *argv)
    assert rc == 2, (out, err)
    assert f"argument {option}: " in err and repr(value) in err and said in err, err
    assert "expected one argument" not in err and f"usage: tb-footprint {words[0]}" in err, err
    assert user_files(logdir) == before and not (logdir / ".tb-footprint").exists() and not demo.exists()


def test_demo_scale_zero_is_a_usage_error_and_writes_nothing(tmp_path):
    """Was exit 1 ('error [error]: scale must be > 0') once the verb had begun."""
    p = cli("demo", tmp_path / "d", "--scale", "0")
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "tb-footprint demo: error: argument --scale: '0': must be above 0" in p.stderr, p.stderr
    assert not (tmp_path / "d").exists()


def test_timeout_negative_without_equals_says_what_is_wrong(logdir):
    """``--timeout -1m`` (not ``--timeout=-1m``) in a real process: the same message as with '='."""
    p = cli("reduce", logdir, "-n", "--timeout", "-1m")
    q = cli("reduce", logdir, "-n", "--timeout=-1m")
    assert p.returncode == q.returncode == 2, (p.stderr, q.stderr)
    assert p.stderr.splitlines()[-1] == q.stderr.splitlines()[-1] == (
        "tb-footprint reduce: error: argument --timeout: '-1m': must be above 0")
    assert not (logdir / ".tb-footprint").exists()


def test_two_shard_counts_are_a_usage_error(capsys, logdir):
    """``--shard 1/4 --shard-count 3``: the count the other workers use cannot be told; refused."""
    rc, out, err = _main(capsys, "reduce", logdir, "-n", "--shard", "1/4", "--shard-count", "3")
    assert rc == 2 and "--shard 1/4 and --shard-count 3" in err, err
    assert not (logdir / ".tb-footprint").exists()
    rc, out, err = _main(capsys, "reduce", logdir, "-n", "--shard", "0/1", "--shard-count", "1",
                         "--quiet-period", "0")
    assert rc == 0, err


def _parsed(*argv):
    from tb_footprint_plugin import cli as cli_mod

    return cli_mod._parse(cli_mod.build_parser(), [str(a) for a in argv])


def test_the_values_that_mean_something_are_taken(tmp_path):
    """0 keeps none (``--keep-latest``), retires every ranked run (``--keep-best``), transitions at
    once (``--days``), selects every run (sizes, ages); the least count is 1; any whole seed."""
    a = _parsed("plan", tmp_path, "--keep-latest", "0", "--min-size", "0", "--older-than", "0s",
                "--quiet-period", "0", "--keep-per-tag", "images=2")
    assert (a.keep_latest, a.min_size, a.older_than, a.quiet_period, a.keep_per_tag) == (0, 0, 0, 0, {"images": 2})
    assert _parsed("retire", tmp_path, "--keep-best", "0", "--metric", "loss").keep_best == 0
    assert _parsed("vault", "lifecycle", "--days", "0").days == 0
    assert _parsed("scan", tmp_path, "--top", "1").top == 1
    a = _parsed("reduce", tmp_path, "--shard", "0/1", "--shard-count", "1", "--jobs", "1", "--timeout", "1s",
                "--lease", "1d", "--max-file-ops-per-second", "0.5")
    assert (a.shard, a.shard_count, a.jobs, a.timeout, a.lease, a.max_file_ops_per_second) == ((0, 1), 1, 1, 1, 86400, 0.5)
    a = _parsed("demo", tmp_path / "d", "--scale", "0.001", "--seed", "-1")
    assert (a.scale, a.seed) == (0.001, -1)


#: number options that take every value of their type: a seed is any whole number
ANY_NUMBER = {("demo", "--seed")}


def _number_options():
    """Every option of every verb whose type turns "1" into a number."""
    from tb_footprint_plugin import cli as cli_mod

    cli_mod.build_parser()
    for verb, parser in cli_mod._VERBS.items():
        for action in parser._actions:
            if not action.option_strings or action.type is None:
                continue
            try:
                v = action.type("1")
            except (ValueError, TypeError, argparse.ArgumentTypeError):
                continue
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                yield verb, parser, action


def test_every_number_option_follows_the_one_rule():
    """Each number option refuses NaN, infinity and -1 with its name, and its help says its bound;
    a number option added with ``type=int`` or ``type=float`` fails this."""
    seen = set()
    for verb, parser, action in _number_options():
        option = action.option_strings[0]
        seen.add((verb, option))
        if (verb, option) in ANY_NUMBER:
            continue
        assert any(b in action.help for b in ("at least", "0 or more", "above 0")), (verb, option, action.help)
        for bad in ("nan", "inf", "-1"):
            with pytest.raises(argparse.ArgumentTypeError):
                action.type(bad)
            with pytest.raises(SystemExit) as e:
                parser.parse_known_args([option, bad])
            assert e.value.code == 2
    assert {("reduce", "--jobs"), ("reduce", "--timeout"), ("scan", "--top"), ("retire", "--keep-best"),
            ("vault", "--days"), ("reduce", "--shard-count"), ("demo", "--scale"), ("plan", "--keep-latest"),
            ("purge", "--older-than"), ("demo", "--seed")} <= seen
