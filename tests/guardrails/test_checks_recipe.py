"""ranges, divisibility, param_budget and duplicate: each rejects its bad case by name."""

from __future__ import annotations

from typing import Any

import pytest

from recipelab.guardrails import (
    check_divisibility,
    check_duplicate,
    check_param_budget,
    check_ranges,
)
from tests.guardrails.factories import BASELINE, BUDGET, context, unvalidated

# --- ranges -------------------------------------------------------------------------------


def ranges(**edit: Any) -> list[str]:
    """The reasons against the baseline with ``edit``, trained for the baseline's tokens."""
    return check_ranges(BASELINE.apply(edit).at_tokens(BASELINE.tokens), context())


def test_ranges_accept_the_baseline_and_edits_within_the_campaigns_bounds() -> None:
    assert check_ranges(BASELINE, context()) == []
    assert ranges(seq_len=8 * BASELINE.seq_len, batch_size=1) == []
    assert ranges(grad_accum=8, **{"schedule.warmup_steps": 1}) == []  # 1/8 of the steps
    assert ranges(batch_size=1) == []  # exactly 1/8 of the baseline's tokens per step


def test_a_candidate_may_not_change_its_training_length() -> None:
    (reason,) = check_ranges(BASELINE.apply({"steps": BASELINE.steps * 2}), context())
    assert reason.startswith(f"steps {BASELINE.steps * 2} train {2 * BASELINE.tokens:,} "
                             f"tokens, not the baseline's {BASELINE.tokens:,}")
    assert "may not change its own training length" in reason
    assert f"keep steps at {BASELINE.steps}" in reason


def test_a_batch_edit_trains_the_baselines_tokens_in_fewer_steps() -> None:
    doubled = BASELINE.apply({"batch_size": 2 * BASELINE.batch_size})
    assert check_ranges(doubled.at_tokens(BASELINE.tokens), context()) == []
    assert doubled.at_tokens(BASELINE.tokens).steps == BASELINE.steps // 2
    (reason,) = check_ranges(doubled, context())
    assert f"keep steps at {BASELINE.steps // 2} for this batch" in reason


def test_eval_bytes_must_match_so_val_bpb_compares() -> None:
    (reason,) = ranges(eval_bytes=2 * BASELINE.eval_bytes)
    assert reason.startswith(f"eval_bytes {2 * BASELINE.eval_bytes:,} differs")
    assert "val_bpb" in reason


def test_seq_len_at_most_eight_times_the_baselines() -> None:
    reasons = ranges(seq_len=8 * BASELINE.seq_len + 2, batch_size=1)
    assert reasons == ["seq_len 514 is more than 8x the baseline's 64; use seq_len <= 512."]


@pytest.mark.parametrize(("edit", "words"), [
    ({"batch_size": 8, "grad_accum": 9}, ["grad_accum 9", "= 4,608", "more than 8x", "4,096"]),
    ({"batch_size": 1, "seq_len": 32}, ["batch_size 1", "= 32", "less than 1/8", "at least 64"]),
])
def test_tokens_per_step_within_an_eighth_and_eight_times_the_baselines(
        edit: dict[str, int], words: list[str]) -> None:
    (reason,) = ranges(**edit, **{"schedule.warmup_steps": 0})
    assert reason.startswith("tokens per step (batch_size")
    for word in words:
        assert word in reason


def test_warmup_must_be_shorter_than_the_run() -> None:
    (reason,) = ranges(**{"schedule.warmup_steps": BASELINE.steps})
    assert reason.startswith(f"schedule.warmup_steps {BASELINE.steps} is not shorter than the run")
    assert f"schedule.warmup_steps <= {BASELINE.steps - 1}" in reason


# --- divisibility -------------------------------------------------------------------------


def test_divisibility_accepts_the_baseline() -> None:
    assert check_divisibility(BASELINE, context()) == []


def test_d_model_must_divide_by_n_head_and_the_reason_offers_values() -> None:
    (reason,) = check_divisibility(unvalidated(d_model=65), context())
    assert reason == ("shape.d_model 65 is not divisible by shape.n_head 2; use a d_model "
                      "that is a multiple of 2, such as 64 or 66.")


def test_n_head_must_be_a_multiple_of_n_kv_head() -> None:
    (reason,) = check_divisibility(unvalidated(n_head=6, n_kv_head=4, d_model=192), context())
    assert reason.startswith("shape.n_head 6 is not a multiple of shape.n_kv_head 4")
    assert reason.endswith("divisors of 6: 1, 2, 3, 6.")


def test_rope_needs_an_even_head_dim_but_learned_positions_do_not() -> None:
    (reason,) = check_divisibility(unvalidated(head_dim=31), context())
    assert reason.startswith("shape.head_dim 31 is odd")
    assert check_divisibility(unvalidated(head_dim=31, position="learned"), context()) == []


# --- param_budget and duplicate -----------------------------------------------------------


def test_param_budget_accepts_at_the_budget_and_rejects_above_it() -> None:
    params = BASELINE.param_count()
    assert check_param_budget(BASELINE, context(param_budget=params)) == []
    (reason,) = check_param_budget(BASELINE, context(param_budget=params - 1))
    assert reason.startswith(f"the candidate has {params:,} parameters, over the campaign's "
                             f"budget of {params - 1:,}")
    assert "shape.n_layer" in reason


def test_param_budget_rejects_a_deeper_proxy() -> None:
    deeper = BASELINE.apply({"shape.n_layer": 4})
    assert deeper.param_count() > BUDGET
    assert check_param_budget(deeper, context())


def test_duplicate_rejects_a_recipe_already_seen_and_accepts_a_new_one() -> None:
    seen = frozenset({BASELINE.fingerprint()})
    (reason,) = check_duplicate(BASELINE, context(seen=seen))
    assert "already ran as a trial" in reason and "propose a different edit" in reason
    assert check_duplicate(BASELINE.apply({"seed": 1}), context(seen=seen)) == []
