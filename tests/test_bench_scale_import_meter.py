"""bench/scale.py measures what a fresh reduce's fixed part owes to module imports (issue 28
item 3): each module's own loading, by the thread that imported it, nested imports left out.

``-X importtime`` gives wall time, which with several threads importing at once holds other
threads' work and the import lock's waits (negative self times in a reduce's trace): the
fixed part's import share was an estimate until the bench measured it."""
import os
import subprocess
import sys
import textwrap

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.insert(0, BENCH)

import scale  # noqa: E402

_CHILD = textwrap.dedent("""
    import json, os, sys, threading, time
    sys.path.insert(0, %(bench)r)
    sys.path.insert(0, %(mods)r)
    import scale
    m = scale._ImportMeter().install()

    def burn(s):
        end = time.thread_time() + s
        while time.thread_time() < end:
            pass

    t = threading.Thread(target=lambda: __import__("p2_outer"), name="footprint-tb-imports")
    t.start(); t.join()
    __import__("p2_alone")
    __import__("p2_alone")  # imported already: not loaded, not counted again
    print(json.dumps({"by": m.by_thread, "n": m.modules}))
""")


def test_each_module_counts_its_own_loading_by_thread(tmp_path):
    mods = tmp_path / "mods"
    mods.mkdir()
    burn = ("import time\nend = time.thread_time() + %s\n"
            "while time.thread_time() < end:\n    pass\n")
    (mods / "p2_inner.py").write_text(burn % 0.15)
    (mods / "p2_outer.py").write_text("import p2_inner\n" + burn % 0.05)
    (mods / "p2_alone.py").write_text(burn % 0.1)
    out = subprocess.run([sys.executable, "-c", _CHILD % {"bench": BENCH, "mods": str(mods)}],
                         capture_output=True, text=True, check=True, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    got = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    by = got["by"]
    # outer's 0.05 s and inner's 0.15 s, each once, on the thread that imported them
    assert 0.19 <= by["footprint-tb-imports"] < 0.3, by
    assert 0.09 <= by["<main thread>"] < 0.16, by
    assert got["n"] == 3, got


def test_the_report_prints_the_import_share(capsys):
    row = {"mb": 20, "bytes": 20e6, "anchor": {"seconds": 0.1},
           "cold": {"seconds": 1.0, "cpu": 0.9, "statuses": {"verified": 1}, "rss_mb": 100.0,
                    "import_cpu": {"<main thread>": 0.15, "footprint-tb-imports": 0.2},
                    "import_modules": 480, "all_import_cpu": [0.35, 0.37, 0.4]},
           "warm": {"seconds": 0.8, "cpu": 0.6, "statuses": {"verified": 1}, "rss_mb": 100.0}}
    scale.file_sizes_report([row])
    out = capsys.readouterr().out
    assert ("CPU importing 480 modules during the reduce: 0.350 s of 0.900 s "
            "(<main thread> 0.150, footprint-tb-imports 0.200); in each measurement: [0.35, 0.37, 0.4]") in out, out
