"""One image or audio sample of an operation's run as the dashboard showed it before the reduction
or shows it after (the check page's before/after), read from the run and the vault of a local
logdir (``LocalEngine.sample``). Only event files directly in the run directory (as TensorBoard
reads them), inside the logdir, and vault blobs named by their sha256 are ever read.
"""
from __future__ import annotations

import os
from typing import Dict

from tb_footprint_plugin.engine.catalogue import find_manifest
from tb_footprint_plugin.engine.context import Context
from tb_footprint_plugin.storage import scratch
from tb_footprint_plugin.storage.paths import is_within, real_within


class SampleUnavailable(LookupError):
    """A sample the check page asked for cannot be shown; ``code`` says why (for programs)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def sample(ctx: Context, op_id: str, side: str, plugin: str, tag: str, step: int, index: int = 0) -> tuple:
    """``(bytes, content type)`` of sample ``index`` of ``tag`` at ``step`` (``plugin``: images or
    audio) of operation ``op_id``'s run, ``before`` or ``after``; ``SampleUnavailable`` (code
    ``not_found`` / ``restored`` / ``purged``)."""
    from tb_footprint_plugin.verify import samples

    m = find_manifest(ctx, op_id)
    run = m.get("run")
    run_dir = os.path.normpath(os.path.join(ctx.logdir, run if isinstance(run, str) else "\0"))
    if not isinstance(run, str) or not is_within(run_dir, ctx.logdir) or not os.path.isdir(run_dir):
        raise SampleUnavailable("not_found", f"the run of {op_id} is not in the logdir")
    restored = bool(m.get("restored_by"))
    if side == "after" and restored:
        raise SampleUnavailable("restored", f"{op_id} was restored: the reduced run exists no more")

    def direct_events(names) -> dict:
        out = {}
        for n in names:
            p = os.path.join(run_dir, n)
            if "tfevents" in n and os.path.isfile(p) and not os.path.islink(p) and real_within(p, ctx.logdir):
                out[os.path.relpath(p, ctx.logdir)] = p
        return out

    current = direct_events(sorted(os.listdir(run_dir)))
    backups: Dict[str, str] = {}  # backed-up event files: rel → sha256
    if side == "after" or restored:
        files = current  # after a restore the run holds the originals again
    else:
        created = {c.get("path") for c in m.get("created", [])}
        files = {rel: p for rel, p in current.items() if rel not in created}
        for f in m.get("files", []):
            rel, sha = f.get("path"), f.get("sha256")
            if not (isinstance(rel, str) and isinstance(sha, str) and len(sha) == 64
                    and all(ch in "0123456789abcdef" for ch in sha)):
                continue
            if os.path.dirname(os.path.normpath(rel)) != os.path.relpath(run_dir, ctx.logdir) or "tfevents" not in rel:
                continue
            if m.get("backup_purged"):
                raise SampleUnavailable("purged", f"the backup of {op_id} was purged: the original is gone")
            if ctx.vault.has_blob(sha):
                files[rel] = None
                backups[rel] = sha
    # the sample reader takes paths: a compressed backup is decompressed into a scratch folder
    # of the vault (swept with this process), a plain one is read where it is
    with scratch.scratch("sample", ctx.vault.tmp) as tmp:
        paths = [ctx.vault.materialise(backups[k], tmp) if k in backups else files[k] for k in sorted(files)]
        data = samples.read_sample(paths, plugin, tag, int(step), int(index))
    if data is None:
        raise SampleUnavailable("not_found", f"no {plugin} sample {index} of {tag!r} at step {step} {side}")
    return data, samples.sniff(data)


__all__ = ["SampleUnavailable", "sample"]
