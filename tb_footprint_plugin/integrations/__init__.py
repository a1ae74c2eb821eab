"""End-of-training reductions: callbacks for Keras, PyTorch Lightning and the Hugging Face
``Trainer``, and ``reduce_when_done`` for hand-written loops.

Each framework is imported only when its callback is first used, so none of them is a
dependency: ``from tb_footprint_plugin.integrations import FootprintKerasCallback`` imports
Keras, ``reduce_when_done`` imports no framework.
"""
from tb_footprint_plugin.integrations.job import JobCode, JobOutcome, JobReducer, reduce_when_done

_LAZY = {
    "FootprintKerasCallback": "tb_footprint_plugin.integrations.keras_callback",
    "FootprintLightningCallback": "tb_footprint_plugin.integrations.lightning_callback",
    "FootprintHFCallback": "tb_footprint_plugin.integrations.hf_callback",
}

__all__ = ["JobCode", "JobOutcome", "JobReducer", "reduce_when_done", *_LAZY]


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(module), name)
