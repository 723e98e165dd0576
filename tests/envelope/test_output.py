"""What a sweep leaves behind and shows (:mod:`recipelab.envelope.output`): where its files go
by default, the terminal table (notes cut short there, kept whole in the files), the fitted
lines and plateaus in words, and the CSV, JSON and PNG files of the output directory."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from recipelab.envelope.output import (
    NOTE_WIDTH,
    PLOT_PNG,
    TABLE_CSV,
    TABLE_JSON,
    TELEMETRY_JSON,
    default_out_dir,
    describe_fits,
    render_table,
    slug,
    table_rows,
    write_outputs,
)
from recipelab.envelope.points import EnvelopePoint, EnvelopeReport, PrecisionFit
from recipelab.guardrails import DeviceInfo
from recipelab.trainer.telemetry import TelemetrySummary

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# an OOM's message, longer than a terminal column should be
OOM = ("CUDA out of memory. Tried to allocate 3.00 GiB (GPU 0; 79.10 GiB total capacity; "
       "75.20 GiB already allocated)")


def point(precision: str, batch: int, tokens_per_s: float | None, status: str = "complete",
          **fields: Any) -> EnvelopePoint:
    """A point of ``batch`` sequences of 64 tokens, a step taking what its throughput says."""
    tokens = batch * 64
    return EnvelopePoint.model_validate({
        "precision": precision, "batch_size": batch, "seq_len": 64, "tokens_per_step": tokens,
        "status": status, "tokens_per_s": tokens_per_s,
        "step_ms": None if tokens_per_s is None else 1000 * tokens / tokens_per_s,
        "peak_memory_bytes": None if tokens_per_s is None else 2**27 + 2048 * tokens, **fields})


def swept(**changes: Any) -> EnvelopeReport:
    """An fp32/bf16 sweep of batches 8, 16 and 4096: fp32 plateaus at 1,024 tokens, bf16 still
    grows, 4096 runs out of memory in both; fp8 was skipped on this device."""
    report = EnvelopeReport(
        device={"kind": "cuda", "name": "NVIDIA GB10", "memory_bytes": 128 * 2**30},
        recipe={}, params=92_416, steps=20, warmup=5, memory_limit_bytes=None,
        points=[point("fp32", 8, 1900.0, gain=1.0), point("fp32", 16, 1950.0, gain=1.0),
                point("fp32", 4096, None, "oom", message=OOM),
                point("bf16", 8, 3040.0, gain=1.6), point("bf16", 16, 6100.0, gain=3.128),
                point("bf16", 4096, None, "oom", message="out of memory"),
                point("fp8", 8, None, "skipped", message="fp8 needs a CUDA GPU")],
        plateaus={"fp32": 1024, "bf16": None, "fp8": None},
        fits=[PrecisionFit(precision="fp32", family="llama", a_bytes_per_token=2048.0,
                           b_bytes=2.0**27, points=2, held_out_max_error=0.031,
                           held_out_mean_error=0.012, saved_to="~/.cache/memory-model.json"),
              PrecisionFit(precision="bf16", family="llama", a_bytes_per_token=1536.0,
                           b_bytes=1.5 * 2**20, points=2, held_out_max_error=None,
                           held_out_mean_error=None)])
    return report.model_copy(update=changes)


def shown(report: EnvelopeReport) -> str:
    console = Console(record=True, width=240)
    console.print(render_table(report))
    return console.export_text()


def test_a_device_name_becomes_a_folder_name() -> None:
    assert slug("cuda-NVIDIA GB10") == "cuda-nvidia-gb10"
    assert slug("  cpu: AMD EPYC 9654 (96-Core) ") == "cpu-amd-epyc-9654-96-core"
    assert len(slug("x" * 100)) == 48
    assert slug("¿?") == "device", "nothing usable is left of the name"


def test_by_default_a_sweep_writes_under_envelope_named_by_device_and_preset() -> None:
    gb10 = DeviceInfo("cuda", "NVIDIA GB10", 128 * 2**30, (12, 1), True, True)
    assert default_out_dir(gb10, "small") == Path("envelope") / "cuda-nvidia-gb10-small"


def test_the_table_has_a_row_per_point_with_its_figures_formatted() -> None:
    rows = table_rows(swept())
    assert list(rows[0]) == ["precision", "batch", "seq_len", "tokens/step", "status", "tokens/s",
                             "step ms", "peak MiB", "gain", "note"]
    assert rows[4] == {"precision": "bf16", "batch": "16", "seq_len": "64", "tokens/step": "1024",
                       "status": "complete", "tokens/s": "6,100", "step ms": "167.9",
                       "peak MiB": "130", "gain": "3.13x", "note": ""}
    oom = rows[2]
    assert (oom["tokens/s"], oom["step ms"], oom["peak MiB"], oom["gain"]) == ("", "", "", "")


def test_a_points_note_is_its_message_else_the_mark_of_its_precisions_plateau() -> None:
    notes = [row["note"] for row in table_rows(swept())]
    assert notes == ["", "plateau", OOM, "", "", "out of memory", "fp8 needs a CUDA GPU"]


def test_the_terminal_table_cuts_long_notes_short_and_the_files_keep_them_whole(
        tmp_path: Path) -> None:
    text = shown(swept())
    assert ("throughput envelope: 92,416-parameter proxy on NVIDIA GB10 (20 steps, 5 untimed)"
            in " ".join(text.split()))
    assert OOM[: NOTE_WIDTH - 1] + "…" in text and OOM not in text
    assert "fp8 needs a CUDA GPU" in text, "a short note is shown whole"
    write_outputs(swept(), tmp_path)
    with (tmp_path / TABLE_CSV).open(newline="") as handle:
        assert OOM in [row["message"] for row in csv.DictReader(handle)]
    assert OOM in json.loads((tmp_path / TABLE_JSON).read_text())["points"][2]["message"]


def test_a_report_without_points_makes_a_table_without_columns_instead_of_failing() -> None:
    assert render_table(swept(points=[])).columns == []


def test_each_fit_is_said_per_token_and_fixed_with_its_held_out_error_and_where_it_went() -> None:
    lines = describe_fits(swept())
    assert lines[:2] == [
        "fp32: peak memory = 2.00 KiB per token x tokens per step + 128 MiB over 2 points; "
        "held-out error max 3.1%, mean 1.2% (~/.cache/memory-model.json)",
        "bf16: peak memory = 1.50 KiB per token x tokens per step + 2 MiB over 2 points "
        "(not saved)"]


def test_a_plateau_is_said_only_for_a_precision_with_a_completed_point() -> None:
    assert describe_fits(swept(fits=[])) == [
        "fp32: throughput plateaus at 1,024 tokens per step",
        "bf16: throughput still grows at the largest point"]  # fp8 was skipped: nothing to say


def test_the_files_hold_the_raw_numbers_the_fits_the_telemetry_and_the_plot(
        tmp_path: Path) -> None:
    report = swept(telemetry=TelemetrySummary(samples=40, energy_j=900.0, energy_source="rapl"))
    out = tmp_path / "envelope" / "cuda-nvidia-gb10-tiny"  # made, parents and all
    written = write_outputs(report, out)
    assert written[:3] == [out / TABLE_CSV, out / TABLE_JSON, out / PLOT_PNG]
    assert out / TELEMETRY_JSON in written
    with (out / TABLE_CSV).open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == [*EnvelopePoint.model_fields, "plateau"]
    assert (rows[1]["tokens_per_s"], rows[1]["peak_memory_bytes"], rows[1]["plateau"]) == (
        "1950.0", str(2**27 + 2048 * 1024), "True")  # numbers for other tools, unformatted
    assert [row["plateau"] for row in rows].count("True") == 1
    assert EnvelopeReport.model_validate_json((out / TABLE_JSON).read_text()) == report
    assert TelemetrySummary.model_validate_json((out / TELEMETRY_JSON).read_text()) == (
        report.telemetry)
    assert (out / PLOT_PNG).read_bytes().startswith(PNG_SIGNATURE)


def test_a_sweep_without_telemetry_writes_null_for_it(tmp_path: Path) -> None:
    write_outputs(swept(), tmp_path)
    assert json.loads((tmp_path / TELEMETRY_JSON).read_text()) is None
