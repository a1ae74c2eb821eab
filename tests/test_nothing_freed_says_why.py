"""Review R16 F6, first bullet: a reduce that freed no disk space always ended "the backups are
hard links there" — with the default compressed vault, when no run was reduced at all (every one
failed or was skipped), and after a rewrite-only run whose backup is kept compressed until purge.
The reason now follows the facts."""
import argparse

from tb_footprint_plugin import cli


def test_reason_follows_the_facts():
    default = argparse.Namespace(vault_format=None)
    assert "no run was reduced" in cli._why_nothing_freed(default, [])
    assert "hard links" in cli._why_nothing_freed(argparse.Namespace(vault_format="hardlink"), ["a"])
    why = cli._why_nothing_freed(default, ["a"])
    assert "hard links" not in why and "purge" in why, why


def test_verify_both_is_accepted_as_offered():
    """The --verify error offers 'both' (N10's note): it is accepted, as python and rust."""
    assert cli._backends("both") == ("python", "rust")
    assert cli._backends("rust") == ("rust",)
