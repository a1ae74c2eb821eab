"""One image or audio sample of a run, as the dashboard shows it, read from event files.

The before/after check shows the samples side by side: the original from the backed-up event
files in the vault (and the run's unchanged ones), the reduced from the run. Event files are
read record by record (memory does not grow with file size) through TensorBoard's own loader
and ``data_compat`` migration, so legacy (TF1) and tensor summaries both work.
"""
from __future__ import annotations

from typing import Iterable, Optional

IMAGES, AUDIO = "images", "audio"

_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF8", "image/gif"),
          (b"RIFF", "audio/wav"), (b"BM", "image/bmp"))


def sniff(data: bytes) -> str:
    """The content type of a sample from its first bytes (never from anything a caller says)."""
    for magic, ctype in _MAGIC:
        if data.startswith(magic):
            return ctype
    return "application/octet-stream"


def read_sample(event_files: Iterable[str], plugin: str, tag: str, step: int, index: int) -> Optional[bytes]:
    """The ``index``-th sample of ``tag`` at ``step`` (the last record for that step wins, as in
    TensorBoard), or None when the event files hold none."""
    from tensorboard import data_compat, dataclass_compat
    from tensorboard.backend.event_processing import event_file_loader
    from tensorboard.util import tensor_util

    found = None
    initial_metadata: dict = {}
    for path in event_files:
        for event in event_file_loader.LegacyEventFileLoader(path).Load():
            if event.step != step or not event.HasField("summary"):
                continue
            for value in event.summary.value:
                if value.tag != tag:
                    continue
                value = data_compat.migrate_value(value)
                for ev in dataclass_compat.migrate_event(_wrap(event, value), initial_metadata):
                    for v in ev.summary.value:
                        if v.tag == tag and v.HasField("tensor"):
                            found = v.tensor
    if found is None:
        return None
    arr = tensor_util.make_ndarray(found)
    flat = arr.reshape(-1).tolist()
    if plugin == IMAGES:
        pos = 2 + index  # width, height, then the encoded images
    else:
        pos = index * (arr.shape[-1] if arr.ndim == 2 else 1)  # audio: [k, 2] of (encoded, label)
    if index < 0 or pos >= len(flat):
        return None
    x = flat[pos]
    return x if isinstance(x, bytes) else str(x).encode("utf-8")


def _wrap(event, value):
    from tensorboard.compat.proto import event_pb2

    e = event_pb2.Event(step=event.step, wall_time=event.wall_time)
    e.summary.value.add().CopyFrom(value)
    return e
