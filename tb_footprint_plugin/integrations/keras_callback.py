"""Keras: reduce the run a ``model.fit`` wrote once its TensorBoard writers are closed.

``keras.callbacks.TensorBoard`` writes ``<log_dir>/train`` and ``<log_dir>/validation`` (and,
with ``profile_batch``, a profile session under ``train/plugins/profile``) and closes its
writers in its own ``on_train_end``. Put this callback anywhere in the list: if it runs first,
the reduction waits in a background thread until the writers' files are closed.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

import keras

from tb_footprint_plugin.integrations.job import JobCallback


class FootprintKerasCallback(JobCallback, keras.callbacks.Callback):
    """Reduce the runs the job's ``TensorBoard`` callback wrote when training ends.

    ``tensorboard``: the ``keras.callbacks.TensorBoard`` instance (or give ``log_dir``, its
    ``log_dir``). ``logdir``: the folder TensorBoard is started on (default: that ``log_dir``,
    whose ``train``/``validation`` folders are the runs). Defaults are conservative: ``dry_run``
    logs the plan, ``policy="lossless"``. A failure never raises into ``fit``; ``outcome`` (or
    ``wait()``) gives the ``JobOutcome``.
    """

    def __init__(self, tensorboard=None, *, log_dir: Optional[str] = None, logdir: Optional[str] = None,
                 policy="lossless", dry_run: bool = True, backup_dir: Optional[str] = None,
                 close_timeout: float = 120.0, verify_backends: Optional[Sequence[str]] = None,
                 **kwargs):
        super().__init__()
        if tensorboard is None and log_dir is None:
            raise ValueError("pass the keras.callbacks.TensorBoard callback, or its log_dir")
        job_dir = os.path.abspath(str(log_dir if log_dir is not None else tensorboard.log_dir))
        self._start_job(logdir or job_dir, job_dirs=[job_dir], policy=policy, dry_run=dry_run,
                        backup_dir=backup_dir, close_timeout=close_timeout, verify_backends=verify_backends,
                        **kwargs)

    def on_train_end(self, logs=None):
        # Keras calls on_train_end only when fit returned normally (an exception skips it)
        self.job.finish()
