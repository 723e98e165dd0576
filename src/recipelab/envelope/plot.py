"""The envelope plot: throughput and peak memory against tokens per step, one PNG.

Throughput (solid, left axis) and measured peak memory (dashed, right axis) per precision;
the fitted memory line (dotted); a vertical line where throughput plateaus; a red cross for
each out-of-memory point. Like :mod:`recipelab.report.plots`, no pyplot: a plain
:class:`~matplotlib.figure.Figure` on an Agg canvas, so drawing never touches a display, a
global figure registry or the user's backend. :mod:`recipelab.envelope.output` imports this
module only when it writes, so the sweep itself never imports matplotlib.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from recipelab.envelope.points import EnvelopePoint, EnvelopeReport
from recipelab.units import KIB, MIB

COLORS = {"fp32": "tab:blue", "bf16": "tab:green", "fp8": "tab:purple"}


def _best_by_tokens(points: list[EnvelopePoint]) -> tuple[list[int], list[float], list[float]]:
    """Per tokens-per-step: the best throughput and the largest peak among its points."""
    throughput: dict[int, float] = {}
    memory: dict[int, float] = {}
    for p in points:
        if p.status != "complete" or p.tokens_per_s is None:
            continue
        throughput[p.tokens_per_step] = max(throughput.get(p.tokens_per_step, 0.0), p.tokens_per_s)
        if p.peak_memory_bytes is not None:
            memory[p.tokens_per_step] = max(memory.get(p.tokens_per_step, 0.0),
                                            p.peak_memory_bytes / MIB)
    tokens = sorted(throughput)
    return tokens, [throughput[t] for t in tokens], [memory.get(t, float("nan")) for t in tokens]


def plot_envelope(report: EnvelopeReport, path: Path) -> None:
    figure = Figure(figsize=(9, 5.5), dpi=110)
    FigureCanvasAgg(figure)  # attaches itself: savefig draws with Agg, whatever the user's backend
    speed = figure.add_subplot()
    memory = speed.twinx()
    all_tokens = sorted({p.tokens_per_step for p in report.points})
    for precision in dict.fromkeys(p.precision for p in report.points):
        color = COLORS.get(precision, "tab:gray")
        mine = [p for p in report.points if p.precision == precision]
        tokens, throughput, peaks = _best_by_tokens(mine)
        if tokens:
            speed.plot(tokens, throughput, "o-", color=color, label=f"{precision} tokens/s")
            memory.plot(tokens, peaks, "s--", color=color, alpha=0.6,
                        label=f"{precision} peak memory")
        fit = next((f for f in report.fits if f.precision == precision), None)
        if fit is not None and all_tokens:
            low, high = all_tokens[0], all_tokens[-1]  # sampled densely: the x axis is logarithmic
            xs = [low * (high / low) ** (i / 63) for i in range(64)]
            memory.plot(xs, [(fit.a_bytes_per_token * x + fit.b_bytes) / MIB for x in xs], ":",
                        color=color, alpha=0.8,
                        label=f"{precision} fit {fit.a_bytes_per_token / KIB:.2f} KiB/token "
                        f"+ {fit.b_bytes / MIB:,.0f} MiB")
        plateau = report.plateaus.get(precision)
        if plateau:
            speed.axvline(plateau, color=color, linewidth=1, alpha=0.7)
            speed.annotate(f"{precision} plateau\n(<5% more beyond)", (plateau, 0.02),
                           xycoords=("data", "axes fraction"), fontsize=8, color=color,
                           xytext=(4, 0), textcoords="offset points")
        for oom in (p for p in mine if p.status == "oom"):
            speed.plot([oom.tokens_per_step], [0], "x", color="tab:red", markersize=10,
                       clip_on=False)
    if any(p.status == "oom" for p in report.points):
        speed.plot([], [], "x", color="tab:red", label="out of memory")
    speed.set_xscale("log", base=2)
    if all_tokens:
        speed.set_xticks(all_tokens, [f"{t:,}" for t in all_tokens])
    speed.set_xlabel("tokens per step (batch x sequence length)")
    speed.set_ylabel("throughput (tokens/s)")
    memory.set_ylabel("peak memory (MiB)")
    speed.set_ylim(bottom=0)
    memory.set_ylim(bottom=0)
    speed.grid(alpha=0.3)
    handles = speed.get_legend_handles_labels()
    more = memory.get_legend_handles_labels()
    speed.legend(handles[0] + more[0], handles[1] + more[1], fontsize=8, ncol=3,
                 loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    speed.set_title(f"{report.params:,}-parameter proxy on {report.device['name']}", fontsize=10)
    figure.savefig(path, bbox_inches="tight")
