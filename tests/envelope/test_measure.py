"""The sweep's measurements (:mod:`recipelab.envelope.measure`): real points in real trainer
processes, a point over the memory cap recorded as an OOM while the sweep goes on, a
precision the device lacks recorded as skipped, and the files a sweep leaves behind."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import psutil
import pytest

from recipelab.envelope import (
    PLOT_PNG,
    TABLE_CSV,
    TABLE_JSON,
    TELEMETRY_CSV,
    TELEMETRY_JSON,
    SweepAxes,
    sweep,
    write_outputs,
)
from recipelab.guardrails import detect_device
from recipelab.guardrails.memory import analytic_peak_bytes
from recipelab.runner import LocalExecutor
from recipelab.targets import get_target, proxy_recipe
from recipelab.trainer.spec import CorpusSpec

TINY = proxy_recipe("tiny")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_a_point_over_the_address_space_cap_is_an_oom_and_the_sweep_goes_on(
        tmp_path: Path, corpus: CorpusSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # The cap leaves a tiny trial room (as the executor's own OOM specification does); the
    # huge point (393k tokens a step, nearly the whole corpus) needs far more than the cap.
    cap = max(psutil.Process().memory_info().vms, 3 * 2**30)
    huge = 6144
    assert analytic_peak_bytes(TINY.apply({"batch_size": huge}), detect_device()) > 1.5 * cap
    axes = SweepAxes(batch_sizes=(huge, 4), seq_lens=(64,), precisions=("fp32", "fp8"),
                     steps=4, warmup=1)
    executor = LocalExecutor(warm=False, memory_limit_bytes=cap)
    seen: list[str] = []
    try:
        report = sweep(TINY, axes, get_target("toy"), detect_device(), executor, tmp_path, corpus,
                       trial_device="cpu", timeout_s=240, memory_limit_bytes=cap,
                       telemetry_interval_s=0.2, on_point=lambda p: seen.append(p.status))
    finally:
        executor.close()

    oom, small, *fp8 = report.points
    assert (oom.batch_size, oom.status) == (huge, "oom"), oom.message
    assert oom.tokens_per_s is None and oom.message and "out of memory" in oom.message
    assert (small.batch_size, small.status) == (4, "complete"), small.message
    assert small.tokens_per_s and small.step_ms and small.peak_memory_bytes
    assert small.timed_steps == 3, "the warmup step is left out of the timing"
    assert [p.status for p in fp8] == ["skipped", "skipped"]
    assert all(p.message and "fp8" in p.message and "CPU" in p.message for p in fp8)
    assert seen == ["oom", "complete", "skipped", "skipped"]
    assert report.fits == [], "one completed point is no line"
    assert report.telemetry is not None and (report.telemetry.samples or 0) >= 2

    written = write_outputs(report, tmp_path)
    assert {p.name for p in written} == {TABLE_CSV, TABLE_JSON, PLOT_PNG, TELEMETRY_CSV,
                                         TELEMETRY_JSON}
    assert (tmp_path / PLOT_PNG).read_bytes().startswith(PNG_SIGNATURE)
    with (tmp_path / TABLE_CSV).open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["status"] for row in rows] == ["oom", "complete", "skipped", "skipped"]
    saved = json.loads((tmp_path / TABLE_JSON).read_text())
    assert saved["memory_limit_bytes"] == cap and len(saved["points"]) == 4
    assert (tmp_path / TELEMETRY_CSV).read_text().startswith("t_s,cpu_util,rss_bytes")
