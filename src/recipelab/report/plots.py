"""The report's plots, drawn with matplotlib's Agg canvas straight to PNG bytes.

No pyplot: figures are plain :class:`~matplotlib.figure.Figure` objects on an Agg canvas, so
drawing a report never touches a display, a global figure registry or the user's backend.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from recipelab.report.context import RunningCurve
from recipelab.trajectory.analysis import best_so_far, scored_proxies
from recipelab.trajectory.noise import NoiseFloor
from recipelab.trajectory.record import TrialRecord

DPI = 100


def _png(figure: Figure) -> bytes:
    FigureCanvasAgg(figure)  # attaches itself: savefig draws with Agg, whatever the user's backend
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def _figure(width: float = 8.0, height: float = 4.0, columns: int = 1,
            rows: int = 1) -> tuple[Figure, list[Axes]]:
    figure = Figure(figsize=(width, height), dpi=DPI)
    axes = [figure.add_subplot(rows, columns, i + 1) for i in range(rows * columns)]
    return figure, axes


def progress(records: Sequence[TrialRecord], noise: NoiseFloor | None) -> bytes:
    """val_bpb of every scored proxy trial by iteration, coloured by proposer, with the
    best-so-far line and, when measured, the baseline's noise band."""
    figure, (ax,) = _figure()
    scored = scored_proxies(records)
    for proposer in sorted({r.proposer for r in scored}):
        mine = [r for r in scored if r.proposer == proposer]
        ax.scatter([r.iteration for r in mine], [float(r.val_bpb or 0.0) for r in mine], label=proposer, s=24)
    line = best_so_far(records)
    ax.step([i for i, _ in line], [v for _, v in line], where="post", color="black",
            linewidth=1.2, label="best recipe so far (its mean over seeds)")
    if noise is not None:
        ax.axhspan(noise.mean - noise.spread, noise.mean + noise.spread, color="grey", alpha=0.15,
                   label=f"baseline ± seed spread ({len(noise.seeds)} seeds)")
    ax.set_xlabel("iteration")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("val_bpb (lower is better)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _png(figure)


@dataclass(frozen=True)
class CurveSeries:
    """One recipe's runs at one rung: the loss at each token count for each seed."""

    label: str
    tokens: list[float]
    losses: list[list[float]]  # per seed, on ``tokens``
    baseline: bool = False


def rung_curves(panels: Sequence[tuple[str, Sequence[CurveSeries]]]) -> bytes:
    """One panel per rung, x in tokens: every recipe's mean training loss over its seeds, the
    seeds' range as a band, the baseline (and its rate family) in greys, so that the curves
    compare at equal tokens on one axis."""
    figure, axes = _figure(width=8.0, height=3.6 * len(panels), rows=len(panels))
    for ax, (title, series) in zip(axes, panels, strict=True):
        greys = iter(("black", "dimgrey", "darkgrey"))
        for one in series:
            columns = list(zip(*one.losses, strict=True))
            mean = [sum(c) / len(c) for c in columns]
            color = next(greys, "grey") if one.baseline else None
            seeds = len(one.losses)
            line, = ax.plot(one.tokens, mean, color=color, linewidth=1.8 if one.baseline else 1.4,
                            zorder=3 if one.baseline else 2,  # the control stays in sight
                            label=f"{one.label} ({seeds} seed{'s' if seeds != 1 else ''})")
            if seeds > 1:
                ax.fill_between(one.tokens, [min(c) for c in columns], [max(c) for c in columns],
                                color=line.get_color(), alpha=0.15, linewidth=0)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("training tokens")
        ax.set_ylabel("train loss")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _png(figure)


def running_curves(curves: Sequence[RunningCurve]) -> bytes:
    """The training loss of each trial in flight so far, one line each."""
    figure, (ax,) = _figure(height=3.2)
    for curve in curves:
        ax.plot(curve.steps, curve.losses, marker=".", label=curve.trial_id)
    ax.set_xlabel("step")
    ax.set_ylabel("train loss")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(figure)


def horizontal_bars(values: Mapping[str, float], xlabel: str) -> bytes:
    """One bar per label, largest on top (importance, reason counts)."""
    items = sorted(values.items(), key=lambda kv: kv[1])
    figure, (ax,) = _figure(height=max(2.0, 0.4 * len(items) + 1.0))
    ax.barh([_clip(k) for k, _ in items], [v for _, v in items], color="tab:blue")
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3, axis="x")
    return _png(figure)


def per_trial(trial_ids: Sequence[str], series: Mapping[str, Sequence[float | None]]) -> bytes:
    """One panel per named series (throughput, peak memory, energy), one bar per trial."""
    figure, axes = _figure(width=max(6.0, 0.35 * len(trial_ids) * len(series)), height=3.6,
                           columns=len(series))
    for ax, (name, values) in zip(axes, series.items(), strict=True):
        ax.bar(list(trial_ids), [v if v is not None else 0.0 for v in values], color="tab:green")
        ax.set_title(name, fontsize=9)
        ax.tick_params(axis="x", labelrotation=90, labelsize=7)
        ax.grid(alpha=0.3, axis="y")
    return _png(figure)


def agreement(proxy: Sequence[float], stress: Sequence[float], labels: Sequence[str],
              ylabel: str) -> bytes:
    """Proxy val_bpb against the stress run's result, one point per stress-run trial."""
    figure, (ax,) = _figure(width=5.0, height=4.0)
    ax.scatter(proxy, stress)
    for x, y, label in zip(proxy, stress, labels, strict=True):
        ax.annotate(label, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("proxy val_bpb")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    return _png(figure)


def _clip(label: str, width: int = 60) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"
