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

from typing import Any

from recipelab.lazy import lazy_export

EXPORTS = {"TrialResult": "recipelab.trainer.spec", "TrialSpec": "recipelab.trainer.spec",
           "bits_per_byte": "recipelab.trainer.evaluate", "build_model": "recipelab.trainer.core",
           "build_optimizer": "recipelab.trainer.core", "load_dataset": "recipelab.trainer.data",
           "run_trial": "recipelab.trainer.loop", "train_step": "recipelab.trainer.core"}
__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    """The entry points, imported on first use."""
    return lazy_export(__name__, EXPORTS, name)
