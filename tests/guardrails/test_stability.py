"""stability: group learning rates, the WSD decay against the warmup, and the logit cap."""

from __future__ import annotations

import math

import pytest

from recipelab.guardrails import check_stability, judge
from recipelab.guardrails.stability import capped_max_prob, min_softcap
from tests.guardrails.factories import BASELINE, context


def test_the_baseline_and_every_default_pass() -> None:
    assert check_stability(BASELINE, context()) == []
    assert judge(BASELINE, context(), checks=["stability"]).accepted


def test_a_group_learning_rate_above_one_is_rejected_with_the_largest_multiplier_allowed() -> None:
    assert BASELINE.optimizer.lr == 1e-2
    (reason,) = check_stability(BASELINE.apply({"optimizer.lr_hidden_mult": 100.0,
                                                 "optimizer.lr": 0.02}), context())
    assert reason.startswith("optimizer.lr 0.02 x optimizer.lr_hidden_mult 100 = 2 is a")
    assert "optimizer.lr_hidden_mult <= 50" in reason
    assert check_stability(BASELINE.apply({"optimizer.lr_embed_mult": 100.0}), context()) == []


def test_a_wsd_decay_that_starts_inside_the_warmup_is_rejected() -> None:
    assert BASELINE.steps == 20
    fine = BASELINE.apply({"schedule.kind": "wsd", "schedule.warmup_steps": 4,
                           "schedule.decay_fraction": 0.5})
    assert check_stability(fine, context()) == []
    (reason,) = check_stability(fine.apply({"schedule.decay_fraction": 0.9}), context())
    assert "decays over the last 18 of 20 steps" in reason
    assert "lower schedule.warmup_steps to <= 2" in reason
    # The same fraction means nothing under cosine, so it is not judged there.
    assert check_stability(fine.apply({"schedule.decay_fraction": 0.9,
                                       "schedule.kind": "cosine"}), context()) == []


def test_a_logit_cap_too_low_to_predict_confidently_is_rejected() -> None:
    vocab = BASELINE.shape.vocab_size
    assert capped_max_prob(min_softcap(vocab), vocab) == pytest.approx(0.9)
    (reason,) = check_stability(BASELINE.apply({"stability.logit_softcap": 2.0}), context())
    assert f"no prediction can exceed probability {capped_max_prob(2.0, vocab):.2f}" in reason
    assert f"a cap >= {math.ceil(min_softcap(vocab))}" in reason
    for cap in (0.0, 15.0):
        assert check_stability(BASELINE.apply({"stability.logit_softcap": cap}), context()) == []
