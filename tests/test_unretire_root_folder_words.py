"""Review R18 F5: a folder root made at a retired run's name (an admin restoring from tape, a
root-run job) refuses the user's restore with "move that folder away", which the user cannot do
in a sticky logdir. It stays refused (accepted, the folder's recorded mode could not be given
back: only root may chmod it, and the put-back would stop half-way), but the refusal says who
can clear it: root, by moving the folder away or giving it to the user; given to them, the run
comes back."""
from __future__ import annotations

import os

import pytest

from test_trust_users import files_under, shared, snapshot, tmp_path, users, world  # noqa: F401
from test_unretire_foreign_folder import _tool

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="makes Unix users and a folder of root: CI runs as root")


def test_a_folder_of_root_at_a_retired_runs_name_says_root_must_move_it_or_give_it(users, shared):
    alice, _bob = users
    alice.tool("make", shared, "alice-run")
    original = snapshot(shared / "alice-run")
    out = _tool(alice, "retire", shared, "alice-run")
    assert [o["status"] for o in out["outcomes"]] == ["verified"], out
    os.mkdir(shared / "alice-run", 0o755)  # root's, as an admin's restore from tape would make it

    [o] = alice.tool("restore", shared, "alice-run")["outcomes"]
    assert o["status"] == "failed" and o["code"] == "restore_blocked", o
    assert "folder of root" in o["reason"] and "root (an administrator) must move it away or give it to you" \
        in o["reason"], o["reason"]
    assert snapshot(shared / "alice-run") == {}
    assert len(files_under(shared / ".tb-footprint" / "retired")) == len(original)

    os.chown(shared / "alice-run", alice.uid, alice.uid)  # what the words ask of root
    [o] = alice.tool("restore", shared, "alice-run")["outcomes"]
    assert o["status"] == "restored", o
    assert snapshot(shared / "alice-run") == original
