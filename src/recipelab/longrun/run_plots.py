"""The long run's plots, the three a reference lab hands over with a pretraining run.

- ``loss-curve.png``: train and validation loss in nats/token against the step, with
  val_bpb (bits/byte, the measure that compares across tokenizers) on a second y-axis;
- ``gradnorm-curve.png``: the gradient norm, with the parameter norm on a second y-axis
  (their scales differ by orders of magnitude, so one axis would flatten one of them);
- ``throughput.png``: tokens/s against wall-clock hours, where a slow node or thermal
  throttling shows as a step down, with MFU on a second axis when it was measured.

A row's value may be ``None`` or ``""`` (not measured at that step, or read back from
``metrics.csv``), a number or a numeric string. A run stopped at its first step has nearly
empty series; every plot is still written, with its axes and a note saying what is missing,
so a reader never mistakes a missing file for a missing run.

Plain matplotlib :class:`~matplotlib.figure.Figure` objects on an Agg canvas, never pyplot,
so drawing touches no display and no global figure registry.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

Row = Mapping[str, object]

LOSS_PLOT = "loss-curve.png"
GRADNORM_PLOT = "gradnorm-curve.png"
THROUGHPUT_PLOT = "throughput.png"
PLOT_FILES = (LOSS_PLOT, GRADNORM_PLOT, THROUGHPUT_PLOT)

LEFT, RIGHT = "tab:blue", "tab:red"  # the colour of each y-axis, its label and its series


def _number(value: object) -> float | None:
    """``value`` as a finite float, or None when it was not measured (or is not finite)."""
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


@dataclass(frozen=True)
class Series:
    label: str
    xs: list[float]
    ys: list[float]


def series(rows: Sequence[Row], x: str, y: str, label: str) -> Series:
    """The rows where both ``x`` and ``y`` were measured, in row order."""
    pairs = [(a, b) for row in rows
             if (a := _number(row.get(x))) is not None and (b := _number(row.get(y))) is not None]
    return Series(label, [a for a, _ in pairs], [b for _, b in pairs])


def _draw(ax: Axes, line: Series, color: str, *, linestyle: str = "-") -> None:
    # markers keep a one- or two-point series (an eval every 100 steps) visible
    marker = "o" if len(line.xs) < 30 else ""
    ax.plot(line.xs, line.ys, color=color, linestyle=linestyle, marker=marker, markersize=4,
            label=line.label)


def _two_axes(path: Path, title: str, xlabel: str, left: list[Series], left_label: str,
              right: Series | None, right_label: str | None,
              right_when_empty: bool = True) -> Path:
    """One figure: ``left`` series on the left y-axis, ``right`` on a second y-axis, one
    legend for both, and a note in the middle when nothing at all was measured."""
    figure = Figure(figsize=(9, 4.5), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot(1, 1, 1)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(left_label, color=LEFT)
    ax.tick_params(axis="y", labelcolor=LEFT)
    ax.grid(True, alpha=0.3)
    for line, style in zip(left, ("-", "--", ":"), strict=False):
        if line.xs:
            _draw(ax, line, LEFT, linestyle=style)
    handles, labels = ax.get_legend_handles_labels()
    if right is not None and right_label is not None and (right.xs or right_when_empty):
        twin = ax.twinx()
        twin.set_ylabel(right_label, color=RIGHT)
        twin.tick_params(axis="y", labelcolor=RIGHT)
        if right.xs:
            _draw(twin, right, RIGHT)
        more_handles, more_labels = twin.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    if handles:
        # below the axes, in one row: a legend inside would hide the curve where it matters
        ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.14),
                  ncol=len(handles), fontsize=9, frameon=False)
    else:
        ax.text(0.5, 0.5, "nothing measured yet: the run stopped before its first logged row",
                transform=ax.transAxes, ha="center", va="center", color="gray")
    figure.tight_layout()
    figure.savefig(path, format="png", metadata={"Software": None})
    return path


def write_plots(rows: Sequence[Row], out_dir: Path) -> list[Path]:
    """Write :data:`PLOT_FILES` into ``out_dir`` from the run's metrics rows; their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    loss = _two_axes(
        out_dir / LOSS_PLOT, "Loss", "step",
        [series(rows, "step", "train_loss", "train loss (nats/token)"),
         series(rows, "step", "val_loss", "validation loss (nats/token)")],
        "loss (nats/token)",
        series(rows, "step", "val_bpb", "val_bpb (bits/byte)"), "val_bpb (bits/byte)")
    norms = _two_axes(
        out_dir / GRADNORM_PLOT, "Gradient and parameter norms", "step",
        [series(rows, "step", "grad_norm", "grad norm (L2, before clipping)")],
        "grad norm (L2)",
        series(rows, "step", "param_norm", "param norm (L2)"), "param norm (L2)")
    throughput = _two_axes(
        out_dir / THROUGHPUT_PLOT, "Throughput", "wall-clock time (hours)",
        [series(rows, "elapsed_h", "tokens_per_s", "tokens/s (all processes)")],
        "throughput (tokens/s)",
        series(rows, "elapsed_h", "mfu", "MFU (fraction of peak)"), "MFU (fraction of peak)",
        right_when_empty=False)
    return [loss, norms, throughput]
