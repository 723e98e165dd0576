"""The long run's plots: loss and val_bpb, grad and param norm, throughput against hours.

Plain matplotlib :class:`~matplotlib.figure.Figure` objects on an Agg canvas, never pyplot,
so drawing touches no display and no global figure registry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

Row = Mapping[str, object]


def _series(rows: Sequence[Row], x: str, y: str) -> tuple[list[float], list[float]]:
    pairs = [(float(r[x]), float(r[y])) for r in rows  # type: ignore[arg-type]
             if r.get(y) not in (None, "") and r.get(x) not in (None, "")]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _save(figure: Figure, path: Path) -> Path:
    FigureCanvasAgg(figure)
    figure.tight_layout()
    figure.savefig(path, format="png", metadata={"Software": None})
    return path


def write_plots(rows: Sequence[Row], out_dir: Path) -> list[Path]:
    """``loss.png``, ``norms.png`` and ``throughput.png`` in ``out_dir``."""
    written = []
    figure = Figure(figsize=(8, 4), dpi=100)
    ax = figure.add_subplot(1, 1, 1)
    ax.plot(*_series(rows, "step", "train_loss"), label="train loss (nats/token)")
    ax.plot(*_series(rows, "step", "val_bpb"), marker="o", label="val_bpb")
    ax.set_xlabel("step")
    ax.legend()
    written.append(_save(figure, out_dir / "loss.png"))
    figure = Figure(figsize=(8, 4), dpi=100)
    left, right = figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2)
    left.plot(*_series(rows, "step", "grad_norm"))
    left.set_xlabel("step")
    left.set_ylabel("grad norm")
    right.plot(*_series(rows, "step", "param_norm"))
    right.set_xlabel("step")
    right.set_ylabel("param norm")
    written.append(_save(figure, out_dir / "norms.png"))
    figure = Figure(figsize=(8, 4), dpi=100)
    ax = figure.add_subplot(1, 1, 1)
    hours, rate = _series(rows, "elapsed_h", "tokens_per_s")
    ax.plot(hours, rate)
    ax.set_xlabel("hours")
    ax.set_ylabel("tokens/s")
    written.append(_save(figure, out_dir / "throughput.png"))
    return written
