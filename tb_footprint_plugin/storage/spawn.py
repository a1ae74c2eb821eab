"""Helper processes spawned out of the terminal's reach (review R16 F13, and the CI of ecdb86f).

A terminal's Ctrl-C sends SIGINT to its whole foreground process group. The verification's helper
processes (TensorBoard's Rust data server, the Python loader child) are started in a session of
their own (``start_new_session``), but the child leaves our process group only at its ``setsid``,
after the fork: a Ctrl-C in between (CPython restores the child's signal mask before it calls
``setsid``) killed it, and its reader's failure was said as "verification failed" where the
command was interrupted. ``popen_out_of_reach`` spawns it from a short-lived thread that blocks
the terminal's signals first: the child inherits that mask through ``exec``, so a signal sent in
the window stays pending and is never delivered, and once in its own session no terminal's signal
reaches it. The helpers are stopped by us (SIGKILL, their stdin closing), never by a terminal's
signal.

Every Python child of ours starts through ``python_child`` (review R9 F1, R11 G8/G9): ``python -m
mod`` (and ``-c``) put the CURRENT folder first on ``sys.path``, so a ``tb_footprint_plugin/`` or a
``json.py`` planted in a shared logdir the user stands in ran as that user. The child runs isolated
(``-I``) on the entries of this process's own ``sys.path`` that lead where this interpreter's
modules are installed or that ``PYTHONPATH`` names (``child_path``; the package root among them),
and starts in ``/``.

Why a thread of its own, not the caller's mask blocked and restored (review R7 F1): Python runs
signal handlers in the main thread between bytecodes, and ``signal.pthread_sigmask`` is a Python
wrapper; a handler that raises (the CLI's Ctrl-C and SIGTERM handlers do) between the block and the
restore left the caller's thread with those signals blocked for good, and every thread and child it
started later with them. The spawning thread never runs a handler and dies with its mask, so no
thread's mask is ever restored and none can leak."""
from __future__ import annotations

import functools
import json
import os
import signal
import site
import subprocess
import sys
import sysconfig
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

#: what a terminal sends its foreground process group (Ctrl-C, Ctrl-\, Ctrl-Z)
TERMINAL_SIGNALS = frozenset({signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP})


#: the boot of a Python child (``python_child``), run isolated (``-I``: no current folder, no
#: ``PYTHON*`` variables, no user site-packages on ``sys.path``, so the ``json`` it imports is the
#: standard library's): ``sys.path`` becomes the one its parent gave, then the child's own isolated
#: entries it lacks (a ``sitecustomize``'s, as EasyBuild's Python adds its modules' folders: review
#: R15 S2), then ``module.function(argv)``, its return the exit status
_BOOT = ("import sys, json; g = json.loads(sys.argv[1]); sys.path[:] = g + [e for e in sys.path if e not in g]; "
         "from {module} import {function} as f; sys.exit(f(sys.argv[2:]))")


#: the folder this package is imported from (``<root>/tb_footprint_plugin/storage/spawn.py``)
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _pth_entries(site_dir: str) -> List[str]:
    """The folders the ``.pth`` files of ``site_dir`` add (``site``'s rule: a line naming a
    folder, relative to ``site_dir`` or absolute; ``import`` lines and comments skipped)."""
    out: List[str] = []
    try:
        names = sorted(n for n in os.listdir(site_dir) if n.endswith(".pth"))
    except OSError:
        return out
    for n in names:
        try:
            with open(os.path.join(site_dir, n), encoding="utf-8", errors="replace") as f:
                lines = f.read(1 << 20).splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.strip()
            if line and not line.startswith(("#", "import ", "import\t")):
                out.append(os.path.normpath(os.path.join(site_dir, line)))
    return out


@functools.lru_cache(maxsize=1)
def _installed_roots() -> Tuple[Tuple[str, ...], frozenset]:
    """Where this interpreter's own modules are installed: (folders whose entries are kept with
    all below them: the standard library and site-packages, ``sysconfig``'s and ``site``'s, never
    '/'; entries kept as they are: the standard library's zip, the user site-packages and what the
    ``.pth`` files of every site folder add, an editable install's checkout among them)."""
    # the library folders only, never a whole prefix: '/usr' or a '--prefix=$HOME' would keep a
    # start folder under it (review R15 S3)
    paths = sysconfig.get_paths()
    under = {os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib")
             if isinstance(paths.get(k), str) and paths[k].startswith("/")}
    sites: List[str] = []
    try:
        sites += site.getsitepackages()
    except AttributeError:  # an old virtualenv's site module
        pass
    under.update(os.path.realpath(d) for d in sites if isinstance(d, str) and d.startswith("/"))
    under.discard("/")
    user = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    exact = {os.path.realpath(user)} if isinstance(user, str) else set()
    # the standard library's zip beside its folder (``python311.zip``)
    stdlib = paths.get("stdlib")
    if isinstance(stdlib, str) and stdlib.startswith("/"):
        exact.add(os.path.realpath(os.path.join(os.path.dirname(stdlib), "python%d%d.zip" % sys.version_info[:2])))
    for d in sites + ([user] if isinstance(user, str) else []):
        exact.update(os.path.realpath(e) for e in _pth_entries(d))
    return tuple(sorted(under)), frozenset(exact)


