"""Campaigns teach the memory model: every completed trial adds its measured peak.

The fitted line (:mod:`recipelab.guardrails.memory_fit`) then covers the families a campaign
explored, not only those an envelope sweep measured, and the next campaign's guardrail
predicts their OOMs without trying them. A failure to update costs a warning, never a trial.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from recipelab.guardrails import DeviceInfo
from recipelab.guardrails.memory_fit import (
    MemoryModel,
    MemoryModelError,
    micro_batch_tokens,
    record_peaks,
)
from recipelab.recipe import Recipe
from recipelab.trajectory.record import TrialRecord


def learn_peak(record: TrialRecord, device: DeviceInfo, log: Any,
               path: Path | None = None) -> MemoryModel | None:
    """Add ``record``'s measured peak memory to ``device``'s memory model (the file at
    ``path``, default :func:`~recipelab.guardrails.memory_fit.memory_model_path`), if it has
    one; the model as written, for the guardrail, or None when nothing was written."""
    peak = record.measured.peak_memory_bytes
    if record.status != "complete" or not peak:
        return None
    try:
        recipe = Recipe.model_validate(record.recipe)
        return record_peaks(recipe, device, [(micro_batch_tokens(recipe), int(peak))], path)
    except (MemoryModelError, OSError, ValidationError) as error:
        log.warning("memory_model_not_updated", trial_id=record.trial_id, error=str(error))
        return None
