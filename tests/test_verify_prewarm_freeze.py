"""What a fresh process imported is set aside from the cyclic collector (``gc.freeze``) only by
``tb-footprint`` as a program, at its end (``cli.console``: the interpreter's last collections at
exit no longer walk the ~60,000 objects of ~480 modules; issue #28 item 3), never by the library.

Review R8 F4 on 4f58641: the verification's ``routes.prewarm`` froze every object alive in any
process building TensorBoard's app for the first time — a training job's callback
(``integrations``), a notebook, a sweep loop calling the API — so a user's object in a cycle, alive
then and dropped later (the next trial's model), was never freed. Each case runs in an
interpreter of its own: another test may have imported TensorBoard's app in this one.
"""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code).format(repo=str(REPO))],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_library_never_freezes_a_callers_objects():
    got = _run("""
        import gc, json, sys, weakref
        sys.path.insert(0, {repo!r})
        from tb_footprint_plugin.verify import routes

        class Model:  # a training job's object graph: full of cycles
            pass

        m = Model()
        m.me = m
        m.weights = bytearray(1 << 20)
        alive = weakref.ref(m)
        routes.prewarm()  # what every reduce with verification does, in the caller's process
        routes._PREWARM.join()
        del m  # the next trial drops its model
        gc.collect()
        print(json.dumps({{"frozen": gc.get_freeze_count(), "model_left": alive() is not None}}))
    """)
    assert got == {"frozen": 0, "model_left": False}, got


def test_the_program_sets_what_is_left_aside_at_its_end_and_main_does_not():
    code = """
        import contextlib, gc, io, json, sys
        sys.path.insert(0, {repo!r})
        from tb_footprint_plugin import cli
        sys.argv = ["tb-footprint", "--version"]
        with contextlib.redirect_stdout(io.StringIO()):
            rc = cli.%s()
        print(json.dumps({{"rc": rc, "frozen": gc.get_freeze_count()}}))
    """
    program = _run(code % "console")
    assert program["rc"] == 0 and program["frozen"] > 1000, program
    # main() is what tests and embedders call: it leaves the collector as it found it
    library = _run(code % "main")
    assert library == {"rc": 0, "frozen": 0}, library
