"""Review R16 F6: Ctrl-C at purge's (or restore's) [y/N] question said "an operation it began is
settled by the next start or `tb-footprint recover …`" — nothing had begun. It now says it was
interrupted before anything changed. A real terminal (a pty) on stdin, SIGINT when the question
is on screen."""
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from helpers_cli import cli_env
from test_issue29_gaps_purge import reduced_copies


def _interrupt_at_question(*argv):
    master, slave = os.openpty()
    p = subprocess.Popen([sys.executable, "-m", "tb_footprint_plugin.cli", *map(str, argv)], env=cli_env(),
                         stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 120
    try:
        while b"[y/N]" not in seen and time.monotonic() < deadline and p.poll() is None:
            ready, _, _ = select.select([p.stderr, p.stdout], [], [], 1.0)
            for f in ready:
                seen += os.read(f.fileno(), 65536)
        assert b"[y/N]" in seen, seen.decode(errors="replace")
        time.sleep(0.3)  # at the prompt's read
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()
    return p.returncode, (seen + out + err).decode(errors="replace")


@pytest.mark.parametrize("verb", [("purge",), ("restore", "--all")])
def test_ctrl_c_at_the_question_says_nothing_changed(tmp_path, verb):
    logdir = reduced_copies(tmp_path, ("a",))
    rc, text = _interrupt_at_question(verb[0], logdir, *verb[1:])
    assert rc == 130, text
    assert "nothing was changed" in text and "settled by the next start" not in text, text


@pytest.mark.parametrize("verb", [("reduce",), ("retire", "--runs", "train")])
def test_ctrl_c_at_reduces_and_retires_question_says_nothing_changed(tmp_path, verb):
    """Review R17 F17: reduce and retire said an operation may need settling, though nothing had
    begun; the one question (``cli._consent``) now says it for every verb."""
    from conftest import copy_real
    from tb_footprint_plugin import api

    logdir = tmp_path / "ld"
    copy_real("tf/keras_profiled/train", logdir / "train")
    rc, text = _interrupt_at_question(verb[0], logdir, *verb[1:], "--quiet-period", "0")
    assert rc == 130, text
    assert "interrupted at the question; nothing was changed" in text and "settled by the next start" not in text, text
    assert api.operations(str(logdir)) == []
