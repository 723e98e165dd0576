"""The ladder of fidelities from records alone: its rungs, who climbs, how a rung ranks, and
the top rung's verdict (winner, fallback, or no winner beyond noise) in one line."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping

import pytest

from recipelab.targets import proxy_recipe
from recipelab.trajectory.ladder import (
    FAMILY_REACH,
    RungPlan,
    climbers,
    describe_ladder,
    next_family_rate,
    plan_ladder,
    probed,
    rung_steps,
)
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.record import TrialRecord
from recipelab.trajectory.verdict import Rung
from recipelab.trajectory.width_check import CONTROL_ARM, WIDTH_KIND, WIDTH_MULTIPLE


def proxy(trial_id: str, val_bpb: float, *, baseline: bool = False, seed: int = 0) -> TrialRecord:
    lr = 1e-3 + int(trial_id[1:]) * 1e-4  # a distinct recipe per trial
    return TrialRecord(campaign="c", trial_id=trial_id, kind="proxy", status="complete",
                       val_bpb=val_bpb, proposer="baseline" if baseline else "classical-tpe",
                       edit={"seed": seed} if baseline and seed else
                       ({} if baseline else {"optimizer.lr": lr}),
                       recipe={"seed": seed, "steps": 60,
                               "optimizer": {"lr": 1e-3 if baseline else lr}})


def run(trial_id: str, parent: str, steps: int, val_bpb: float, *, seed: int = 0,
        kind: str = "rung") -> TrialRecord:
    losses = [4.0 - 2.0 * i / (steps - 1) for i in range(steps)]  # a healthy falling curve
    return TrialRecord(campaign="c", trial_id=trial_id, kind=kind, status="complete",
                       val_bpb=val_bpb, parent=parent, metrics={"losses": losses},
                       verdict="stable" if kind == "stress" else None,
                       recipe={"seed": seed, "steps": steps})


# the proxy ranks p0001 < p0002 < ... ; p0000 is the baseline
PROXIES = [proxy("p0000", 2.00, baseline=True), proxy("p0001", 1.90), proxy("p0002", 1.91),
           proxy("p0003", 1.92), proxy("p0004", 1.93), proxy("p0005", 1.94),
           proxy("p0006", 1.95)]


def top(gains: Mapping[str, tuple[float, ...]], base: tuple[float, ...] = (1.50, 1.60, 1.55),
        steps: int = 1000) -> list[TrialRecord]:
    """Top-rung runs at seeds 0, 1, ...: the baseline's ``base`` and each finalist's
    ``base - gain`` per seed (as many seeds as it has gains)."""
    seeds = range(max(len(g) for g in gains.values()))
    records = [run(f"sb{s}", "p0000", steps, base[s], seed=s, kind="stress") for s in seeds]
    for parent, per_seed in gains.items():
        records += [run(f"s{parent}-{s}", parent, steps, base[s] - g, seed=s, kind="stress")
                    for s, g in enumerate(per_seed)]
    return records


def test_the_rungs_multiply_by_eta_up_to_the_stress_horizon() -> None:
    assert rung_steps(60, 1000, 3) == [180, 540, 1000]
    assert rung_steps(60, 1000, 2) == [120, 240, 480, 1000]
    assert rung_steps(60, 200, 3) == [200], "180 is too close below 200 to be a rung of its own"
    assert rung_steps(60, 1000, 3, first=100) == [100, 300, 1000]
    with pytest.raises(ValueError, match="eta must be at least 2"):
        rung_steps(60, 1000, 1)


def test_each_rung_keeps_the_best_third_but_never_fewer_than_the_finalists() -> None:
    assert climbers(17, 3, 3) == 6
    assert climbers(6, 3, 3) == 3
    assert climbers(2, 3, 3) == 2, "never more than entered"
    assert climbers(30, 3, 3, cap=10) == 10
    plan = plan_ladder(17, proxy_steps=60, stress_steps=1000, eta=3, promote=2, first_size=10)
    assert plan == [RungPlan(180, 6), RungPlan(540, 2), RungPlan(1000, 2, seeds=4, family=24)]
    assert plan[-1].runs == 36, (
        "two finalists and the baseline at four seeds, each also at × ½ and × 2 there")
    assert describe_ladder(plan, 60, 17) == (
        "60 steps ×17 → 180 ×6 → 540 ×2 → 1000 ×2 at 4 seeds and 3 rates (+ the baseline and its "
        "learning-rate family at every rung)")
    assert plan_ladder(17, proxy_steps=60, stress_steps=1000, eta=3, promote=0) == []


def test_the_first_rung_is_chosen_with_probes_of_eta_times_its_climbers() -> None:
    """With the horizon rule on, the best ``eta`` × the first rung's climbers train again at
    the proxy's steps at a lower and a higher rate; none when every candidate climbs anyway."""
    assert probed(17, 3, 3, cap=6) == 17, "6 climb: the best 18, all 17"
    assert probed(100, 3, 3, cap=10) == 30
    assert probed(3, 3, 3) == 0, "all three climb: nothing to choose"
    plan = plan_ladder(17, proxy_steps=60, stress_steps=1000, eta=3, promote=3, first_size=6,
                       family=True)
    assert [r.probes for r in plan] == [34, 0, 0], "each probed candidate: one below, one above"
    assert plan[0].runs == 6 + 1 + 2, "the probes are priced apart: they train the proxy's steps"
    assert describe_ladder(plan, 60, 17).startswith(
        "60 steps ×17 (the best 17 again at a lower and a higher rate) → 180 ×6 → 540 ×3")


