"""A put-back's exchange never hides what a writer put at the path (review R6 F4): the exchange
(``renameat2(RENAME_EXCHANGE)``, 8eebc4b) swaps whatever stands at the original's path, a folder
too, so a folder made there between the last look and the exchange ended under the exchange name,
named by nothing, while recovery said the restore completed. It is now swapped back at once and
the look refuses it, naming it; the exchange name is keyed on the path, so two files of a folder
holding the same original bytes never share one."""
import os

import pytest

from tb_footprint_plugin import api
from tb_footprint_plugin.codes import Recovery
from tb_footprint_plugin.engine import swap
from tb_footprint_plugin.storage import throttle

from test_restore_put_back_window import CAPS, WRITER, _reduced

pytestmark = pytest.mark.usefixtures("disarm_faults")

OWN = "a user's own file, nowhere else"


def _found(logdir, name):
    return [os.path.relpath(os.path.join(d, n), logdir) for d, dirs, fs in os.walk(logdir) for n in fs + dirs
            if n == name]


def test_a_folder_made_at_the_path_right_before_the_exchange_is_not_hidden(tmp_path, monkeypatch):
    logdir, prof, original, op = _reduced(tmp_path, monkeypatch, CAPS["renames-copying-vault"])
    prof.parent.mkdir(parents=True, exist_ok=True)
    prof.write_bytes(WRITER)  # a file at the path: the put-back exchanges it
    real = throttle.exchange
    made = []

    def exchange(a, b, *args, **kw):
        if not made:  # right before the first exchange, a writer's folder takes the path
            made.append(b)
            os.unlink(prof)
            os.mkdir(prof)
            (prof / "user.txt").write_text(OWN)
        return real(a, b, *args, **kw)

    monkeypatch.setattr(throttle, "exchange", exchange)
    outs = api.restore(str(logdir), op=op)
    monkeypatch.setattr(throttle, "exchange", real)
    assert made
    [o] = [o for o in outs if o.run == "a"]
    assert o.status == "failed" and str(prof.relative_to(logdir)) in o.reason, (o.status, o.code, o.reason)
    # the folder is where its writer made it, never under a name of ours
    assert _found(logdir, "user.txt") == [os.path.relpath(prof / "user.txt", logdir)]
    assert (prof / "user.txt").read_text() == OWN
    assert not [n for n in os.listdir(prof.parent) if "exchanged" in n]
    # recovery does not call the restore done while the folder stands there, and hides nothing
    rec = api.recover_logdir(str(logdir))
    assert not [r for r in rec if r.action == Recovery.COMPLETED], [vars(r) for r in rec]
    assert (prof / "user.txt").read_text() == OWN
    # the user moves the folder aside: the next start finishes the restore, the original back
    os.rename(prof, tmp_path / "moved-aside")
    api.recover_logdir(str(logdir))
    assert prof.read_bytes() == original
    assert (tmp_path / "moved-aside" / "user.txt").read_text() == OWN
    assert not [n for n in os.listdir(prof.parent) if "exchanged" in n]


def test_two_files_with_the_same_bytes_get_exchange_names_of_their_own():
    token = "0" * 32
    a = {"path": "run/plugins/profile/s/a.xplane.pb", "sha256": "ab" * 32}
    b = {"path": "run/plugins/profile/s/b.xplane.pb", "sha256": "ab" * 32}
    na, nb = swap.exchange_name(a, token), swap.exchange_name(b, token)
    assert na and nb and na != nb
    assert os.path.dirname(na) == os.path.dirname(a["path"])
