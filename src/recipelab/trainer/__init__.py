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

__all__ = ["TrialResult", "TrialSpec", "bits_per_byte", "build_model", "build_optimizer",
           "load_dataset", "run_trial", "train_step"]


def __getattr__(name: str) -> Any:
    """The entry points, imported on first use."""
    if name == "run_trial":
        from recipelab.trainer.loop import run_trial

        return run_trial
    if name == "TrialSpec":
        from recipelab.trainer.spec import TrialSpec

        return TrialSpec
    if name == "TrialResult":
        from recipelab.trainer.spec import TrialResult

        return TrialResult
    if name == "load_dataset":
        from recipelab.trainer.data import load_dataset

        return load_dataset
    if name == "bits_per_byte":
        from recipelab.trainer.evaluate import bits_per_byte

        return bits_per_byte
    if name == "build_model":
        from recipelab.trainer.core import build_model

        return build_model
    if name == "build_optimizer":
        from recipelab.trainer.core import build_optimizer

        return build_optimizer
    if name == "train_step":
        from recipelab.trainer.core import train_step

        return train_step
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