def test_a_rung_ranks_by_paired_gain_and_decides_who_climbs_to_the_next() -> None:
    """The 180-step rung reverses the proxy's order of p0001 and p0002; the 540-step rung's
    climbers come from it, and the proxy's p0003 (not among them) never climbs again."""
    records = [*PROXIES, run("r0", "p0000", 180, 3.00), run("r1", "p0001", 180, 2.90),
               run("r2", "p0002", 180, 2.80)]
    ledger = Ledger(records, promote=1, rung_size=10, eta=3)
    assert [r.trial_id for r in ledger.first_climbers] == ["p0001", "p0002"], "ceil(6 / 3)"
    assert [r.trial_id for r in ledger.ranked_at(180)] == ["p0002", "p0001"]
    assert ledger.gains_at("p0002", 180) == {0: pytest.approx(0.20)}
    assert [r.trial_id for r in ledger.climbing_to(540)] == ["p0002"]
    assert [r.trial_id for r in ledger.climbing_to(1000, top=True)] == ["p0002"]
    assert ledger.top_rung() == Rung(180, (0,), "rung")


def probe(trial_id: str, parent: str, val_bpb: float, *, seed: int = 0,
          status: str = "complete") -> TrialRecord:
    """``parent``'s probe: a family run at the proxy's 60 steps at 2.5 × its rate."""
    return run(trial_id, parent, 60, val_bpb, seed=seed).model_copy(update={
        "proposer": "lr-family", "edit": {"lr_family": 2.5}, "status": status})


