"""The saturating power law fitted to a loss curve."""

from __future__ import annotations

import math

import pytest

from recipelab.transfer.powerlaw import fit_power_law


def test_the_fit_recovers_a_known_curve() -> None:
    steps = [50.0 * i for i in range(1, 21)]
    fit = fit_power_law(steps, [3.0 * t ** -0.5 + 1.2 for t in steps])
    assert fit is not None
    assert fit.a == pytest.approx(3.0, rel=0.02) and fit.b == pytest.approx(0.5, rel=0.02)
    assert fit.c == pytest.approx(1.2, abs=0.01)
    assert fit(10_000) == pytest.approx(3.0 * 10_000 ** -0.5 + 1.2, abs=0.01)


def test_a_curve_that_does_not_fall_fits_as_its_mean() -> None:
    fit = fit_power_law([1, 2, 3, 4, 5], [2.0, 2.1, 2.2, 2.3, 2.4])
    assert fit is not None and fit.a == 0.0 and fit.c == pytest.approx(2.2)


def test_a_curve_not_yet_bent_toward_its_floor_is_held_at_a_floor_of_zero() -> None:
    """A short curve whose best fit puts its floor below 0 extrapolates without limit; the
    fit holds the floor at 0, says so, and falls more slowly beyond the curve."""
    seen = [1e4 * i for i in range(1, 11)]
    unbent = [33.5 * x ** -0.137 - 3.83 for x in seen]
    fit = fit_power_law(seen, unbent)
    assert fit is not None and fit.bounded and fit.c == 0.0
    assert "floor held at 0" in fit.describe()
    assert 33.5 * 1e7 ** -0.137 - 3.83 < 0 < fit(1e7) < fit(1e6) < unbent[-1]
    bent = fit_power_law(seen, [3.0 * x ** -0.5 + 1.2 for x in seen])
    assert bent is not None and not bent.bounded


def test_too_few_finite_points_give_no_fit() -> None:
    assert fit_power_law([10, 20, 30], [3.0, 2.5, 2.2]) is None
    assert fit_power_law([10, 20, 30, 40], [3.0, math.nan, 2.2, 2.1]) is None
    assert fit_power_law([0, 10, 20, 30], [9.0, 3.0, 2.5, 2.2]) is None  # step 0 has no t^(-b)


def test_three_points_place_the_law_when_asked_to() -> None:
    """A saturating power law has three constants: three ends of completed runs place it."""
    fit = fit_power_law([10, 30, 100], [2.0 * t ** -0.5 + 1.0 for t in (10, 30, 100)],
                        min_points=3)
    assert fit is not None and fit.points == 3
    assert fit(1000) == pytest.approx(2.0 * 1000 ** -0.5 + 1.0, rel=0.01)
