"""Calibration priors: the warning when they come from trials of another precision."""

from __future__ import annotations

from recipelab.agent.setup.priors import precision_mismatch
from recipelab.trajectory.calibration import Calibration, PriorTrial


def prior(precision: str, n: int) -> PriorTrial:
    return PriorTrial(source="old/trajectory.jsonl", campaign="old", trial_id=f"p{n:04d}",
                      status="complete", knobs={"precision": precision, "optimizer.lr": 1e-3},
                      edit={}, relative=1.0)


def test_priors_all_in_the_campaigns_precision_raise_no_warning() -> None:
    assert precision_mismatch(Calibration(trials=(prior("bf16", 0), prior("bf16", 1))),
                              "bf16") is None
    assert precision_mismatch(Calibration(), "fp32") is None


def test_priors_of_another_precision_warn_with_counts_and_what_to_do() -> None:
    calibration = Calibration(trials=(prior("fp32", 0), prior("fp32", 1), prior("bf16", 2)))
    warning = precision_mismatch(calibration, "bf16")
    assert warning is not None
    assert "another precision than this campaign's bf16 (2 in fp32 of 3)" in warning
    assert "calibrate from a campaign that trained in bf16" in warning
    assert "--precision" in warning
