"""The ledger: one reading of a campaign's records. Here, the one gain per proxy trial that
``status``, the report and the winner line show (the ladder's reading is specified in
tests/trajectory/test_ladder.py)."""

from __future__ import annotations

from recipelab.targets import proxy_recipe
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.record import TrialRecord


def proxy(trial_id: str, val_bpb: float, seed: int, proposer: str = "baseline",
          lr: float | None = None, parent: str | None = None) -> TrialRecord:
    recipe = proxy_recipe("tiny").apply({"seed": seed, **({"optimizer.lr": lr} if lr else {})})
    edit: dict[str, object] = {"optimizer.lr": lr} if lr else {"seed": seed} if seed else {}
    return TrialRecord(campaign="c", trial_id=trial_id, kind="proxy", status="complete",
                       proposer=proposer, parent=parent, recipe=recipe.model_dump(mode="json"),
                       edit=edit, val_bpb=val_bpb)


BASELINE = [proxy(f"p000{s}", v, s) for s, v in enumerate((2.50, 2.80, 2.20))]
CANDIDATE = [proxy("p0003", 2.40, 0, "classical-tpe", lr=0.02),
             proxy("p0004", 2.77, 1, "seed-rerun", lr=0.02, parent="p0003"),
             proxy("p0005", 2.16, 2, "seed-rerun", lr=0.02, parent="p0003")]


def test_a_proxy_gain_is_the_paired_mean_over_every_seed_of_the_recipe() -> None:
    ledger = Ledger([*BASELINE, *CANDIDATE])
    gain = ledger.proxy_gain(CANDIDATE[0])
    assert gain is not None and gain.seeds == 3
    assert abs(gain.value - (0.10 + 0.03 + 0.04) / 3) < 1e-9
    assert gain.low < gain.value < gain.high
    assert ledger.proxy_gain(CANDIDATE[2]) == gain  # a seed re-run reads its recipe's gain


def test_the_baseline_has_no_gain_over_itself() -> None:
    ledger = Ledger([*BASELINE, *CANDIDATE])
    assert all(ledger.proxy_gain(r) is None for r in BASELINE)


def test_no_gain_is_shown_before_the_noise_floor_is_measured() -> None:
    ledger = Ledger([BASELINE[0], CANDIDATE[0]])  # the baseline at one seed: no floor yet
    assert ledger.noise is None and ledger.proxy_gain(CANDIDATE[0]) is None


def test_a_baseline_that_leads_is_no_winner() -> None:
    """A night whose only stable top-rung runs are the baseline's (every search trial was a
    baseline seed) names no winner: the baseline is the answer, not a pick over itself."""
    stress = [TrialRecord(campaign="c", trial_id=f"s000{i}", kind="stress", status="complete",
                          proposer="baseline", parent="p0000", verdict="stable", val_bpb=2.3 + i / 100,
                          recipe={**BASELINE[0].recipe, "seed": 1000 + i, "steps": 1000})
              for i in range(4)]
    line = Ledger([*BASELINE[:2], *stress]).winner_line()
    # the evidence counts the top rung's 4 seeds, not the 2 of the baseline's proxy trials
    assert line == "no winner: the baseline p0000 leads (evidence: stress at 1000 steps, 4 seeds)"
    assert "winner (provisional)" not in line
