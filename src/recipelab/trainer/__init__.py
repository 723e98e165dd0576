"""The trainer: one trial in its own process, through the one training core.

Entry points:

- :func:`~recipelab.trainer.loop.run_trial` trains a
  :class:`~recipelab.trainer.spec.TrialSpec` and always returns a
  :class:`~recipelab.trainer.spec.TrialResult` (``python -m recipelab.trainer`` is the
  process a runner starts);
- :mod:`recipelab.trainer.core`: the model, optimizer, learning rate and step that trials
  and the long run (:mod:`recipelab.longrun`) share;
- :func:`~recipelab.trainer.data.load_dataset` and
  :func:`~recipelab.trainer.evaluate.bits_per_byte`: the data and the one score.

The names are loaded on first use: a spec or a result is read without importing torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {"run_trial": "loop", "TrialSpec": "spec", "TrialResult": "spec",
            "load_dataset": "data", "bits_per_byte": "evaluate", "build_model": "core",
            "build_optimizer": "core", "train_step": "core"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
