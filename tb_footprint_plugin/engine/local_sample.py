"""The check page's sample on a local logdir (``LocalEngine.sample``): where its bytes come from
for the one rule of ``engine.sample``. Only event files directly in the run directory (as
TensorBoard reads them), inside the logdir, and vault blobs named by their sha256 are ever read;
a compressed blob is decompressed into a scratch folder of the vault, swept with this process.
"""
from __future__ import annotations

import contextlib
import os
from typing import Dict, Iterator, List

from tb_footprint_plugin.engine import sample as one_rule
from tb_footprint_plugin.engine.manifest import run_prefix
from tb_footprint_plugin.engine.catalogue import find_manifest
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.engine.sample import SampleUnavailable
from tb_footprint_plugin.storage import scratch
from tb_footprint_plugin.storage.paths import is_sha256, is_within, real_within


class LocalSource(one_rule.Source):
    """A local logdir's run folder and its vault's blobs."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.run_dir = ""

    def manifest(self, op_id: str) -> dict:
        return find_manifest(self.ctx, op_id)

    def find_run(self, m: dict, op_id: str) -> str:
        run = m.get("run")
        run_dir = os.path.normpath(os.path.join(self.ctx.logdir, run if isinstance(run, str) else "\0"))
        if not isinstance(run, str) or not is_within(run_dir, self.ctx.logdir) or not os.path.isdir(run_dir):
            raise SampleUnavailable("not_found", f"the run of {op_id} is not in the logdir")
        self.run_dir = run_dir
        return run_prefix(os.path.relpath(run_dir, self.ctx.logdir))

    def current(self, prefix: str) -> Dict[str, str]:
        out = {}
        for n in sorted(os.listdir(self.run_dir)):
            p = os.path.join(self.run_dir, n)
            if one_rule.direct_event(prefix + n, prefix) and os.path.isfile(p) and not os.path.islink(p) \
                    and real_within(p, self.ctx.logdir):
                out[prefix + n] = p
        return out

    def holds(self, f: dict) -> bool:
        sha = f.get("sha256")
        return is_sha256(sha) and self.ctx.vault.has_blob(sha)

    @contextlib.contextmanager
    def paths(self, now: Dict[str, str], backups: Dict[str, dict]) -> Iterator[List[str]]:
        # the sample reader takes paths: a compressed backup is decompressed into a scratch
        # folder of the vault (swept with this process), a plain one is read where it is
        with scratch.scratch("sample", self.ctx.vault.tmp) as tmp:
            yield [self.ctx.vault.materialise(backups[k]["sha256"], tmp) if k in backups else now[k]
                   for k in one_rule.in_order(now, backups)]


def sample(ctx: Context, op_id: str, side: str, plugin: str, tag: str, step: int, index: int = 0) -> tuple:
    """``(bytes, content type)`` of sample ``index`` of ``tag`` at ``step`` (``plugin``: images or
    audio) of operation ``op_id``'s run, ``before`` or ``after`` (``engine.sample.sample``)."""
    return one_rule.sample(LocalSource(ctx), op_id, side, plugin, tag, step, index)


__all__ = ["LocalSource", "SampleUnavailable", "sample"]
