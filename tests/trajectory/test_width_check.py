"""The check one size up: the recommendation against the baseline at twice the proxy's width,
judged by the campaign's noise floor; a loss beyond it is what makes the campaign keep the
baseline (the ledger's side is in test_ladder.py)."""

from __future__ import annotations

import pytest

from recipelab.trajectory.record import TrialRecord
from recipelab.trajectory.width_check import WidthCheck, width_check
from recipelab.transfer.width import measured_gap

from ..transfer.test_width import width_run


def test_the_check_one_size_up_sets_the_baseline_beside_the_recommendation() -> None:
    records = [width_run("w0000", 1, 3.4), width_run("w0001", 2, 3.3),
               width_run("w0002", 2, 3.38, parent="p0000", control=True)]
    check = width_check(records)
    assert check is not None and check.runs == ("w0001", "w0002")
    assert check.gain == pytest.approx(0.08) and check.held
    assert "gain +0.0800, the gain held" in check.describe()
    worse = width_check([*records[:2], width_run("w0002", 2, 3.25, parent="p0000", control=True)])
    assert worse is not None and not worse.held
    assert "the gain did not hold: keep the baseline" in worse.describe()


def test_a_gain_one_size_up_within_the_campaigns_noise_floor_says_nothing() -> None:
    tie = WidthCheck(713_728, 3.30, 3.31, ("w0001", "w0002"), floor=0.04)
    assert tie.within_noise and not tie.held
    assert "+0.0100, within the noise floor (±0.0400)" in tie.describe()
    clear = WidthCheck(713_728, 3.30, 3.38, ("w0001", "w0002"), floor=0.04)
    assert clear.held and not clear.within_noise
    lost = WidthCheck(713_728, 3.38, 3.30, ("w0001", "w0002"), floor=0.04)
    assert lost.lost and not lost.held and not lost.within_noise
    assert "-0.0800, the baseline won by more than the noise floor (±0.0400): the campaign " \
           "keeps the baseline" in lost.describe()
    assert not tie.lost and not clear.lost and lost.to_json()["lost"] is True


def test_over_two_seeds_the_check_compares_the_means_of_the_seeds_both_trained() -> None:
    records = [width_run("w0001", 2, 3.30), width_run("w0002", 2, 3.38, parent="p0000", control=True),
               width_run("w0004", 2, 3.40, seed=1),
               width_run("w0005", 2, 3.36, parent="p0000", control=True, seed=1),
               width_run("w0007", 2, 3.00, seed=2)]  # no control at seed 2: no part of it
    check = width_check(records)
    assert check is not None and check.seeds == 2 and check.runs == ("w0001+w0004", "w0002+w0005")
    assert check.gain == pytest.approx(0.02)
    assert "mean of 2 seeds" in check.describe() and check.to_json()["seeds"] == 2


def test_a_loss_without_a_noise_floor_only_cautions() -> None:
    unmeasured = WidthCheck(713_728, 3.38, 3.30, ("w0001", "w0002"))
    assert not unmeasured.lost and not unmeasured.held
    assert "the gain did not hold: keep the baseline as the cloud run's control arm" \
           in unmeasured.describe()


def test_the_check_of_one_recommendation_reads_only_its_own_run() -> None:
    records = [width_run("w0001", 2, 3.3, parent="p0003"), width_run("w0003", 2, 3.5, parent="p0005"),
               width_run("w0002", 2, 3.38, parent="p0000", control=True)]
    latest = width_check(records)
    assert latest is not None and latest.runs == ("w0003", "w0002")
    mine = width_check(records, "p0003")
    assert mine is not None and mine.runs == ("w0001", "w0002")
    assert width_check(records, "p0009") is None


@pytest.mark.parametrize("control", [
    width_run("w0002", 2, 3.38, parent="p0000", control=True, seed=1),  # another seed
    width_run("w0002", 1, 3.38, parent="p0000", control=True),  # another size
    width_run("w0002", 2, None, parent="p0000", control=True, status="failed"),
], ids=["seed", "size", "failed"])
def test_no_check_without_a_scored_control_of_the_same_size_and_seed(control: TrialRecord) -> None:
    assert width_check([width_run("w0000", 1, 3.4), width_run("w0001", 2, 3.3), control]) is None


def test_the_runs_at_the_rate_familys_other_rates_are_no_part_of_the_check_or_the_gap() -> None:
    """The recommendation's run at twice its rate, later in the records, scored far better: it
    measures the rate's size exponent, not the recipe one size up."""
    records = [width_run("w0000", 1, 3.4), width_run("w0001", 2, 3.3),
               width_run("w0002", 2, 3.38, parent="p0000", control=True)]
    faster = [r.model_copy(update={"trial_id": f"w000{3 + i}", "val_bpb": 2.0,
                                   "edit": {**r.edit, "lr_family": 2.0}})
              for i, r in enumerate(records[:2])]
    check, gap = width_check([*records, *faster]), measured_gap([*records, *faster])
    assert check is not None and check.runs == ("w0001", "w0002")
    assert check.gain == pytest.approx(0.08)
    assert gap is not None and gap.runs == ("w0000", "w0001")