def test_the_first_rung_takes_each_candidates_better_of_its_proxy_and_its_probe() -> None:
    """p0005 (fifth at its own rate) probes best and climbs, at 2.5 × its rate; a probe
    that failed, trained another seed, or is the baseline's family ranks nothing."""
    records = [*PROXIES, probe("r0", "p0005", 1.85), probe("r1", "p0001", 1.95),
               probe("r2", "p0004", 1.80, seed=1), probe("r3", "p0003", 1.70, status="failed"),
               probe("r4", "p0000", 1.60)]
    ledger = Ledger(records, promote=1, rung_size=10, eta=3)
    assert [r.trial_id for r in ledger.climbing_to(180)] == ["p0005", "p0001"]
    assert ledger.first_climbers == ledger.climbing_to(180)
    by_id = {r.trial_id: r for r in records}
    assert ledger.at_proxy_steps(by_id["p0005"]) == (1.85, 2.5)
    assert ledger.at_proxy_steps(by_id["p0001"]) == (1.90, 1.0), "its own rate scored better"
    assert ledger.at_proxy_steps(by_id["p0004"]) == (1.93, 1.0), "the probe trained seed 1"
    assert ledger.at_proxy_steps(by_id["p0003"]) == (1.92, 1.0), "the probe failed"
    assert [r.trial_id for r in ledger.contenders][:2] == ["p0001", "p0002"], (
        "the proxy's own ranking is unchanged")
    assert ledger.ranked_at(60) == [], "a probe is no rung of its own"


def test_a_candidate_tied_with_the_last_climber_at_the_proxy_climbs_too() -> None:
    """The baseline's seeds put the proxy's noise floor at 0.03: p0003, 0.02 behind the
    second climber, is tied with it and climbs; p0004, 0.08 behind, is not; ``rung_size``
    still caps the rung."""
    records = [proxy("p0000", 2.00, baseline=True), proxy("p0007", 2.03, baseline=True, seed=1),
               proxy("p0001", 1.90), proxy("p0002", 1.91), proxy("p0003", 1.93),
               proxy("p0004", 1.99), proxy("p0005", 2.10), proxy("p0006", 2.20)]
    ledger = Ledger(records, promote=1, rung_size=10, eta=3)
    assert ledger.noise is not None and ledger.noise.spread == pytest.approx(0.03)
    assert [r.trial_id for r in ledger.climbing_to(180)] == ["p0001", "p0002", "p0003"]
    assert ledger.first_climbers == ledger.climbing_to(180)
    capped = Ledger(records, promote=1, rung_size=2, eta=3)
    assert [r.trial_id for r in capped.climbing_to(180)] == ["p0001", "p0002"]
    unseeded = Ledger([r for r in records if r.trial_id != "p0007"], promote=1, eta=3)
    assert [r.trial_id for r in unseeded.climbing_to(180)] == ["p0001", "p0002"], (
        "one baseline seed: no floor, no ties")


def test_learning_rate_family_runs_rank_nothing() -> None:
    family = run("r9", "p0003", 180, 1.00).model_copy(update={"proposer": "lr-family"})
    ledger = Ledger([*PROXIES, run("r0", "p0000", 180, 3.00), run("r1", "p0001", 180, 2.9),
                     family], promote=1)
    assert [r.trial_id for r in ledger.ranked_at(180)] == ["p0001"]


def test_the_winner_is_named_at_the_top_rung_when_its_paired_gain_is_outside_the_interval() -> None:
    records = [*PROXIES, *top({"p0001": (0.20, 0.22, 0.21), "p0002": (0.05, 0.07, 0.06)})]
    ledger = Ledger(records)
    verdict = ledger.verdict()
    assert verdict is not None and verdict.primary is not None
    assert verdict.primary.trial_id == "p0001" and verdict.fallback is None
    assert verdict.gain is not None and verdict.gain.value == pytest.approx(0.21)
    assert verdict.gain.low > 0
    winner = ledger.winner
    assert winner is not None and winner.record.trial_id == "p0001" and winner.evidence == "stress"
    line = ledger.winner_line()
    assert line.startswith("winner: p0001, evidence: top rung at 1000 steps, 3 seeds, gain over "
                           "the baseline (its learning-rate family did not train here: untuned) "
                           "+0.2100 [")
    assert "(90% paired, Bonferroni over 4 tests: each at 97.5%, 3 seeds)" in line
    assert ledger.top_rung() == Rung(1000, (0, 1, 2), "stress")


