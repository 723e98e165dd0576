"""The record's one definition of a trained trial, which budgets, status and report share."""

from __future__ import annotations

import pytest

from recipelab.trajectory.record import TrialRecord


@pytest.mark.parametrize(("status", "trained"), [
    ("complete", True), ("failed", True), ("rejected", False), ("queued", False),
    ("running", False), ("interrupted", False)])
def test_a_trial_is_trained_when_it_completed_or_failed(status: str, trained: bool) -> None:
    record = TrialRecord.model_validate({"campaign": "c", "trial_id": "p0000", "status": status})
    assert record.trained is trained
    assert record.to_row().trained is trained, "the table's rows answer the same"
