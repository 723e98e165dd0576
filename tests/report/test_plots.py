"""The report's plots (:mod:`recipelab.report.plots`): PNGs at the report's width whatever
the data, the same bytes for the same data (a report rewritten every 30 s changes only when
the campaign does), and one panel per rung, as tall as the rungs need."""

from __future__ import annotations

import struct

from recipelab.report import plots
from recipelab.report.context import RunningCurve
from recipelab.report.plots import CurveSeries

REPORT_WIDTH_PX = 800  # 8 inches at plots.DPI


def size(png: bytes) -> tuple[int, int]:
    """A PNG's width and height, from its header."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", png[16:24])
    return width, height


def rung(label: str, baseline: bool = False) -> CurveSeries:
    tokens = [1e4, 2e4, 4e4]
    return CurveSeries(label, tokens, [[4.0, 3.5, 3.2], [4.1, 3.6, 3.1]], baseline=baseline)


def test_the_ladder_is_one_panel_per_rung_at_the_reports_width() -> None:
    one = plots.rung_curves([("top rung: 200 steps", [rung("p0009"), rung("baseline", True)])])
    two = plots.rung_curves([("rung: 60 steps", [rung("p0009"), rung("baseline", True)]),
                             ("top rung: 200 steps", [rung("p0009"), rung("baseline", True)])])
    assert size(one)[0] == size(two)[0] == REPORT_WIDTH_PX
    assert size(two)[1] == 2 * size(one)[1]  # each rung its own panel, none squeezed


def test_the_same_data_draws_the_same_bytes() -> None:
    curves = [RunningCurve("p0003", (1, 2, 3), (4.0, 3.8, 3.7))]
    assert plots.running_curves(curves) == plots.running_curves(curves)
    bars = {"learning rate": 0.12, "optimizer betas": 0.01}
    assert plots.horizontal_bars(bars, "gain") == plots.horizontal_bars(bars, "gain")