def test_the_interval_is_corrected_for_the_finalists_and_the_looks() -> None:
    """Each finalist's interval is drawn at 1 - 10% / (finalists × looks): a best of three
    has three chances to look lucky, and a close call looks twice."""
    gains = {"p0001": (0.20, 0.26, 0.23), "p0002": (0.05, 0.07, 0.06), "p0003": (0.0, 0.01, 0.0)}
    records = [*PROXIES, *top(gains)]
    # Student's t at 2 degrees of freedom: 7.6488 standard errors at 98.33%, 5.3393 at 96.67%
    se = statistics.stdev(gains["p0001"]) / 3 ** 0.5
    for looks, t in ((2, 7.6488), (1, 5.3393)):
        verdict = Ledger(records, looks=looks).verdict()
        assert verdict is not None and verdict.gain is not None
        assert verdict.gain.tests == 3 * looks
        assert verdict.gain.low == pytest.approx(0.23 - t * se, abs=1e-4)
    one = Ledger([*PROXIES, *top({"p0001": gains["p0001"]})], looks=1).verdict()
    assert one is not None and one.gain is not None and one.gain.tests == 1
    assert "Bonferroni" not in one.gain.text() and "(90% paired, 3 seeds)" in one.gain.text()


def family(base: tuple[float, ...], steps: int = 1000) -> list[TrialRecord]:
    """The baseline's learning-rate family at the top rung, a seed per value: × ½ scores
    ``base`` and × 2 half a bit per byte worse."""
    runs = []
    for factor, offset in ((0.5, 0.0), (2.0, 0.5)):
        for seed, value in enumerate(base):
            record = run(f"rf{factor:g}-{seed}", "p0000", steps, value + offset, seed=seed)
            runs.append(record.model_copy(update={"proposer": "lr-family",
                                                   "edit": {"lr_family": factor}}))
    return runs


def test_the_gain_is_over_the_baseline_at_its_best_rate() -> None:
    """The control is the tuned baseline: the best of its family by the mean over the seeds
    they share. A pick that beats only the untuned baseline is no winner, and says why."""
    records = [*PROXIES, *top({"p0001": (0.20, 0.22, 0.21), "p0002": (0.05, 0.07, 0.06)})]
    beaten = Ledger([*records, *family((1.40, 1.50, 1.45))])
    control = beaten.control(1000)
    assert control is not None and control.factor == 0.5 and control.compared == (0.5, 1.0, 2.0)
    verdict = beaten.verdict()
    assert verdict is not None and verdict.primary is not None
    assert verdict.gain is not None and verdict.gain.value == pytest.approx(0.11)
    assert "gain over the tuned baseline (0.5× its rate, the best of 0.5/1/2× here)" in (
        beaten.winner_line())
    lost = Ledger([*records, *family((1.20, 1.30, 1.25))])
    verdict = lost.verdict()
    assert verdict is not None and verdict.primary is None and lost.winner is None
    assert verdict.reason is not None and "no better than lowering the learning rate" in (
        verdict.reason)
    assert lost.kept_baseline is not None
    own = Ledger([*records, *family((1.55, 1.65, 1.60))]).control(1000)
    assert own is not None and own.factor == 1.0 and own.compared == (0.5, 1.0, 2.0)


def test_a_rate_that_diverged_anywhere_is_no_control() -> None:
    records = [*PROXIES, *top({"p0001": (0.20, 0.22, 0.21)}), *family((1.40, 1.50, 1.45))]
    blown = [r.model_copy(update={"val_bpb": None, "status": "failed", "reason": "diverged"})
             if r.trial_id == "rf0.5-2" else r for r in records]
    control = Ledger(blown).control(1000)
    assert control is not None and control.factor == 1.0 and control.compared == (1.0, 2.0)


