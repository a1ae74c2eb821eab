"""Small runs of what a training job leaves (scalars, a histogram, one xprof session), written by the
synth writers, for the tests that measure what a scan, a plan or the vault costs per run."""
import os

from tb_footprint_plugin import synth
from tb_footprint_plugin.engine.vault import Vault

#: the scalar tags of a small run
TAGS = ("loss", "accuracy", "learning_rate", "grad_norm")
#: the event files' wall time; an aged run is dated ``age`` seconds before it
WRITTEN_AT = 1_700_000_000


def write_small_run(run: str, i: int = 0, steps: int = 50, tags=TAGS, n_events: int = 30) -> None:
    """One small run in ``run``: ``tags`` as scalars over ``steps`` steps, a histogram every 10
    steps and one xprof session of ``n_events`` events; its values (and the session's seed) depend
    on ``i`` so that runs written with different ``i`` differ."""
    with synth.EventWriter(run, timestamp=WRITTEN_AT) as w:
        for step in range(steps):
            for tag in tags:
                w.scalar(tag, step, 1.0 / (step + 1 + i))
            if step % 10 == 0:
                w.histogram("layer_0/weights", step, [(k - 5.0, k - 4.0, float(k + i)) for k in range(10)])
    synth.write_profile_session(run, synth.session_name_for(WRITTEN_AT + 600), "host", n_events=n_events, seed=i)


def write_loss_run(run_dir, seed: int) -> None:
    """A run of 40 ``loss`` scalars and one xprof session of 400 events with its caches (its values
    and the session's seed from ``seed``): what the tests of unreadable folders and backups reduce."""
    import math

    with synth.EventWriter(str(run_dir)) as w:
        for s in range(40):
            w.scalar("loss", s, math.exp(-s / 15.0) + 0.01 * seed)
    synth.write_profile_session(str(run_dir), synth.session_name_for(synth.DEFAULT_TIMESTAMP), n_events=400,
                                with_caches=True, seed=seed)


def write_image_run(run_dir) -> None:
    """A run of 200 ``loss`` scalars and ``h`` histograms and 30 8x8 ``img`` images (PNG seed =
    step), dated long ago (2001): archive rewrites its event file and drops some of the images."""
    with synth.EventWriter(str(run_dir)) as w:
        for s in range(200):
            w.scalar("loss", s, 1.0 / (s + 1))
            w.histogram("h", s, [((i * 37 + s) % 1000) / 1000.0 for i in range(200)], buckets=100)
        for s in range(30):
            w.image("img", s, synth.make_png(8, 8, seed=s), 8, 8)
    for dp, _, fs in os.walk(str(run_dir)):
        for f in fs:
            os.utime(os.path.join(dp, f), (1_000_000_000, 1_000_000_000))


def write_notes_runs(root, runs=("a", "b"), note_bytes: int = 500) -> None:
    """Runs of 20 ``loss`` scalars and a ``notes.txt`` of ``note_bytes`` random bytes each, at
    ``root/<run>``: what the tests of retired runs' purges retire."""
    for name in runs:
        with synth.EventWriter(os.path.join(str(root), name)) as w:
            for step in range(20):
                w.scalar("loss", step, 1.0 / (step + 1))
        with open(os.path.join(str(root), name, "notes.txt"), "wb") as f:
            f.write(os.urandom(note_bytes))


def read_tree(root: str) -> dict:
    """{path relative to ``root``: bytes} of every file below it."""
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def age_tree(root, mtime: float) -> None:
    """Date every file and folder below ``root`` at ``mtime``."""
    for dirpath, dirs, names in os.walk(root):
        for name in names + dirs:
            os.utime(os.path.join(dirpath, name), (mtime, mtime))


def small_run_template(root: str) -> dict:
    """One small run's files (40 steps, a 20-event xprof session) written below ``root``: {rel: bytes}."""
    run = os.path.join(root, "template")
    write_small_run(run, steps=40, n_events=20)
    return read_tree(run)


def copy_runs(root, files: dict, n: int, mtime=None) -> str:
    """``n`` byte copies of a run's ``files`` at ``root/expNN/runNNNNN`` (100 a group), each file
    dated ``mtime`` when given; returns ``root``."""
    for i in range(n):
        for rel, data in files.items():
            p = os.path.join(root, f"exp{i // 100:02d}", f"run{i:05d}", rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(data)
            if mtime is not None:
                os.utime(p, (mtime, mtime))
    return str(root)


def aged_small_runs(root, n: int, first: int = 0, tags=TAGS, age: float = 3 * 86400) -> str:
    """Small runs ``exp/run<first> .. exp/run<first+n-1>`` (each its own values), then everything
    below ``root`` dated ``age`` seconds before the event files' wall time (past any quiet period)."""
    for i in range(first, first + n):
        write_small_run(os.path.join(root, f"exp/run{i:03d}"), i, tags=tags)
    age_tree(root, WRITTEN_AT - age)
    return str(root)


def count_manifest_reads(monkeypatch) -> list:
    """Every ``Vault.read_manifest`` call from now on (the one reader of a manifest): ``[n]``."""
    reads = [0]
    real = Vault.read_manifest

    def counted(self, op_id):
        reads[0] += 1
        return real(self, op_id)
    monkeypatch.setattr(Vault, "read_manifest", counted)
    return reads
