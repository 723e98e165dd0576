"""Campaigns teach the memory model: every completed trial adds its measured peak.

The fitted line (:mod:`recipelab.guardrails.memory_fit`) then covers the families a campaign
explored, not only those an envelope sweep measured, and the next campaign's guardrail
predicts their OOMs without trying them. A failure to update costs a warning, never a trial.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from recipelab.guardrails import DeviceInfo
from recipelab.guardrails.memory_fit import MemoryModelError, micro_batch_tokens, record_peaks
from recipelab.recipe import Recipe
from recipelab.trajectory.record import TrialRecord


def learn_peak(record: TrialRecord, device: DeviceInfo, log: Any) -> None:
    """Add ``record``'s measured peak memory to ``device``'s memory model, if it has one."""
    peak = record.metrics.get("peak_memory_bytes")
    if record.status != "complete" or not peak:
        return
    try:
        recipe = Recipe.model_validate(record.recipe)
        record_peaks(recipe, device, [(micro_batch_tokens(recipe), int(peak))])
    except (MemoryModelError, OSError, ValidationError) as error:
        log.warning("memory_model_not_updated", trial_id=record.trial_id, error=str(error))
