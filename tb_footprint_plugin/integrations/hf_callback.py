"""Hugging Face ``Trainer``: reduce the run ``trainer.train()`` wrote once its writer is closed.

Transformers' ``TensorBoardCallback`` closes its ``SummaryWriter`` in ``on_train_end``. The
Trainer runs its reporting callbacks before the ones a user passes, so by this callback's
``on_train_end`` the writer is normally closed; if not, the reduction waits for it in a
background thread (``wait()``).
"""
from __future__ import annotations

import os
from typing import Iterable, Optional, Sequence

from transformers import TrainerCallback

from tb_footprint_plugin.integrations.job import JobCallback


def _writer_dir(args) -> tuple:
    """(job dir, default logdir) from where ``TensorBoardCallback`` writes."""
    env = os.environ.get("TENSORBOARD_LOGGING_DIR")
    d = os.path.expanduser(env) if env else getattr(args, "logging_dir", None)
    if d:  # <root>/<run>: the run is the folder the writer was given
        d = os.path.abspath(d)
        return d, os.path.dirname(d)
    # transformers 5: <output_dir>/runs/<date>_<host>, the date picked when the writer opens
    d = os.path.abspath(os.path.join(args.output_dir, "runs"))
    return d, d


class FootprintHFCallback(JobCallback, TrainerCallback):
    """Reduce the run(s) the Trainer's TensorBoard writer (and any torch profiler trace written
    under the same folders) produced, when training ends.

    ``logdir``: the folder TensorBoard is started on (default: the parent of the writer's
    folder, i.e. ``<output_dir>/runs``). ``job_dirs``: the writers' folders if not the
    TensorBoardCallback's. Defaults: ``dry_run=True`` logs the plan; ``policy="lossless"``. A
    failure is logged, never raised; ``outcome``/``wait()`` give the ``JobOutcome``.
    """

    def __init__(self, logdir: Optional[str] = None, *, job_dirs: Optional[Iterable[str]] = None,
                 policy="lossless", dry_run: bool = True, backup_dir: Optional[str] = None,
                 close_timeout: float = 120.0, verify_backends: Optional[Sequence[str]] = None, **kwargs):
        self._logdir = logdir
        self._job_dirs = [os.path.abspath(d) for d in job_dirs] if job_dirs else None
        self._start_job(logdir, policy=policy, dry_run=dry_run, backup_dir=backup_dir,
                        close_timeout=close_timeout, verify_backends=verify_backends, **kwargs)

    def on_train_end(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        try:
            job_dir, root = _writer_dir(args)
            self.job.job_dirs = self._job_dirs or [job_dir]
            self.job.logdir = os.path.abspath(self._logdir) if self._logdir else root
        except Exception as e:  # never into the training job
            self.job.error(f"could not find the Trainer's log directory: {type(e).__name__}: {e}")
            return
        self.job.finish()
