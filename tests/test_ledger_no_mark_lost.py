"""A folder's ledger file shared by several processes loses no mark (the rule the one ``Ledger``
keeps for its folder layout, ``engine/ledger_file.py``: every mark re-reads the file under an
``flock`` of ``<file>.lock``; a line appended, or the whole file rewritten, by one writer at a
time). Processes mark their own runs while another compacts the file again and again (each
compaction rewrites the file whole: a mark read before it and written after it would be lost)."""
import multiprocessing
import os

from tb_footprint_plugin.engine.ledger import Ledger, load_ledger

WORKERS, RUNS = 3, 40


def _marker(path: str, logdir: str, w: int) -> None:
    book = Ledger(path, "archive", logdir, shard="0/1")
    for i in range(RUNS):
        run = f"w{w}-r{i}"
        book.mark(run, "reducing")
        book.mark(run, "done", op_id=f"op-{run}", after_size_bytes=i)


def _compactor(path: str, logdir: str, stop) -> None:
    book = Ledger(path, "archive", logdir, shard="0/1")
    while not stop.is_set():
        book.compact()
        # a start of another worker of the shard: reads, registers its runs, rewrites the file whole
        book.start([f"w{w}-r{i}" for w in range(WORKERS) for i in range(0, RUNS, 7)])


def test_processes_marking_one_ledger_file_lose_no_mark(tmp_path):
    logdir = str(tmp_path)
    path = os.path.join(logdir, ".tb-footprint", "ledger-shard-0-of-1.json")
    Ledger(path, "archive", logdir, shard="0/1").start([])
    ctx = multiprocessing.get_context("fork")
    stop = ctx.Event()
    squeezer = ctx.Process(target=_compactor, args=(path, logdir, stop))
    squeezer.start()
    workers = [ctx.Process(target=_marker, args=(path, logdir, w)) for w in range(WORKERS)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(120)
    stop.set()
    squeezer.join(60)
    assert [p.exitcode for p in workers] == [0] * WORKERS and squeezer.exitcode == 0
    data, problems = load_ledger(path, logdir)
    assert problems == []
    runs = data["runs"]
    lost = [f"w{w}-r{i}" for w in range(WORKERS) for i in range(RUNS)
            if runs.get(f"w{w}-r{i}", {}).get("state") != "done"]
    assert lost == []
    assert all(runs[f"w{w}-r{i}"]["op_id"] == f"op-w{w}-r{i}" for w in range(WORKERS) for i in range(RUNS))