def test_a_family_best_at_its_edge_trains_one_step_beyond_it_up_to_its_reach() -> None:
    assert next_family_rate(0.5, [0.5, 2.0]) == 0.25, "the lowest rate is best: one lower"
    assert next_family_rate(2.0, [0.5, 2.0]) == 4.0, "the highest is best: one higher"
    assert next_family_rate(1.0, [0.5, 2.0]) is None, "a best inside the family is placed"
    assert next_family_rate(0.5, [0.5]) is None, "two rates are no family yet"
    assert next_family_rate(0.5, [0.25, 0.5, 2.0]) is None, (
        "a rate beyond the best was tried (a diverged one too): nothing more to learn there")
    low = 1 / FAMILY_REACH
    assert next_family_rate(low, [low, 0.5, 2.0]) is None, "the reach ends it"
    assert next_family_rate(FAMILY_REACH, [0.5, 2.0, FAMILY_REACH]) is None


def test_the_control_names_every_rate_it_tried_and_the_next_beyond_its_edge() -> None:
    records = [*PROXIES, *top({"p0001": (0.20, 0.22, 0.21)}), *family((1.40, 1.50, 1.45))]
    control = Ledger(records).control(1000)
    assert control is not None and control.factor == 0.5 and control.tried == (0.5, 1.0, 2.0)
    assert control.next_rate() == 0.25
    blown = [r.model_copy(update={"val_bpb": None, "status": "failed", "reason": "diverged"})
             if r.trial_id == "rf0.5-2" else r for r in records]
    control = Ledger(blown).control(1000)
    assert control is not None and control.compared == (1.0, 2.0)
    assert control.tried == (0.5, 1.0, 2.0) and control.next_rate() is None, (
        "× ½ diverged at a seed: the family does not go lower")
    alone = Ledger([*PROXIES, *top({"p0001": (0.20,)})]).control(1000)
    assert alone is not None and alone.next_rate() is None, "no family, nothing to follow"


def test_a_lead_inside_the_interval_recommends_both_primary_and_fallback() -> None:
    records = [*PROXIES, *top({"p0001": (0.20, 0.26, 0.23), "p0002": (0.21, 0.23, 0.22)})]
    verdict = Ledger(records).verdict()
    assert verdict is not None and verdict.primary is not None and verdict.fallback is not None
    assert Ledger(records).kept_baseline is None
    assert (verdict.primary.trial_id, verdict.fallback.trial_id) == ("p0001", "p0002")
    assert "fallback: p0002" in verdict.line() and "recommend both" in verdict.line()


def test_a_gain_inside_the_paired_interval_names_no_winner_and_says_why() -> None:
    """p0001 gains 0.10 at one seed and loses 0.08 at the other: the seeds explain it."""
    records = [*PROXIES, *top({"p0001": (0.10, -0.08), "p0002": (0.01, -0.05)})]
    ledger = Ledger(records)
    verdict = ledger.verdict()
    assert verdict is not None and verdict.primary is None
    assert ledger.winner is None
    line = ledger.winner_line()
    assert line.startswith("no winner beyond noise: the best finalist p0001 gains +0.0100")
    assert "1000 steps" in line and "interval includes 0" in line
    assert ledger.no_winner_reason == line
    kept = ledger.kept_baseline  # what the hand-off trains: the campaign's answer
    assert kept is not None and kept.trial_id == "p0000"


def test_finalists_worse_than_the_baseline_beyond_noise_keep_it_without_blaming_the_seeds() -> None:
    """Both finalists lose about 0.3 at both seeds: the interval lies below 0, so the line
    must not say that it includes 0 or that more seeds could help."""
    records = [*PROXIES, *top({"p0001": (-0.29, -0.30, -0.295), "p0002": (-0.31, -0.32, -0.3)})]
    ledger = Ledger(records)
    assert ledger.winner is None
    line = ledger.winner_line()
    assert line.startswith("no winner beyond noise: the best finalist p0001 gains -0.2950")
    assert "worse than the baseline" in line and "keep the baseline" in line
    assert "includes 0" not in line and "--top-seeds" not in line