def _started_pythonpath() -> str:
    """The ``PYTHONPATH`` this process was started with (Linux: its environment at ``exec``,
    ``/proc/self/environ``; elsewhere the environment as this module is imported): the one whose
    entries are on ``sys.path``, not one set since."""
    try:
        with open("/proc/self/environ", "rb") as f:
            for item in f.read(1 << 22).split(b"\0"):
                if item.startswith(b"PYTHONPATH="):
                    return os.fsdecode(item[len(b"PYTHONPATH="):])
            return ""
    except OSError:
        return os.environ.get("PYTHONPATH", "")


@functools.lru_cache(maxsize=1)
def _told() -> frozenset:
    """The absolute entries of the PYTHONPATH this process started with (an HPC ``module load``'s),
    resolved; read once, when a child is first started."""
    return frozenset(os.path.realpath(p) for p in _started_pythonpath().split(os.pathsep) if p.startswith("/"))


def _installed(real: str) -> bool:
    """Whether ``real`` (a ``sys.path`` entry resolved once by the caller: judged as it will be
    given, review R15 S1) is where this interpreter's modules are installed (``_installed_roots``),
    or one the ``PYTHONPATH`` this process started with named (the user's own setting, an HPC
    ``module load``'s)."""
    under, exact = _installed_roots()
    return real in exact or real in _told() or any(real == u or real.startswith(u.rstrip("/") + "/") for u in under)


def child_path() -> List[str]:
    """The ``sys.path`` a child of ours runs on: this process's own entries that are where this
    interpreter's modules are installed (the standard library, site-packages, what their ``.pth``
    files add, the user site-packages) or that ``PYTHONPATH`` names (an HPC ``module load``'s:
    review R11's note on 5a25d36), in their order (an installed package's site-packages after the
    standard library, review R12), and the package root first when no entry holds it (a checkout).

    Nothing else: not the folder a script or ``python -m`` put first (the folder the process
    started in: a TensorBoard started as ``python -m tensorboard.main --logdir .`` or a Jupyter
    kernel in a shared logdir, where a package planted since ran in every child, review R13 F1,
    R14 G3 — whatever the flags or a ``chdir`` since), nor an entry inserted at run time, nor a
    relative one. An entry is judged by where it leads (``realpath``), never by the current folder,
    so standing in site-packages keeps it (R14 G4)."""
    path: List[str] = []
    for p in sys.path:
        if not (isinstance(p, str) and p.startswith("/")):
            continue
        # resolved once, then judged and given as resolved: an entry judged by where a link led
        # and given by its name could be swapped to another folder in between (review R15 S1)
        real = _PACKAGE_ROOT if p == _PACKAGE_ROOT else os.path.realpath(p)
        if (real == _PACKAGE_ROOT or _installed(real)) and real not in path:
            path.append(real)
    return path if _PACKAGE_ROOT in path else [_PACKAGE_ROOT] + path


def python_child(module: str, function: str, args: Sequence[str] = ()) -> List[str]:
    """The command line of a Python child of ours: ``module.function(argv)`` (``argv`` the list
    ``args``; its return the exit status), importing this very package from where this process did
    (a checkout, a wheel) and everything else as this process does (``child_path``), never from
    the current folder nor from a ``PYTHONPATH`` set since (review R9 F1, R11 G8/G9). Start it with
    ``cwd="/"``. ``OSError`` when there is no interpreter to start."""
    if not sys.executable or getattr(sys, "frozen", False):
        raise OSError(2, "no Python interpreter to start a child with")
    boot = _BOOT.format(module=module, function=function)
    return [sys.executable, "-I", "-c", boot, json.dumps(child_path())] + list(args)


def python_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """This process's environment for a ``python_child`` (which ignores ``PYTHON*`` itself) and
    whatever it starts, ``PYTHONPATH`` kept to its absolute entries (an empty or relative one is the
    current folder), with ``extra`` set (its ``PYTHONPATH`` kept alike)."""
    env = dict(os.environ, **(extra or {}))
    kept = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p.startswith("/")]
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        env.pop("PYTHONPATH", None)
    return env


def popen_out_of_reach(args: Any, **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(args, start_new_session=True, **kwargs)`` from a thread with the
    terminal's signals blocked (so in the child until its own session, and for life: it is
    stopped by us). The caller's signal mask is never changed. Popen's own errors (``OSError``)
    are raised here; the caller interrupted while the spawn finishes (Ctrl-C) gets its
    ``KeyboardInterrupt`` once the child it would not get is stopped."""
    made: List[subprocess.Popen] = []
    failed: List[BaseException] = []

    began, done = threading.Event(), threading.Event()

    def spawn() -> None:
        began.set()
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, TERMINAL_SIGNALS)  # this thread only, for its life
            made.append(subprocess.Popen(args, start_new_session=True, **kwargs))
        except BaseException as e:  # handed to the caller as it is
            failed.append(e)
        finally:
            done.set()

    try:
        threading.Thread(target=spawn, name="footprint-spawn", daemon=True).start()
        done.wait()
    except BaseException:
        # the spawn ends in moments: the child the caller will not get is stopped, not left behind
        # (Events, not join: a join interrupted once returns at once the next time). A second
        # interrupt here leaves it to end by itself: its stdin closes with its Popen.
        if began.wait(1.0):
            while not done.wait(0.05):
                pass
            _stop(made[0] if made else None)
        raise
    if failed:
        raise failed[0]
    return made[0]


def _stop(proc: Optional[subprocess.Popen]) -> None:
    if proc is None:
        return
    try:
        proc.kill()
        proc.wait()
    except OSError:
        pass


__all__ = ["TERMINAL_SIGNALS", "child_path", "popen_out_of_reach", "python_child", "python_env"]
