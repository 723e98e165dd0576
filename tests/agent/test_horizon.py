"""Stress runs train at the learning rate the horizon rule gives, on the fake executor.

The fake's val_bpb comes from two tables here: the proxy's favours the highest learning rate,
the rung's a lower one, as short and longer runs do (a real trainer cannot be made to show
that in a test's time)."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipelab.agent.campaign import Campaign
from recipelab.agent.settings import CampaignSettings
from recipelab.runner.fake import synthetic_outcome
from recipelab.trainer.spec import TrialResult, TrialSpec
from recipelab.trajectory.horizon import horizon_rule
from recipelab.trajectory.record import TrialRecord

from .conftest import ScriptedProposer, events, fake_executor, read_jsonl

EDITS = [{"optimizer.lr": lr} for lr in (0.02, 0.015, 0.005)]  # the baseline's is 0.01
PROXY_SCORE = {0.02: 1.90, 0.015: 1.92, 0.01: 1.95, 0.005: 2.00}
RUNG_SCORE = {0.02: 1.80, 0.015: 1.70, 0.01: 1.75, 0.005: 1.85}


def scored(spec: TrialSpec) -> TrialResult:
    table = RUNG_SCORE if spec.kind == "rung" else PROXY_SCORE
    return synthetic_outcome(spec).model_copy(
        update={"val_bpb": table[round(spec.recipe.optimizer.lr, 6)]})


@pytest.fixture
def settings(tiny_settings: CampaignSettings) -> CampaignSettings:
    return tiny_settings.model_copy(update={"iterations": 4, "promote": 1, "rung_size": 3})


def run(settings: CampaignSettings, directory: Path) -> list[TrialRecord]:
    Campaign(settings, directory, executor=fake_executor(outcome=scored),
             proposer=ScriptedProposer(settings.baseline(), EDITS)).run()
    return [TrialRecord.model_validate(r) for r in read_jsonl(directory / "trajectory.jsonl")]


def test_a_stress_run_trains_at_the_rate_the_rule_fitted_from_proxies_and_rung_gives(
        tmp_path: Path, settings: CampaignSettings) -> None:
    records = run(settings, tmp_path)

    rule = horizon_rule(records)
    assert rule.fits == 1 and rule.alpha > 0
    [stress] = [r for r in records if r.kind == "stress"]
    parent = next(r for r in records if r.trial_id == stress.parent)
    assert parent.recipe["optimizer"]["lr"] == 0.015, "the rung's best"
    factor = rule.factor(settings.baseline().steps, settings.stress_steps)
    assert stress.recipe["optimizer"]["lr"] == pytest.approx(0.015 * factor)
    [promoted] = events(tmp_path, "promoted")
    assert promoted["lr_factor"] == pytest.approx(factor)
    [logged] = events(tmp_path, "horizon_rule")
    assert logged["applied"] is True and logged["alpha"] == pytest.approx(rule.alpha)


def test_without_the_rule_a_stress_run_keeps_the_proxys_rate(
        tmp_path: Path, settings: CampaignSettings) -> None:
    records = run(settings.model_copy(update={"horizon_rule": False}), tmp_path)

    [stress] = [r for r in records if r.kind == "stress"]
    assert stress.recipe["optimizer"]["lr"] == 0.015
    assert events(tmp_path, "horizon_rule")[0]["applied"] is False