def test_when_every_finalist_diverges_and_the_baseline_does_not_the_campaign_keeps_it() -> None:
    """Its finalists (``--promote 2``) blew up at the top rung beside a baseline that did not:
    the answer is the baseline, which the hand-off trains. A third-ranked candidate that never
    ran there is no answer, and a baseline that diverged too leaves none."""
    def verdict(word: str) -> Callable[[TrialRecord], TrialRecord]:
        return lambda record: record.model_copy(update={"verdict": word})

    runs = top({"p0001": (0.1, 0.1), "p0002": (0.1, 0.1)})
    diverged = verdict("diverged")
    finalists_blew_up = [*PROXIES, *map(verdict("flat"), runs[:2]), *map(diverged, runs[2:])]
    ledger = Ledger(finalists_blew_up, promote=2)
    assert ledger.winner is None
    kept = ledger.kept_baseline
    assert kept is not None and kept.trial_id == "p0000"
    assert ledger.recommended == (kept, "the baseline the campaign keeps: every finalist's own "
                                        "stress run diverged and the baseline's did not")
    assert "diverged and the baseline's did not: keep the baseline" in ledger.winner_line()
    all_blew_up = Ledger([*PROXIES, *map(diverged, runs)], promote=2)
    assert all_blew_up.kept_baseline is None and all_blew_up.recommended is None
    assert "so no recipe is recommended" in all_blew_up.winner_line()


def one_size_up(winner: float, baseline: float, parent: str = "p0001") -> list[TrialRecord]:
    """The width rung's runs at twice the width: ``parent``'s, and the baseline's control."""
    recipe = proxy_recipe("tiny").model_dump(mode="json")
    return [TrialRecord(campaign="c", trial_id=f"w000{i}", kind=WIDTH_KIND, status="complete",
                        recipe=recipe, parent=trial, budget=1000, val_bpb=value,
                        edit={"width_multiple": WIDTH_MULTIPLE, **arm})
            for i, (trial, value, arm) in enumerate(((parent, winner, {}),
                                                     ("p0000", baseline, CONTROL_ARM)))]


def test_a_winner_the_baseline_beats_one_size_up_beyond_the_noise_is_overruled() -> None:
    """The ladder's winner still wins the ladder (the width rung trains it), but what the
    campaign recommends, and the hand-off trains, is the baseline."""
    named = [*PROXIES, proxy("p0007", 2.03, baseline=True, seed=1),  # a floor of 0.03
             *top({"p0001": (0.20, 0.22, 0.21)})]
    ledger = Ledger([*named, *one_size_up(3.40, 3.30)])
    assert ledger.winner is not None and ledger.winner.record.trial_id == "p0001"
    assert ledger.ladder_recommended is not None and ledger.ladder_recommended[0].trial_id == "p0001"
    kept = ledger.kept_baseline
    assert kept is not None and kept.trial_id == "p0000"
    because = ("one size up the baseline beat the winner p0001 by 0.1000, more than the noise "
               "floor (±0.0300)")
    assert ledger.recommended == (kept, f"the baseline the campaign keeps: {because}")
    assert ledger.winner_line().startswith("winner: p0001, evidence: top rung")
    assert ledger.winner_line().endswith(f"; but {because}: keep the baseline")


@pytest.mark.parametrize("width_runs", [
    one_size_up(3.32, 3.30),  # lost, within the floor
    one_size_up(3.30, 3.40),  # held
    one_size_up(3.40, 3.30, parent="p0002"),  # another recipe's run
], ids=["within the floor", "held", "not the winner's"])
def test_the_check_one_size_up_overrules_only_a_clear_loss_of_the_winner(
        width_runs: list[TrialRecord]) -> None:
    named = [*PROXIES, proxy("p0007", 2.03, baseline=True, seed=1),
             *top({"p0001": (0.20, 0.22, 0.21)})]
    ledger = Ledger([*named, *width_runs])
    assert ledger.kept_baseline is None and ledger.lost_one_size_up is None
    assert ledger.recommended is not None and ledger.recommended[0].trial_id == "p0001"
    assert "keep the baseline" not in ledger.winner_line()


