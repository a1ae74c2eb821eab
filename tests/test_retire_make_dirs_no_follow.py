"""A retired run's restore makes its recorded folders by the one rule of a restore's folders
(``swap.make_dirs``, the name ``retire`` calls; helper T2's note): made where the logdir store's
walk reaches, no link followed. Before, ``retire._make_dirs`` looked with ``no_symlink`` and then ran ``os.mkdir`` by
path: a folder on the way swapped for a link to an outside folder in between received the new
folder (invariant 4)."""
import os

import pytest

from tb_footprint_plugin.codes import StoreError
from tb_footprint_plugin.engine import retire, swap
from tb_footprint_plugin.engine.context import Context, TransactionError


def test_a_folder_swapped_for_a_link_after_its_look_receives_nothing(tmp_path, monkeypatch):
    ctx = Context(str(tmp_path / "logdir"))
    os.makedirs(os.path.join(ctx.logdir, "run"))
    outside = tmp_path / "outside"
    outside.mkdir()
    swapped = []

    def look(c, rel, *a, **kw):  # the look passes; then the run's folder becomes a link outside
        if rel == "run/plugins" and not swapped:
            os.rename(os.path.join(ctx.logdir, "run"), str(tmp_path / "run-aside"))
            os.symlink(str(outside), os.path.join(ctx.logdir, "run"))
            swapped.append(rel)

    monkeypatch.setattr(retire, "no_symlink", look)
    monkeypatch.setattr(swap, "no_symlink", look)
    with pytest.raises(TransactionError) as e:
        retire.make_dirs(ctx, [{"path": "run/plugins"}, {"path": "run/plugins/profile"}])
    assert swapped
    assert list(outside.iterdir()) == [], "a folder was made outside the logdir"
    assert e.value.code == StoreError.SYMLINK and "run/plugins" in str(e.value)


def test_recorded_folders_are_made_shallowest_first_owner_only(tmp_path):
    ctx = Context(str(tmp_path / "logdir"))
    os.makedirs(ctx.logdir)
    retire.make_dirs(ctx, [{"path": "run/a/b"}, {"path": "run"}, {"path": "run/a"}])
    for rel in ("run", "run/a", "run/a/b"):
        assert os.stat(os.path.join(ctx.logdir, rel)).st_mode & 0o777 == 0o700, rel
