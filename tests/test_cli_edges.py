"""The command line's small edges (review R16, leftovers): the CLI's "no space" code is the
library's one rule; a missing logdir is named as what is missing; ``--jobs`` / ``--timeout`` of
zero or less are usage errors; a closed pipe ends quietly; ``--`` lets a run name begin with '-';
every verb's ``--help`` and the README say its exit codes."""
import errno
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, copy_real, user_files
from helpers_cli import cli_env, run_cli as cli


# --- one "no space" rule --------------------------------------------------------------------

def test_no_space_code_is_the_librarys_one_rule(monkeypatch):
    """``cli._error_code`` asks ``api.is_no_space`` (``engine.context``'s rule) and has no copy."""
    from tb_footprint_plugin import api, cli as cli_mod

    assert "is_no_space" in api.__all__
    for n in (errno.ENOSPC, errno.EDQUOT):
        assert cli_mod._error_code(OSError(n, os.strerror(n))) == "no_space"
    assert cli_mod._error_code(OSError(errno.EIO, "i/o")) == "error"
    seen = []
    monkeypatch.setattr(api, "is_no_space", lambda e: seen.append(e) or e.errno == errno.EIO)
    eio, full = OSError(errno.EIO, "i/o"), OSError(errno.ENOSPC, "full")
    assert cli_mod._error_code(eio) == "no_space" and seen == [eio]
    assert cli_mod._error_code(full) == "error"  # the CLI follows the library's answer, whatever it is
