"""What a sweep leaves behind and shows: the terminal table, the fits in words, and the
CSV, JSON and PNG files of the output directory."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from rich.table import Table

from recipelab.envelope.measure import TELEMETRY_CSV
from recipelab.envelope.points import EnvelopePoint, EnvelopeReport
from recipelab.guardrails import DeviceInfo
from recipelab.units import KIB, MIB

TABLE_CSV, TABLE_JSON, PLOT_PNG = "envelope.csv", "envelope.json", "envelope.png"
TELEMETRY_JSON = "telemetry.json"
NOTE_WIDTH = 48


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:48] or "device"


def default_out_dir(device: DeviceInfo, preset: str) -> Path:
    return Path("envelope") / f"{slug(f'{device.kind}-{device.name}')}-{preset}"


def _fmt(value: float | None, pattern: str) -> str:
    return "" if value is None else format(value, pattern)


def table_rows(report: EnvelopeReport) -> list[dict[str, str]]:
    rows = []
    for p in report.points:
        rows.append({
            "precision": p.precision, "batch": str(p.batch_size), "seq_len": str(p.seq_len),
            "tokens/step": str(p.tokens_per_step), "status": p.status,
            "tokens/s": _fmt(p.tokens_per_s, ",.0f"), "step ms": _fmt(p.step_ms, ".1f"),
            "peak MiB": _fmt(None if p.peak_memory_bytes is None else p.peak_memory_bytes / MIB,
                             ",.0f"),
            "gain": "" if p.gain is None else f"{p.gain:.2f}x",
            "note": p.message or ("plateau" if report.plateaus.get(p.precision) == p.tokens_per_step
                                  else ""),
        })
    return rows


def render_table(report: EnvelopeReport) -> Table:
    """The table for a terminal: long notes (skip and OOM reasons) cut short; the CSV and JSON
    keep them whole."""
    table = Table(title=f"throughput envelope: {report.params:,}-parameter proxy on "
                  f"{report.device['name']} ({report.steps} steps, {report.warmup} untimed)")
    rows = table_rows(report)
    for column in rows[0] if rows else ():
        table.add_column(column, justify="left" if column in ("precision", "status", "note")
                         else "right", no_wrap=column != "note")
    for row in rows:
        note = row["note"]
        row["note"] = note if len(note) <= NOTE_WIDTH else note[: NOTE_WIDTH - 1] + "…"
        table.add_row(*row.values())
    return table


def describe_fits(report: EnvelopeReport) -> list[str]:
    lines = []
    for fit in report.fits:
        error = ("" if fit.held_out_max_error is None else
                 f"; held-out error max {100 * fit.held_out_max_error:.1f}%, mean "
                 f"{100 * (fit.held_out_mean_error or 0):.1f}%")
        lines.append(f"{fit.precision}: peak memory = {fit.a_bytes_per_token / KIB:.2f} KiB per "
                     f"token x tokens per step + {fit.b_bytes / MIB:,.0f} MiB over {fit.points} "
                     f"points{error} ({fit.saved_to or 'not saved'})")
    for precision, tokens in report.plateaus.items():
        if any(p.precision == precision and p.status == "complete" for p in report.points):
            lines.append(f"{precision}: throughput plateaus at {tokens:,} tokens per step"
                         if tokens else f"{precision}: throughput still grows at the largest point")
    return lines


def write_outputs(report: EnvelopeReport, out_dir: Path) -> list[Path]:
    """The table as CSV and JSON (with fits, plateaus and telemetry) and the plot; the list
    names the sweep's telemetry CSV too where the sweep wrote one there."""
    from recipelab.envelope.plot import plot_envelope  # matplotlib only when writing

    out_dir.mkdir(parents=True, exist_ok=True)
    table_csv = out_dir / TABLE_CSV
    with table_csv.open("w", newline="") as handle:  # raw numbers, for other tools
        writer = csv.DictWriter(handle, fieldnames=[*EnvelopePoint.model_fields, "plateau"])
        writer.writeheader()
        for point in report.points:
            writer.writerow({**point.model_dump(), "plateau": report.plateaus.get(
                point.precision) == point.tokens_per_step})
    table_json = out_dir / TABLE_JSON
    table_json.write_text(report.model_dump_json(indent=2))
    telemetry_json = out_dir / TELEMETRY_JSON
    telemetry_json.write_text(report.telemetry.model_dump_json(indent=2) if report.telemetry
                              else "null")
    plot = out_dir / PLOT_PNG
    plot_envelope(report, plot)
    telemetry_csv = out_dir / TELEMETRY_CSV
    return [table_csv, table_json, plot, *([telemetry_csv] if telemetry_csv.exists() else []),
            telemetry_json]
