"""PyTorch Lightning: reduce the run a ``Trainer.fit`` wrote once its loggers and profiler closed.

Lightning finalizes its loggers (closing ``TensorBoardLogger``'s ``SummaryWriter``) and lets its
profiler export the last trace *after* every callback hook of ``fit``, so the reduction waits in
a background thread until the trainer reports ``finished`` and the files are closed; ``wait()``
returns the outcome. Works with ``lightning`` (``lightning.pytorch``) and the older
``pytorch_lightning`` package: ``FootprintLightningCallback`` derives from whichever is
installed (``lightning`` first); ``make_callback_class(base)`` builds one for another base.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

from tb_footprint_plugin.integrations.job import JobCallback


def _job_dirs(trainer, logdir: Optional[str]):
    dirs, roots = [], []
    for lg in getattr(trainer, "loggers", None) or []:
        d = getattr(lg, "log_dir", None)
        if isinstance(d, str) and type(lg).__name__ == "TensorBoardLogger":
            dirs.append(os.path.abspath(d))
            roots.append(os.path.abspath(lg.root_dir))
    if not dirs and isinstance(getattr(trainer, "log_dir", None), str):
        dirs.append(os.path.abspath(trainer.log_dir))
    prof_dir = getattr(getattr(trainer, "profiler", None), "dirpath", None)
    if prof_dir:
        dirs.append(os.path.abspath(str(prof_dir)))
    root = os.path.abspath(logdir) if logdir else (roots[0] if roots else (dirs[0] if dirs else None))
    return root, sorted(set(dirs))


def make_callback_class(base):
    """A Footprint callback class deriving from ``base`` (a Lightning ``Callback`` class)."""

    class FootprintLightningCallback(JobCallback, base):
        """Reduce the runs this ``fit`` wrote (its TensorBoardLogger's ``log_dir`` and the
        profiler's ``dirpath``) when it ends. ``logdir``: the folder TensorBoard is started on
        (default: the logger's ``root_dir``). Defaults: ``dry_run=True`` logs the plan;
        ``policy="lossless"``. A failure is logged, never raised; ``outcome``/``wait()``."""

        def __init__(self, logdir: Optional[str] = None, *, policy="lossless", dry_run: bool = True,
                     backup_dir: Optional[str] = None, close_timeout: float = 120.0,
                     verify_backends: Optional[Sequence[str]] = None, **kwargs):
            super().__init__()
            self._logdir = logdir
            self._failed: Optional[str] = None
            self._start_job(logdir, policy=policy, dry_run=dry_run, backup_dir=backup_dir,
                            close_timeout=close_timeout, verify_backends=verify_backends, **kwargs)

        def on_exception(self, trainer, pl_module, exception):
            # Lightning calls no teardown hook after an exception: settle the outcome here
            self._failed = f"{type(exception).__name__}: {exception}"
            if trainer.is_global_zero:
                self.job.finish(training_failed=self._failed)

        def teardown(self, trainer, pl_module, stage):
            if stage != "fit" or not trainer.is_global_zero:
                return
            try:
                self.job.logdir, self.job.job_dirs = _job_dirs(trainer, self._logdir)
            except Exception as e:  # never into the training job
                self.job.error(f"could not find the job's log directories: {type(e).__name__}: {e}")
                return
            failed = self._failed or (None if not getattr(trainer, "interrupted", False) else "interrupted")
            state = trainer.state

            def ready() -> bool:
                # set once fit returned: loggers finalized, the profiler's last trace exported
                return getattr(state.status, "value", state.status) != "running"

            self.job.finish(ready=ready, defer=True, training_failed=failed)

    return FootprintLightningCallback


def _default_base():
    try:
        from lightning.pytorch import Callback
    except ImportError:
        from pytorch_lightning import Callback
    return Callback


FootprintLightningCallback = make_callback_class(_default_base())
