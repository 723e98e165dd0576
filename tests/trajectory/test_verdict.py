"""The outcome's values as every surface prints them: the control's rate, the winner line with
its correction and fallback, the close call, and the LLM's share of the night (how the ledger
decides them: tests/trajectory/test_ladder.py)."""

from __future__ import annotations

from recipelab.trajectory.ladder import PairedGain
from recipelab.trajectory.record import TrialRecord
from recipelab.trajectory.verdict import Control, Counts, TopRungVerdict

TUNED = Control(steps=400, factor=0.5, scores={0: 3.0, 1: 3.1}, own={0: 3.2, 1: 3.3},
                compared=(0.5, 1.0, 2.0))


def proxy(trial_id: str) -> TrialRecord:
    return TrialRecord(campaign="c", trial_id=trial_id, kind="proxy", status="complete",
                       proposer="classical-tpe", recipe={}, val_bpb=3.0)


def test_a_gain_is_over_the_tuned_control_or_over_the_baseline_at_its_own_rate() -> None:
    assert TUNED.tuned and TUNED.text() == "the tuned baseline (0.5× its rate, the best of 0.5/1/2× here)"
    assert TUNED.gains({0: 2.9, 1: 3.0, 2: 1.0}) == {0: 3.0 - 2.9, 1: 3.1 - 3.0}
    assert TUNED.gains({0: 2.9}, untuned=True) == {0: 3.2 - 2.9}
    older = Control(steps=400, factor=1.0, scores={0: 3.0}, own={0: 3.0})
    assert not older.tuned and "untuned" in older.text()


def test_the_winner_line_names_the_rung_the_seeds_the_control_the_correction_and_the_fallback(
) -> None:
    gain = PairedGain(value=0.2, low=0.1, high=0.3, seeds=4, confidence=0.983, tests=6)
    lead = PairedGain(value=0.01, low=-0.02, high=0.04, seeds=4)
    line = TopRungVerdict(steps=400, seeds=4, primary=proxy("p0009"), gain=gain,
                          fallback=proxy("p0010"), lead=lead, control=TUNED).line()
    assert line.startswith("winner: p0009, evidence: top rung at 400 steps, 4 seeds, gain over "
                           "the tuned baseline (0.5× its rate")
    assert "Bonferroni over 6 tests: each at 98.3%" in line
    assert "fallback: p0010 (the lead over it, +0.0100 [-0.0200, +0.0400]" in line


def test_no_winner_says_why_and_a_positive_mean_is_a_close_call() -> None:
    inside = PairedGain(value=0.05, low=-0.02, high=0.12, seeds=4)
    verdict = TopRungVerdict(steps=400, seeds=4, primary=None, gain=inside,
                             reason="the interval includes 0")
    assert verdict.line() == "no winner beyond noise: the interval includes 0"
    assert verdict.close_call
    worse = PairedGain(value=-0.05, low=-0.12, high=0.02, seeds=4)
    assert not TopRungVerdict(steps=400, seeds=4, primary=None, gain=worse).close_call


def test_the_llms_share_counts_the_turns_the_sampler_took() -> None:
    counts = Counts(trained=10, failed=0, seed_reruns=0, interrupted_rerun=0,
                    interrupted_pending=0, rejected=0, stress_trained=0, stress_total=0,
                    running=0, proposed=8, llm=5, fell_back=2)
    assert counts.llm_asked
    assert counts.llm_line() == ("the LLM proposed 5 of 8 search trials; the sampler took 2 of "
                                 "its turns when it failed (each trial's fallback.txt says why)")
