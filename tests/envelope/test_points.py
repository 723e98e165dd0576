"""What a sweep is made of (:mod:`recipelab.envelope.points`): its axes (refused, with the
reason, when they cannot measure anything), its points, the fitted memory lines, and the
report that holds them all and is saved as JSON."""

from __future__ import annotations

from itertools import product
from typing import Any, get_args

import pytest
from pydantic import ValidationError

from recipelab.envelope.points import (
    PRECISIONS,
    EnvelopePoint,
    EnvelopeReport,
    PrecisionFit,
    SweepAxes,
    point_id,
)
from recipelab.recipe import Precision
from recipelab.trainer.telemetry import TelemetrySummary


def point(**fields: Any) -> EnvelopePoint:
    """A completed fp32 point of 4 × 64 tokens, with ``fields`` changed."""
    return EnvelopePoint.model_validate({
        "precision": "fp32", "batch_size": 4, "seq_len": 64, "tokens_per_step": 256,
        "status": "complete", "tokens_per_s": 1000.0, "step_ms": 256.0,
        "peak_memory_bytes": 2**27, "timed_steps": 15, "gain": 1.0, **fields})


@pytest.mark.parametrize("empty", ["batch_sizes", "seq_lens", "precisions"])
def test_a_sweep_needs_a_batch_size_a_sequence_length_and_a_precision(empty: str) -> None:
    axes: dict[str, Any] = {"batch_sizes": (2, 4), "seq_lens": (64,), "precisions": ("fp32",)}
    with pytest.raises(ValueError, match="at least one batch size, sequence length and precision"):
        SweepAxes(**{**axes, empty: ()})


def test_a_sweep_times_at_least_one_step_after_its_warmup() -> None:
    with pytest.raises(ValueError) as raised:
        SweepAxes(batch_sizes=(2,), seq_lens=(64,), precisions=("fp32",), steps=5, warmup=5)
    assert str(raised.value) == ("steps (5) must exceed warmup (5) so that at least one step is "
                                 "timed")
    assert SweepAxes(batch_sizes=(2,), seq_lens=(64,), precisions=("fp32",), steps=6,
                     warmup=5).steps == 6


def test_by_default_a_point_trains_20_steps_and_times_the_last_15() -> None:
    axes = SweepAxes(batch_sizes=(2,), seq_lens=(64,), precisions=("bf16",))
    assert (axes.steps, axes.warmup) == (20, 5)


def test_the_precisions_are_every_precision_a_recipe_can_have() -> None:
    assert PRECISIONS == get_args(Precision) == ("fp32", "bf16", "fp8")


@pytest.mark.parametrize(("field", "value"), [
    ("status", "crashed"), ("precision", "fp16"), ("batch_size", "four"), ("loss", 2.5)])
def test_a_point_with_an_unknown_status_precision_or_field_is_refused(field: str,
                                                                      value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        point(**{field: value})


def test_a_point_is_named_by_its_precision_batch_and_sequence_length_and_no_two_alike() -> None:
    assert point_id("bf16", 8, 128) == "bf16-b8-s128"
    grid = list(product(PRECISIONS, (1, 8, 81), (6, 16, 64)))
    assert len({point_id(*at) for at in grid}) == len(grid)


def test_the_report_is_saved_as_json_and_read_back_unchanged() -> None:
    report = EnvelopeReport(
        device={"kind": "cuda", "name": "NVIDIA GB10", "memory_bytes": 128 * 2**30},
        recipe={"batch_size": 8}, params=92_416, steps=20, warmup=5,
        memory_limit_bytes=6 * 2**30,
        points=[point(), point(batch_size=8, tokens_per_step=512, tokens_per_s=1900.0),
                point(batch_size=4096, tokens_per_step=262_144, status="oom", tokens_per_s=None,
                      message="out of memory", gain=None),
                point(precision="fp8", status="skipped", message="fp8 needs a CUDA GPU",
                      tokens_per_s=None, gain=None)],
        plateaus={"fp32": 512, "fp8": None},
        fits=[PrecisionFit(precision="fp32", family="llama", a_bytes_per_token=2048.0,
                           b_bytes=2.0**27, points=2, held_out_max_error=None,
                           held_out_mean_error=None, saved_to="memory-model.json")],
        telemetry=TelemetrySummary(samples=12, energy_j=450.0, energy_source="rapl"))
    assert EnvelopeReport.model_validate_json(report.model_dump_json()) == report
