"""Student's t quantiles: the textbook table's values, found without a statistics library."""

from __future__ import annotations

import pytest

from recipelab.trajectory.student_t import central_probability, t_quantile


@pytest.mark.parametrize(("df", "ninety", "ninety_five"), [
    (1, 6.314, 12.706), (2, 2.920, 4.303), (3, 2.353, 3.182), (4, 2.132, 2.776),
    (5, 2.015, 2.571), (10, 1.812, 2.228), (30, 1.697, 2.042)])
def test_the_quantiles_are_the_tables(df: int, ninety: float, ninety_five: float) -> None:
    assert t_quantile(0.90, df) == pytest.approx(ninety, abs=5e-4)
    assert t_quantile(0.95, df) == pytest.approx(ninety_five, abs=5e-4)


def test_many_degrees_of_freedom_approach_the_normal() -> None:
    assert t_quantile(0.90, 10_000) == pytest.approx(1.6449, abs=1e-3)


def test_the_central_probability_grows_from_0_to_1() -> None:
    values = [central_probability(t, 3) for t in (0.0, 0.5, 1.0, 3.0, 100.0)]
    assert values[0] == 0.0 and values == sorted(values) and values[-1] == pytest.approx(1.0, abs=1e-5)


def test_nonsense_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="degrees of freedom"):
        central_probability(1.0, 0)
    with pytest.raises(ValueError, match="between 0 and 1"):
        t_quantile(1.0, 3)
