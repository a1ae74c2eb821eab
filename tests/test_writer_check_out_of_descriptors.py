"""Review R12 H1: the writer check's walk (``engine.standing.walk_at``) holds a folder's descriptor
while names of it are left, so a "comb" of folders (each level a subfolder, then a name after it)
holds one a level. Past the process's descriptor limit (a TensorBoard process reading many event
files sits near it) the next folder's open failed EMFILE and was taken as "a name, not a way":
everything below went unchecked, and a process writing a file down there was not seen. A folder
that cannot be opened for want of descriptors now fails the look: the run is refused, never
taken as free of writers."""
import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(r'''
    import os, resource, sys, types
    from tb_footprint_plugin.engine import preflight
    from tb_footprint_plugin.engine.context import Context, TransactionError
    logdir = sys.argv[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    try:
        preflight.check_writers(Context(logdir), types.SimpleNamespace(run="r"))
    except TransactionError as e:
        print("REFUSED", e.code, e)
        sys.exit(0)
    print("NO WRITER FOUND")
''')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _comb(logdir, depth):
    d = logdir / "r"
    d.mkdir(parents=True)
    (d / "events.out.tfevents.1.h").write_bytes(b"")
    for _ in range(depth):
        (d / "zz_note").write_bytes(b"x")  # a name after the subfolder: its folder's descriptor is held
        d = d / "a"
        d.mkdir()
    return d / "events.out.tfevents.2.h"


def _check(logdir):
    out = subprocess.run([sys.executable, "-c", CHILD, str(logdir)], capture_output=True, text=True,
                         cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)
    return out.stdout + out.stderr[-2000:]


def test_a_writer_deep_in_a_comb_past_the_descriptor_limit_is_never_missed(tmp_path):
    deep = _comb(tmp_path / "logs", 400)
    deep.write_bytes(b"")
    writer = subprocess.Popen([sys.executable, "-c", "import sys,time; f=open(sys.argv[1],'ab'); "
                               "print('open', flush=True); time.sleep(60)", str(deep)], stdout=subprocess.PIPE)
    try:
        assert writer.stdout.readline().strip() == b"open"
        said = _check(tmp_path / "logs")
        assert said.startswith("REFUSED"), said
        assert "being written" in said or "Too many open files" in said, said
    finally:
        writer.kill()
        writer.wait()


def test_a_comb_within_the_limit_with_no_writer_passes(tmp_path):
    _comb(tmp_path / "logs", 100).write_bytes(b"")
    assert _check(tmp_path / "logs").startswith("NO WRITER FOUND")
