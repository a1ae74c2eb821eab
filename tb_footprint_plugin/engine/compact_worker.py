"""The worker process of a reduce batch's compaction rounds (``compactor.CompactWorker``).

Started by its parent (``python -I -c``, the package root as its argument: nothing of the current
folder or of ``PYTHONPATH`` is imported). Reads JSON lines on stdin: first ``{"logdir",
"backup_dir", "vault", "pack_below", "pack_batch"}`` (its parent's context, vault and thresholds;
another vault than the one named and it ends), then one round a line
(``{"n", "round": [[op id, run, digests], ...]}``); compacts each (``compactor.compact_round``:
each run under its lock, each blob under its own, as any process sharing the vault) and answers
``{"n", "failed", "busy": [op ids that found a blob busy]}`` on stdout (after ``{"ready"}`` once
its signal handlers are set and its logdir's context made). Ctrl-C is its parent's
(ignored here); ``SIGTERM`` ends it after the round under way. Its stdin closed, it ends after the
rounds it was given. Its parent gone (a killed batch: the replies' pipe closed), it answers no
more and goes on with the rounds it was given (their notes are done then, or at the next start).
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
from typing import List, Optional

from tb_footprint_plugin.engine.compactor import compact_round
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine import vault as vault_mod
from tb_footprint_plugin.engine.vault import KEPT_BUSY


def _reply(msg: dict) -> bool:
    """Write one reply line straight to fd 1 (nothing buffered: nothing left to fail at exit);
    False when nobody reads the replies any more (review R13 F4: ``BrokenPipeError`` killed the
    worker at its next reply, dropping the rounds still on its stdin)."""
    data = (json.dumps(msg) + "\n").encode()
    try:
        while data:
            data = data[os.write(1, data):]
    except OSError:
        return False
    return True


def main(argv: Optional[List[str]] = None) -> int:
    """Run rounds until stdin ends or ``SIGTERM``; 0, or 2 when the first line is not a logdir.
    ``argv``: none are taken (``storage.spawn.python_child`` passes the rest of its command line)."""
    stop = threading.Event()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    first = sys.stdin.buffer.readline()
    try:
        head = json.loads(first)
        ctx = Context(head["logdir"], head.get("backup_dir"))
        if ctx.vault.root != head["vault"]:
            return 2  # never another vault than its parent's (a relative path read elsewhere)
        vault_mod.PACK_BELOW, vault_mod.PACK_BATCH = int(head["pack_below"]), int(head["pack_batch"])
    except (ValueError, TypeError, KeyError, OSError):
        return 2
    heard = _reply({"ready": True})  # its handlers are set
    for line in sys.stdin.buffer:
        if stop.is_set():
            break
        try:
            msg = json.loads(line)
            n = int(msg["n"])
            group = [(str(op), str(run), [str(s) for s in shas], None) for op, run, shas in msg["round"]]
        except (ValueError, TypeError, KeyError):
            continue  # never from our parent; a round not understood is left to its notes
        done = compact_round(ctx, group)
        reply = {"n": n, "failed": done is None,
                 "busy": [op for op, what in (done or {}).items() if KEPT_BUSY in what.values()]}
        if heard:
            heard = _reply(reply)  # the parent gone: the rounds given still done, unanswered
    return 0


if __name__ == "__main__":
    sys.exit(main())
