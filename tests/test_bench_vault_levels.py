"""bench/vault.py --levels (issue #27 item 1): the zstd level table is measured and printed in one
run, anchored on a plain copy, with the product's level marked and its verdict line."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_levels_table_marks_product_level_and_round_trips():
    from tb_footprint_plugin.storage import zst

    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "vault.py"), "--levels", "3,9",
                        "--project-mb", "3", "--trace-mb", "2"], capture_output=True, text=True, timeout=300,
                       cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "NOT EXACT" not in out
    # the product's level is measured even when not asked for, and marked in both tables
    assert out.count(f"\n{zst.LEVEL} <- LEVEL") == 2, out
    for name in ("project", "trace"):
        table = out.split(f"\n{name}: ", 1)[1].split("\n\n", 1)[0]
        rows = {line.split()[0]: line for line in table.splitlines()[2:]}
        assert set(rows) == {"plain", str(zst.LEVEL), "3", "9"}, table
        pct = {lv: float(re.search(r"([\d.]+)%", rows[lv]).group(1)) for lv in rows}
        assert pct["plain"] == 100.0 and pct["9"] < 100.0, table  # the anchor, and a real saving
        assert pct["9"] <= pct["3"] + 0.5, table
    verdict = out.strip().splitlines()[-1]
    assert verdict.startswith(f"level {zst.LEVEL} (the product's): ") and "level 3's saving" in verdict, verdict
