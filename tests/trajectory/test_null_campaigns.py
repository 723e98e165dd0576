"""Null campaigns through the verdict's own code: with every finalist equal to the tuned
baseline, the default top rung names a winner at most 10% of the time, and it still names a
finalist that is truly better."""

from __future__ import annotations

import math
import random

import pytest

from recipelab.agent.phases.seeds import RERUN_SEEDS
from recipelab.agent.setup.settings_components import LadderSettings, SearchSettings
from recipelab.trajectory.null_campaigns import (
    NOISE_SEEDS,
    TopRung,
    noise_model,
    simulated,
    top_rung_campaign,
    wilson,
    winner_rate,
)

DEFAULT = LadderSettings()
CAMPAIGNS = 600


@pytest.mark.parametrize("promote", sorted({1, DEFAULT.promote, 3}))
def test_the_default_verdict_names_a_false_winner_at_most_one_time_in_ten(promote: int) -> None:
    rung = TopRung(promote, DEFAULT.top_seeds, DEFAULT.close_call_seeds)
    assert winner_rate(rung, CAMPAIGNS, seed=1) <= 0.10


@pytest.mark.parametrize(("promote", "power"), [(1, 0.8), (2, 0.8), (3, 0.7)])
def test_the_default_verdict_names_a_finalist_two_sigma_better_most_of_the_time(
        promote: int, power: float) -> None:
    """A verdict that never names anything passes the test above: this one it fails."""
    rung = TopRung(promote, DEFAULT.top_seeds, DEFAULT.close_call_seeds)
    assert winner_rate(rung, CAMPAIGNS // 2, gain=2.0, seed=2) >= power


def test_a_close_call_is_a_second_look_that_adds_power() -> None:
    with_call = TopRung(3, DEFAULT.top_seeds, 2)
    without = TopRung(3, DEFAULT.top_seeds, 0)
    assert winner_rate(with_call, 300, gain=2.0, seed=3) > winner_rate(without, 300, gain=2.0,
                                                                        seed=3)


def test_the_noise_model_pairs_runs_at_a_seed_and_sets_the_gain() -> None:
    rng = random.Random(0)
    pairs = []
    for _ in range(4000):
        draw = noise_model(rng, gain=1.0)
        pairs.append(draw("base", 1000, 1.0) - draw("f0", 1000, 1.0))
    mean = sum(pairs) / len(pairs)
    variance = sum((p - mean) ** 2 for p in pairs) / (len(pairs) - 1)
    assert mean == pytest.approx(1.0, abs=0.06) and variance == pytest.approx(1.0, abs=0.08)


def test_a_campaign_reads_the_seeds_it_drew() -> None:
    """Every run the verdict reads comes from the draw: a finalist far ahead wins, one far
    behind does not, and no run trains at the campaign's own seed above the proxy."""
    seen: list[tuple[str, int]] = []

    def ahead(who: str, seed: int, factor: float) -> float:
        seen.append((who, seed))
        return 1.0 if who == "f0" else 2.0 + 0.01 * (seed % 7)

    assert top_rung_campaign(TopRung(2, 3, 2), ahead).handed_off
    assert {s for w, s in seen if w != "base" or s} >= {1000, 1001, 1002}
    assert not top_rung_campaign(TopRung(2, 3, 2), lambda who, seed, factor:
                                 3.0 if who == "f0" else 2.0 + 0.01 * (seed % 7)).named


def test_a_winner_the_baseline_beats_one_size_up_is_overruled() -> None:
    """The width rung trains at the campaign's seeds (0, 1), the top rung above 1000: a
    finalist ahead there and behind at twice the width is named, then overruled."""
    def behind_one_size_up(who: str, seed: int, factor: float) -> float:
        ahead = seed >= 1000
        return (1.0 if ahead else 3.0) if who == "f0" else 2.0 + 0.01 * (seed % 7)

    outcome = top_rung_campaign(TopRung(2, 3, 2), behind_one_size_up)
    assert outcome.named and outcome.overruled and not outcome.handed_off


def test_the_check_one_size_up_seldom_overrules_a_winner_that_is_truly_better() -> None:
    """Where the gain holds one size up, a loss beyond the floor is the seeds' luck alone."""
    rung = TopRung(DEFAULT.promote, DEFAULT.top_seeds, DEFAULT.close_call_seeds)
    found = simulated(rung, CAMPAIGNS // 2, gain=1.0, seed=4)
    named = [o for o in found if o.named]
    assert len(named) > CAMPAIGNS // 10
    assert sum(o.overruled for o in named) / len(named) <= 0.05


def test_a_simulated_family_follows_its_best_rate_as_the_campaign_does() -> None:
    """Every recipe's best rate is an eighth of its own: each family goes one step below
    × ½, to its reach, and the verdict reads those runs."""
    asked: set[tuple[str, float]] = set()

    def lower_is_better(who: str, seed: int, factor: float) -> float:
        asked.add((who, factor))
        return 2.0 + abs(math.log2(factor / 0.125)) + 0.01 * (seed % 5)

    top_rung_campaign(TopRung(2, 3, 0), lower_is_better)
    for who in ("base", "f0", "f1"):
        assert {m for w, m in asked if w == who} == {0.25, 0.5, 1.0, 2.0}


def test_the_simulated_noise_floor_has_the_campaigns_seeds() -> None:
    assert NOISE_SEEDS == SearchSettings().noise_seeds - 1 == RERUN_SEEDS


def test_the_wilson_interval_holds_its_rate() -> None:
    low, high = wilson(5, 100)
    assert 0.0 < low < 0.05 < high < 0.12
