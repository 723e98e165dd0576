"""Calibrated proposers: prior trials of earlier campaigns steer the first proposals, and
their summary reaches the LLM's prompt within its budget."""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path

from recipelab.agent.campaign import Campaign
from recipelab.agent.setup.settings import CampaignSettings, ProposerSettings, SearchSettings, WindowSettings
from recipelab.proposer import ClassicalProposer, HybridProposer, LLMProposer, Observation, default_space
from recipelab.proposer.prompt import PROMPT_BUDGET_CHARS, build_messages
from recipelab.targets import proxy_recipe
from recipelab.trajectory.calibration import Calibration, PriorTrial, calibration_summary
from tests.trajectory.test_calibration import high_lr_campaign, write

BASELINE = proxy_recipe("tiny")
SPACE = default_space(BASELINE)
LR = BASELINE.optimizer.lr
TARGET = "toy: a 7M Llama-shaped model"


def high_lr_priors(count: int = 40, seed: int = 0) -> list[Observation]:
    """Earlier trials where val_bpb (relative to their baseline) falls as lr rises."""
    rng = random.Random(seed)
    priors = []
    for i in range(count):
        lr = float(f"{LR * 10 ** rng.uniform(-1, 1):.6g}")
        knobs = BASELINE.apply({"optimizer.lr": lr,
                                "optimizer.weight_decay": round(rng.uniform(0, 0.3), 4)}).knobs()
        relative = 1.0 - 0.1 * math.log10(lr / LR) + rng.uniform(-0.005, 0.005)
        priors.append(Observation(trial_id=f"old/p{i:04d}", status="complete", knobs=knobs,
                                  val_bpb=relative))
    return priors


def baseline_history(val_bpb: float = 2.7) -> list[Observation]:
    return [Observation(trial_id="p0000", status="complete", knobs=BASELINE.knobs(),
                        val_bpb=val_bpb, proposer="baseline")]


def mean_log_lr(proposer: ClassicalProposer, n: int = 6) -> float:
    proposals = proposer.propose(baseline_history(), n)
    lrs = [p.candidate["optimizer"]["lr"] for p in proposals]
    return statistics.fmean(math.log10(lr / LR) for lr in lrs)


def test_a_calibrated_proposer_proposes_the_higher_lr_earlier_campaigns_found_better() -> None:
    calibrated, plain = [], []
    for seed in range(4):
        calibrated.append(mean_log_lr(ClassicalProposer(BASELINE, "p0000", SPACE, seed=seed,
                                                        priors=high_lr_priors(seed=seed))))
        plain.append(mean_log_lr(ClassicalProposer(BASELINE, "p0000", SPACE, seed=seed)))
    # lr is searched in [LR/10, LR*10]: uniform start-up centres on 0 decades; priors push it up
    assert statistics.fmean(calibrated) > 0.4
    assert statistics.fmean(calibrated) > statistics.fmean(plain) + 0.3


def test_priors_are_scaled_to_this_campaigns_baseline_and_never_become_history() -> None:
    priors = high_lr_priors(count=12)
    proposer = ClassicalProposer(BASELINE, "p0000", SPACE, priors=priors)
    proposals = proposer.propose(baseline_history(), 2)
    assert "with 12 trials of earlier campaigns" in proposals[0].hypothesis
    assert all(p.parent_id == "p0000" for p in proposals)
    assert proposer._baseline_scale([]) == 1.0  # no trial yet: relative values as they are
    trials = [t for obs in baseline_history(3.0)
              if (t := proposer._as_trial(obs, SPACE.distributions())) is not None]
    assert proposer._baseline_scale(trials) == 3.0


def test_a_prior_outside_the_space_is_left_out_and_a_missing_knob_takes_the_baseline() -> None:
    knobs = BASELINE.knobs()
    outside = Observation(trial_id="old/x", status="complete", val_bpb=0.5,
                          knobs={**knobs, "optimizer.lr": LR * 1000})
    partial = Observation(trial_id="old/y", status="complete", val_bpb=0.9,
                          knobs={"optimizer.lr": LR * 2})
    proposer = ClassicalProposer(BASELINE, None, SPACE, priors=[outside, partial])
    distributions = SPACE.distributions()
    assert proposer._as_trial(outside, distributions, 2.0) is None
    trial = proposer._as_trial(partial, distributions, 2.0)
    assert trial is not None and trial.value == 1.8
    assert trial.params["schedule.kind"] == BASELINE.schedule.kind
    assert proposer._as_trial(partial, distributions) is None  # a campaign trial must be whole


def summary_of(trials: int) -> str:
    prior = [PriorTrial(source="old.jsonl", campaign="old", trial_id=f"p{i:04d}",
                        status="complete", knobs={"optimizer.lr": LR * (1 + i)},
                        edit={"optimizer.lr": LR * (1 + i)}, relative=1.0 - i / 100)
             for i in range(trials)]
    summary = calibration_summary(Calibration(tuple(prior), (), ("old",)), SPACE.names())
    assert summary is not None
    return summary


def test_the_llm_prompt_carries_the_calibration_summary_within_its_budget() -> None:
    summary = summary_of(30)
    user = build_messages(TARGET, SPACE, BASELINE, baseline_history(), summary)[1]["content"]
    assert "Calibration from earlier campaigns:" in user
    assert "Best prior edits from the baseline:" in user and "x baseline" in user
    huge = summary_of(30) + "x" * 50_000
    messages = build_messages(TARGET, SPACE, BASELINE, baseline_history(), huge)
    assert sum(len(m["content"]) for m in messages) <= PROMPT_BUDGET_CHARS


def test_a_campaign_hands_its_calibration_to_both_halves_of_the_hybrid(tmp_path: Path) -> None:
    old = write(tmp_path / "old.jsonl", high_lr_campaign("old", 2.0))
    settings = CampaignSettings(name="new", preset="tiny", window=WindowSettings(iterations=1),
                                search=SearchSettings(calibrate_from=(str(old),)),
                                proposer=ProposerSettings(kind="hybrid",
                                                          llm_base_url="http://127.0.0.1:9/v1"))

    campaign = Campaign(settings, tmp_path / "new")  # constructing contacts no server

    assert isinstance(campaign.proposer, HybridProposer)
    llm, classical = campaign.proposer.llm, campaign.proposer.classical
    assert isinstance(llm, LLMProposer) and isinstance(classical, ClassicalProposer)
    assert llm.sampler is classical, "the LLM steers the campaign's own sampler"
    assert llm.calibration is not None and llm.calibration == campaign.priors.summary
    assert "Best prior edits" in llm.calibration
    assert len(classical.priors) == 6
    assert {p.trial_id for p in classical.priors} >= {"old/p0002", "old/p0005"}
