"""``routes.prewarm`` in a process that imports TensorBoard's app for the first time sets what
imports made aside from the cyclic collector (``gc.freeze``), garbage collected first (issue #28
item 3, fixed cost of a fresh reduce).

Before: the ~60,000 objects of a fresh reduce's ~480 imported modules were walked by every full
pass of the collector during the reduce and by the interpreter's last collection at exit, a
fixed cost the whole process paid at every file size. The tab's TensorBoard (its app imported
long before) and a host that turned the collector off are left as they are. Each case runs in an
interpreter of its own: another test may have imported TensorBoard's app in this one.
"""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_CASE = textwrap.dedent("""
    import gc, json, sys, weakref
    sys.path.insert(0, {repo!r})
    from tb_footprint_plugin.verify import routes
    {before}
    gc.set_threshold(10 ** 9)  # no pass of the collector's own: only an explicit one collects

    class Cycle:
        pass

    c = Cycle()
    c.me = c
    garbage = weakref.ref(c)
    del c
    routes.prewarm()
    routes._PREWARM.join()
    from tensorboard.backend import application
    tracked = gc.get_objects()  # the permanent (frozen) generation is not listed
    print(json.dumps({{
        "frozen": gc.get_freeze_count(),
        "app_class_frozen": not any(o is application.TensorBoardWSGIApp for o in tracked),
        "own_function_frozen": not any(o is routes.prewarm for o in tracked),
        "garbage_left": garbage() is not None,
        "enabled": gc.isenabled(),
    }}))
""")


def _run(before: str = "") -> dict:
    out = subprocess.run([sys.executable, "-c", _CASE.format(repo=str(REPO), before=before)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_fresh_process_sets_its_imports_aside_and_the_tabs_process_is_left_alone():
    got = _run()
    # the package's modules (frozen before the app's imports) and TensorBoard's app (after)
    assert got["own_function_frozen"] and got["app_class_frozen"], got
    assert got["frozen"] > 20_000, got
    # collected first: a cycle that was garbage then is freed, not kept for good
    assert not got["garbage_left"], got
    assert got["enabled"], got
    # the tab's TensorBoard has its app imported before any reduce: nothing frozen
    tab = _run("from tensorboard.backend import application")
    assert tab["frozen"] == 0 and not tab["own_function_frozen"] and tab["enabled"], tab
    # a host that turned the collector off keeps it off, nothing frozen or collected
    off = _run("gc.disable()")
    assert off["frozen"] == 0 and off["garbage_left"] and not off["enabled"], off