def test_without_a_paired_top_rung_the_winner_line_says_it_is_provisional() -> None:
    ledger = Ledger(PROXIES)
    assert ledger.verdict() is None
    assert ledger.kept_baseline is None  # nothing measured against the baseline at length
    line = ledger.winner_line()
    assert line.startswith("winner (provisional): p0001, evidence: proxy at 60 steps")
    assert ledger.top_rung() == Rung(60, (0,), "proxy")


def more_seeds(parent: str, gains: dict[int, float], base: dict[int, float],
               steps: int = 1000) -> list[TrialRecord]:
    """Top-rung runs of ``parent`` and the baseline at further seeds (a close call's)."""
    return [record for seed, gain in gains.items()
            for record in (run(f"sb{seed}", "p0000", steps, base[seed], seed=seed, kind="stress"),
                           run(f"s{parent}-{seed}", parent, steps, base[seed] - gain, seed=seed,
                               kind="stress"))]


# A steady finalist beside a noisy one, as measured: p0001's two seeds agree, p0002's differ by
# 0.093, and pooled, p0002's spread puts 0 inside p0001's interval.
STEADY_AND_NOISY = {"p0001": (0.0237, 0.0242), "p0002": (-0.048, -0.142), "p0003": (-0.303, -0.306)}


def test_a_positive_gain_whose_interval_includes_0_is_a_close_call() -> None:
    verdict = Ledger([*PROXIES, *top({"p0001": (0.03, -0.01, 0.02), "p0002": (-0.05, -0.1, 0.0)})]
                     ).verdict()
    assert verdict is not None and verdict.primary is None and verdict.close_call
    assert verdict.best is not None and verdict.best.trial_id == "p0001"
    assert verdict.gain is not None and verdict.gain.low < 0 < verdict.gain.value
    below = Ledger([*PROXIES, *top({"p0001": (-0.29, -0.30)})]).verdict()
    assert below is not None and not below.close_call, "a loss is no close call"
    named = Ledger([*PROXIES, *top({"p0001": (0.20, 0.22, 0.21)})]).verdict()
    assert named is not None and not named.close_call, "nor is a named winner"


def test_from_three_paired_seeds_a_gain_has_its_own_interval() -> None:
    """Noise is per recipe: at four seeds p0001's steady gains set its interval, and p0002's
    spread no longer hides it."""
    records = [*PROXIES, *top(STEADY_AND_NOISY),
               *more_seeds("p0001", {2: 0.0251, 3: 0.0229}, {2: 1.55, 3: 1.58})]
    verdict = Ledger(records).verdict()
    assert verdict is not None and verdict.primary is not None
    assert verdict.primary.trial_id == "p0001" and verdict.gain is not None
    assert verdict.gain.seeds == 4 and verdict.gain.value == pytest.approx(0.023975)
    # Student's t at 3 degrees of freedom, 98.33% (3 finalists, 2 looks): 4.8567 standard
    # errors either side
    half = 4.8567 * statistics.stdev([0.0237, 0.0242, 0.0251, 0.0229]) / 2
    assert verdict.gain.low == pytest.approx(0.023975 - half, abs=1e-4)
    assert "4 seeds" in Ledger(records).winner_line()


def test_a_recipe_whose_own_seeds_disagree_stays_inside_the_noise() -> None:
    records = [*PROXIES, *top(STEADY_AND_NOISY),
               *more_seeds("p0001", {2: -0.0300, 3: 0.0650}, {2: 1.55, 3: 1.58})]
    verdict = Ledger(records).verdict()
    assert verdict is not None and verdict.primary is None and verdict.close_call
