"""The middle rung's score and the Ledger's reading of rung runs, from records alone."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest

from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.record import Status, TrialRecord
from recipelab.trajectory.rung import curve_score, diverged, rung_score


def proxy(trial_id: str, val_bpb: float, lr: float) -> TrialRecord:
    return TrialRecord(campaign="c", trial_id=trial_id, kind="proxy", status="complete",
                       val_bpb=val_bpb, proposer="classical-tpe", edit={"optimizer.lr": lr},
                       recipe={"seed": 0, "steps": 60, "optimizer": {"lr": lr}})


def rung(trial_id: str, parent: str, val_bpb: float | None, *, status: Status = "complete",
         losses: Sequence[float | None] | None = None) -> TrialRecord:
    metrics: dict[str, Any] = {"losses": list(losses) if losses is not None
                               else [4.0 - 2.0 * i / 244 for i in range(245)]}
    return TrialRecord(campaign="c", trial_id=trial_id, kind="rung", status=status,
                       val_bpb=val_bpb, parent=parent, metrics=metrics,
                       recipe={"seed": 0, "steps": 245})


def stress(trial_id: str, parent: str, val_bpb: float, verdict: str) -> TrialRecord:
    return TrialRecord(campaign="c", trial_id=trial_id, kind="stress", status="complete",
                       val_bpb=val_bpb, parent=parent, verdict=verdict,
                       recipe={"seed": 0, "steps": 1000})


PROXIES = [proxy("p0000", 2.00, 1e-3), proxy("p0001", 1.90, 2e-3), proxy("p0002", 1.92, 3e-3),
           proxy("p0003", 1.94, 4e-3), proxy("p0004", 1.96, 5e-3)]


def test_a_rung_run_scores_its_val_bpb_unless_it_did_not_complete_or_is_not_finite() -> None:
    assert rung_score(rung("r0000", "p0001", 1.8)) == 1.8
    assert rung_score(rung("r0000", "p0001", None, status="failed")) is None
    assert rung_score(rung("r0000", "p0001", 1.8, status="interrupted")) is None
    assert rung_score(rung("r0000", "p0001", math.nan)) is None
    assert rung_score(rung("r0000", "p0001", math.inf)) is None


def test_a_rung_run_whose_curve_ends_above_where_it_began_is_excluded() -> None:
    climbing = [2.0 + 0.01 * i for i in range(100)]
    assert rung_score(rung("r0000", "p0001", 1.5, losses=climbing)) is None
    lost_at_the_end = [3.0] * 95 + [None] * 5
    assert rung_score(rung("r0000", "p0001", 1.5, losses=lost_at_the_end)) is None
    # a spike in the middle that the run recovers from is not divergence
    assert not diverged([3.0] * 40 + [9.0] * 10 + [2.5] * 50)
    # without per-step losses the logged curve is judged
    logged = TrialRecord(campaign="c", trial_id="r0000", kind="rung", status="complete",
                         val_bpb=1.5, curve=[{"step": s, "loss": 2.0 + s / 100} for s in range(50)])
    assert rung_score(logged) is None


def test_curve_score_recovers_a_synthetic_power_law_at_the_horizon() -> None:
    def law(t: float) -> float:
        return float(1.5 + 3.0 * t ** -0.4)

    losses: list[float | None] = [law(t) for t in range(1, 246)]
    predicted = curve_score(losses, 1000)
    assert predicted is not None
    assert predicted == pytest.approx(law(1000), abs=2e-3)
    assert abs(predicted - law(1000)) < abs(law(245) - law(1000)) / 10, (
        "no better than the last point")


def test_curve_score_is_none_without_enough_finite_losses() -> None:
    assert curve_score([], 1000) is None
    assert curve_score([3.0, 2.0, None, None, None, None], 1000) is None


def test_the_rung_ranking_picks_the_stress_candidates_instead_of_the_proxy_ranking() -> None:
    runs = [rung("r0000", "p0001", 1.80), rung("r0001", "p0002", 1.70),
            rung("r0002", "p0003", 1.75)]
    ledger = Ledger(PROXIES + runs, promote=2, rung_size=3, eta=2)

    assert [r.trial_id for r in ledger.first_climbers] == ["p0001", "p0002", "p0003"]
    assert [r.trial_id for r in ledger.rung_runs_of("p0002")] == ["r0001"]
    assert [r.trial_id for r in ledger.ranked_at_highest_rung] == ["p0002", "p0003", "p0001"]
    assert [r.trial_id for r in ledger.top_rung_climbers] == ["p0002", "p0003"]
    assert [r.trial_id for r in ledger.proxy_finalists] == ["p0001", "p0002"], "unchanged"


def test_a_diverged_rung_run_is_left_out_and_ties_go_to_the_lower_trial_id() -> None:
    climbing: list[float | None] = [2.0 + 0.01 * i for i in range(100)]
    runs = [rung("r0000", "p0001", 1.70, losses=climbing), rung("r0001", "p0002", 1.75),
            rung("r0002", "p0003", 1.75)]
    ledger = Ledger(PROXIES + runs, promote=1, rung_size=3)

    assert [r.trial_id for r in ledger.ranked_at_highest_rung] == ["p0002", "p0003"]
    assert [r.trial_id for r in ledger.top_rung_climbers] == ["p0002"]


def test_without_a_scored_rung_run_the_stress_candidates_are_the_finalists_and_extras() -> None:
    failed = [rung("r0000", "p0001", None, status="failed")]
    for records in (PROXIES, PROXIES + failed):
        ledger = Ledger(records, promote=1, fidelity=1, rung_size=3)
        assert ledger.ranked_at_highest_rung == []
        assert [r.trial_id for r in ledger.top_rung_climbers] == ["p0001", "p0004"]


def test_fidelity_extras_already_chosen_by_the_rung_are_not_run_twice() -> None:
    runs = [rung("r0000", "p0001", 1.80), rung("r0001", "p0004", 1.70)]
    ledger = Ledger(PROXIES + runs, promote=1, fidelity=1, rung_size=4)
    # the rung picks p0004, which is also the middle of the rest of the proxy ranking
    assert [r.trial_id for r in ledger.top_rung_climbers] == ["p0004"]


def test_the_winner_rests_on_the_rung_until_a_stress_run_stays_stable() -> None:
    runs = [rung("r0000", "p0001", 1.80), rung("r0001", "p0002", 1.70)]
    ledger = Ledger(PROXIES + runs, promote=1, rung_size=3)
    winner = ledger.winner
    assert winner is not None and winner.record.trial_id == "p0002"
    assert winner.evidence == "rung" and winner.rung is not None
    assert winner.rung.trial_id == "r0001" and "245 steps" in winner.because
    assert "provisional" in winner.because

    diverged_stress = stress("s0000", "p0002", 1.6, "diverged")
    winner = Ledger(PROXIES + runs + [diverged_stress], promote=1, rung_size=3).winner
    assert winner is not None and winner.evidence == "rung"
    assert winner.record.trial_id == "p0001", "the rung's best diverged: the next one stands"

    stable = stress("s0001", "p0001", 1.65, "stable")
    winner = Ledger(PROXIES + runs + [diverged_stress, stable], promote=1, rung_size=3).winner
    assert winner is not None and winner.evidence == "stress"
    assert winner.record.trial_id == "p0001"

    assert Ledger(PROXIES, promote=1).winner.evidence == "proxy"  # type: ignore[union-attr]


def test_rung_runs_are_counted_apart_from_proxy_and_stress_runs() -> None:
    records = [*PROXIES, rung("r0000", "p0001", 1.8),
               rung("r0001", "p0002", None, status="interrupted")]
    counts = Ledger(records).counts()
    assert counts.rung_trained == 1 and counts.trained == 5 and counts.stress_total == 0


def test_a_candidate_whose_stress_run_diverged_is_never_the_provisional_winner() -> None:
    runs = [rung("r0000", "p0001", 1.80)]
    diverged_stress = stress("s0000", "p0001", 1.7, "diverged")
    winner = Ledger(PROXIES + runs + [diverged_stress], promote=1, rung_size=3).winner
    assert winner is None, "every candidate the rung and the proxies offer has been refuted"

    winner = Ledger([*PROXIES, diverged_stress], promote=2).winner
    assert winner is not None and winner.evidence == "proxy"
    assert winner.record.trial_id == "p0002"

    for warning in ("flat", "grad-spike"):  # shown in the report, but no refutation
        winner = Ledger([*PROXIES, stress("s0000", "p0001", 1.7, warning)], promote=2).winner
        assert winner is not None and winner.record.trial_id == "p0001"

    crashed = TrialRecord(campaign="c", trial_id="s0000", kind="stress", status="failed",
                          parent="p0001", recipe={"seed": 0, "steps": 1000})
    winner = Ledger([*PROXIES, crashed], promote=2).winner
    assert winner is not None and winner.record.trial_id == "p0001", "a crash is no verdict"
