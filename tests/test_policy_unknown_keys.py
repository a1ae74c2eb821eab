"""Review R16 F18: a policy file's unknown top-level keys were dropped silently:
``{"based_on": "lossless", ...}`` (a plausible guess at the format) planned as an empty custom
policy with "nothing to reduce", exit 0. Unknown keys are now refused naming them and the known
ones, as unknown ``content`` options already were (exit 2 through the CLI)."""
import json

import pytest

from helpers_cli import run_cli as tbf
from tb_footprint_plugin import api


def test_unknown_top_level_key_is_refused(tmp_path):
    with pytest.raises(api.PolicyError, match="based_on"):
        api.get_policy({"based_on": "lossless", "rules": {"profile_xplane": "delete"}})
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"base": "lossless", "bogus_key": 1}))
    p = tbf("plan", tmp_path, "--policy", f)
    assert p.returncode == 2 and "bogus_key" in p.stderr and "base" in p.stderr, p.stdout + p.stderr


def test_known_keys_still_read():
    pol = api.get_policy({"name": "mine", "base": "lossless", "rules": {"profile_xplane": "delete"},
                          "keep_latest": None, "compress_torch": False, "content": {}, "description": "d"})
    assert pol.name == "mine" and pol.file_rules["profile_xplane"] == "delete"
