"""The report's stress runs: each run's learning rate, when the horizon rule moved it by how
much and why, and no recommendation of a recipe its own stress run refuted."""

from __future__ import annotations

from typing import Any

from recipelab.recipe import get_target
from recipelab.report import ReportContext
from recipelab.report.document import Document
from recipelab.report.render import to_markdown
from recipelab.report.sections import recommendation, stress_runs
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.record import TrialRecord

CURVE = [{"step": s, "loss": 3.0 - s / 100} for s in (10, 20, 30)]


def record(trial_id: str, kind: str, lr: float, **fields: Any) -> TrialRecord:
    return TrialRecord(campaign="c", trial_id=trial_id, status="complete", kind=kind,
                       proposer="tpe", val_bpb=2.5, recipe={"seed": 0, "optimizer": {"lr": lr}},
                       **fields)


def stress_markdown(stress_lr: float) -> str:
    records = [record("p0001", "proxy", 0.01),
               record("s0000", "stress", stress_lr, parent="p0001", verdict="stable",
                      curve=CURVE)]
    return to_markdown(Document("report", (stress_runs(records),)))


def test_a_stress_run_at_a_horizon_scaled_rate_says_so_with_the_factor() -> None:
    text = stress_markdown(0.0006)
    assert "| s0000 | p0001 | complete | stable | 0.0006 (proxy's x 0.06) |" in text
    assert "horizon rule" in text and "--no-horizon-rule" in text


def test_a_stress_run_at_its_proxys_rate_shows_the_rate_alone() -> None:
    text = stress_markdown(0.01)
    assert "| s0000 | p0001 | complete | stable | 0.01 |" in text
    assert "horizon rule" not in text


def test_no_recipe_is_recommended_when_every_finalists_stress_run_diverged() -> None:
    records = [record("p0001", "proxy", 0.01),
               record("s0000", "stress", 0.01, parent="p0001", verdict="diverged", curve=CURVE)]
    section = recommendation(Ledger(records), ReportContext("nightly", get_target("toy"), "tiny"), None)
    text = to_markdown(Document("report", (section,)))
    assert "Nothing to recommend: every finalist's own stress run diverged" in text


def test_a_stress_record_without_a_recipe_shows_no_rate_instead_of_failing() -> None:
    records = [record("p0001", "proxy", 0.01),
               TrialRecord(campaign="c", trial_id="s0000", status="complete", kind="stress",
                           proposer="tpe", val_bpb=2.5, parent="p0001", verdict="stable",
                           curve=CURVE)]
    text = to_markdown(Document("report", (stress_runs(records),)))
    assert "| s0000 | p0001 | complete | stable | — |" in text
