"""Footprint for TensorBoard: see, plan, and safely reduce what fills a TensorBoard logdir.

The public API is re-exported lazily so that ``import tb_footprint_plugin`` (done by
TensorBoard through the entry point's parent package) stays cheap and cannot fail on an
optional dependency.
"""
from tb_footprint_plugin.version import __version__

_API = {
    "scan": "tb_footprint_plugin.scan",
    "LogdirFootprint": "tb_footprint_plugin.model",
    "RunFootprint": "tb_footprint_plugin.model",
    "plan": "tb_footprint_plugin.api",
    "reduce_logdir": "tb_footprint_plugin.api",
    "verify": "tb_footprint_plugin.api",
    "restore": "tb_footprint_plugin.api",
    "purge": "tb_footprint_plugin.api",
    "status": "tb_footprint_plugin.api",
    "history": "tb_footprint_plugin.api",
}

__all__ = ["__version__", *_API]


def __getattr__(name):
    module = _API.get(name)
    if module is None:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(module), name)
