"""Student's t quantiles, for an interval from a handful of paired seeds.

A gain measured at three or four seeds has an interval of its own: the mean ± t · s / √n, with
``t`` the quantile of Student's t at ``n - 1`` degrees of freedom. A normal quantile (or a
bootstrap of three values) would make it too narrow. The distribution function has a closed
form for whole degrees of freedom (Abramowitz & Stegun 26.7.3 and 26.7.4), and the quantile is
found by bisection, so no statistics library is needed for a number this small.
"""

from __future__ import annotations

import math

BISECTIONS = 100


def central_probability(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with ``df`` degrees of freedom (``t`` ≥ 0)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be 1 or more, got {df}")
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2 == 0:
        term, total = 1.0, 1.0
        for k in range(2, df, 2):  # 1 + ½cos² + (1·3)/(2·4)cos⁴ + … up to cos^(df-2)
            term *= c2 * (k - 1) / k
            total += term
        return math.sin(theta) * total
    if df == 1:
        return 2.0 * theta / math.pi
    term = total = math.cos(theta)
    for k in range(3, df - 1, 2):  # cos + (2/3)cos³ + (2·4)/(3·5)cos⁵ + … up to cos^(df-2)
        term *= c2 * (k - 1) / k
        total += term
    return 2.0 / math.pi * (theta + math.sin(theta) * total)


def t_quantile(confidence: float, df: int) -> float:
    """The ``t`` with P(|T| < t) = ``confidence``: the half-width, in standard errors, of a
    two-sided interval at that confidence from ``df + 1`` values."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    low, high = 0.0, 1.0
    while central_probability(high, df) < confidence:
        high *= 2.0
    for _ in range(BISECTIONS):
        mid = (low + high) / 2
        low, high = (mid, high) if central_probability(mid, df) < confidence else (low, mid)
    return (low + high) / 2
