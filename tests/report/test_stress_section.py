"""The report's stress runs: each run's learning rate, when the horizon rule moved it by how
much and why, and no recommendation of a recipe its own stress run refuted."""

from __future__ import annotations

from typing import Any

from recipelab.report import ReportContext
from recipelab.report.document import Document
from recipelab.report.render import to_markdown
from recipelab.report.sections import recommendation, rung_panels, stress_runs
from recipelab.targets import get_target
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
    section = recommendation(Ledger(records), ReportContext("nightly", get_target("toy"), "tiny"))
    text = to_markdown(Document("report", (section,)))
    assert "Nothing to recommend: every finalist's own stress run diverged" in text


def test_a_stress_record_without_a_recipe_shows_no_rate_instead_of_failing() -> None:
    records = [record("p0001", "proxy", 0.01),
               TrialRecord(campaign="c", trial_id="s0000", status="complete", kind="stress",
                           proposer="tpe", val_bpb=2.5, parent="p0001", verdict="stable",
                           curve=CURVE)]
    text = to_markdown(Document("report", (stress_runs(records),)))
    assert "| s0000 | p0001 | complete | stable | — |" in text


def top_run(trial_id: str, parent: str, seed: int, batch: int, steps: int, offset: float,
            **edit: Any) -> TrialRecord:
    """A top-rung run of ``steps`` steps of ``batch`` sequences of 64 tokens."""
    recipe = {"seed": seed, "batch_size": batch, "seq_len": 64, "steps": steps,
              "optimizer": {"lr": 0.01}}
    curve = [{"step": s, "loss": 3.0 - s / steps + offset} for s in range(steps // 4, steps + 1,
                                                                          steps // 4)]
    return TrialRecord(campaign="c", trial_id=trial_id, status="complete", kind="stress",
                       proposer="tpe", val_bpb=2.5, recipe=recipe, parent=parent, curve=curve,
                       edit=edit)


def test_the_top_rungs_curves_share_one_panel_in_tokens_with_the_baseline_first() -> None:
    """At equal tokens a finalist of half the batch runs twice the steps: in tokens the two
    curves end together. Seeds make one series; the baseline's rate family is its own."""
    records = [record("p0000", "proxy", 0.01).model_copy(update={"proposer": "baseline"}),
               record("p0003", "proxy", 0.01)]
    runs = [top_run("s0000", "p0000", 1000, 8, 200, 0.0), top_run("s0001", "p0000", 1001, 8, 200, 0.1),
            top_run("s0002", "p0003", 1000, 4, 400, -0.1), top_run("s0003", "p0003", 1001, 4, 400, 0.0),
            top_run("s0004", "p0000", 1000, 8, 200, 0.2, lr_family=0.5)]
    ((title, series),) = rung_panels(records + runs, runs)
    assert title == "top rung: 102,400 tokens"
    assert [s.label for s in series] == ["p0000 (baseline)", "p0000 (baseline) × 0.5 rate", "p0003"]
    assert [s.baseline for s in series] == [True, True, False]
    assert series[0].tokens[-1] == series[2].tokens[-1] == 102_400
    assert len(series[0].losses) == len(series[2].losses) == 2
    assert len(series[1].losses) == 1
