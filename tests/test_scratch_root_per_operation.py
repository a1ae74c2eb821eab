"""The readers' scratch root is an operation's vault only while that operation runs: a process
that reduced one logdir and goes on to another (a notebook, the API) made its next scratch folders
in the first logdir's vault — and, when that logdir had been removed meanwhile, recreated its
folders (a write outside the logdir and the vault at hand, invariant 4)."""
import shutil
import tempfile

import pytest

from test_livewriters import PY, _age, image_run
from tb_footprint_plugin import api
from tb_footprint_plugin.storage import scratch

pytestmark = pytest.mark.usefixtures("disarm_faults")


def test_a_second_logdir_never_writes_into_the_first_ones_removed_vault(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    for root in (first, second):
        image_run(root / "run")
        _age(root)
    rep = api.reduce_logdir(str(first), policy="archive", dry_run=False, verify_backends=PY)
    assert rep.ok and rep.outcomes[0].status == "verified", [o.to_dict() for o in rep.outcomes]
    assert scratch.current_root() == tempfile.gettempdir()  # before: the first logdir's vault
    shutil.rmtree(first)
    rep = api.reduce_logdir(str(second), policy="archive", dry_run=False, verify_backends=PY)
    assert rep.ok and rep.outcomes[0].status == "verified", [o.to_dict() for o in rep.outcomes]
    assert not first.exists()  # before: recreated by the second reduce's readers


def test_nested_roots_give_back_the_outer_one(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    before = scratch.current_root()
    with scratch.rooted(str(a)):
        assert scratch.current_root() == str(a)
        with scratch.rooted(str(b)):
            assert scratch.current_root() == str(b)
    assert scratch.current_root() == before
