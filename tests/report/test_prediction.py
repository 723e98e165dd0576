"""The prediction of the target's val_bpb: the proxy's curve in bytes of text, scaled by a
model-size term from a published law, written by ``export`` and read back by ``verify``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recipelab.recipe import Recipe, get_target
from recipelab.report.export import pick_winner
from recipelab.report.prediction import Prediction, SizeTerm, predict, size_law_loss
from recipelab.report.steplaw import non_embedding_params
from recipelab.trajectory import TrajectoryStore


def test_the_size_term_is_one_for_the_proxy_and_below_one_for_a_larger_target() -> None:
    assert SizeTerm(100_000, 100_000).factor(1e6) == 1.0
    assert SizeTerm(100_000, 6_000_000).factor(1e6) < 1.0
    assert SizeTerm(6_000_000, 100_000).factor(1e6) > 1.0
    assert size_law_loss(1e6, 1e9) < size_law_loss(1e5, 1e9) < size_law_loss(1e5, 1e8)


def test_a_data_limited_target_gains_little_and_one_with_data_to_spare_gains_more() -> None:
    """At 5 bytes per parameter a 63× larger model is nearly as data-limited as the proxy; at
    a Chinchilla budget for the larger model the gap is several percent."""
    term = SizeTerm(92_416, 5_804_032)
    data_limited = 1 - term.factor(500_000)
    with_data = 1 - term.factor(20 * 4 * 5_804_032)
    assert 0 < data_limited < 0.01 < with_data


def test_a_prediction_read_back_from_its_json_predicts_the_same_curve(
        finished_campaign: Path) -> None:
    with TrajectoryStore(finished_campaign, "nightly", readonly=True) as store:
        records = store.records()
    chosen = pick_winner(records)
    assert chosen is not None
    target = get_target("toy").shape
    prediction = predict(records, chosen[0], target)
    source = next(r for r in records if r.trial_id == prediction.source_trial)
    proxy = Recipe.model_validate(source.recipe).shape
    assert prediction.size == SizeTerm(non_embedding_params(proxy), non_embedding_params(target))
    again = Prediction.from_json(json.loads(json.dumps(prediction.to_json())))
    for seen in (0.5, 1.0, 10.0, 1000.0):
        at = seen * prediction.last_bytes
        assert again.center(at) == pytest.approx(prediction.center(at))
        assert again.half_width(at) == pytest.approx(prediction.half_width(at))
    assert prediction.center(prediction.last_bytes) < predict(records, chosen[0]).center(
        prediction.last_bytes), "the larger target is predicted below the proxy's own curve"

