"""Footprint for TensorBoard: see, plan, and safely reduce what fills a TensorBoard logdir.

The public API is re-exported lazily so that ``import tb_footprint_plugin`` (done by
TensorBoard through the entry point's parent package) stays cheap and cannot fail on an
optional dependency.

Three public verbs share their name with a subpackage (``scan``, ``plan``, ``verify``). Python's
import system sets a subpackage as an attribute of its parent when it is first imported, which
would shadow the verb: ``fp.scan(logdir)`` would call a module. The package's module class
therefore refuses to store a submodule under a public verb's name, so ``__getattr__`` always
answers with the function whatever was imported before. Inside the package, import such
subpackages' modules with ``from tb_footprint_plugin.scan import categories`` (never
``import tb_footprint_plugin.scan.categories as ...``, which goes through the attribute).
"""
import sys
import types

from tb_footprint_plugin.lazy import exports
from tb_footprint_plugin.version import __version__

_API = {
    "scan": "tb_footprint_plugin.scan.scanner",
    "LogdirFootprint": "tb_footprint_plugin.scan.model",
    "RunFootprint": "tb_footprint_plugin.scan.model",
    "plan": "tb_footprint_plugin.api",
    "reduce_logdir": "tb_footprint_plugin.api",
    "verify": "tb_footprint_plugin.api",
    "restore": "tb_footprint_plugin.api",
    "purge": "tb_footprint_plugin.api",
    "status": "tb_footprint_plugin.api",
    "history": "tb_footprint_plugin.api",
    "reduce_when_done": "tb_footprint_plugin.integrations.job",
    "retire": "tb_footprint_plugin.api",
    "retire_plan": "tb_footprint_plugin.api",
    "retire_rule": "tb_footprint_plugin.api",
    "retired": "tb_footprint_plugin.api",
    "Interrupted": "tb_footprint_plugin.api",  # a reduce stopped by Ctrl-C, after it rolled back
}

__all__ = ["__version__", *_API]


__getattr__, __dir__ = exports(__name__, {name: (module, name) for name, module in _API.items()}, globals())


class _Package(types.ModuleType):
    """This package's module type: a submodule never shadows a public verb of the same name."""

    def __setattr__(self, name: str, value) -> None:
        if name in _API and isinstance(value, types.ModuleType):
            return  # the import system binding e.g. the ``scan`` subpackage; the verb wins
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
