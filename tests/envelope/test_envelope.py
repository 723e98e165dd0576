"""Specification of the throughput envelope: real points, recorded OOMs, skipped precisions,
the plateau, and the files a sweep leaves behind."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from recipelab.cli import app
from recipelab.envelope import (
    PLOT_PNG,
    TABLE_CSV,
    TABLE_JSON,
    TELEMETRY_CSV,
    TELEMETRY_JSON,
    EnvelopePoint,
    SweepAxes,
    parse_bytes,
    parse_ints,
    parse_precisions,
    plateau_tokens,
    sweep,
    with_gains,
    write_outputs,
)
from recipelab.guardrails import detect_device
from recipelab.guardrails.memory import analytic_peak_bytes
from recipelab.guardrails.memory_fit import fitted_line, load_memory_model
from recipelab.runner import LocalExecutor
from recipelab.targets import get_target, proxy_recipe
from recipelab.trainer.spec import CorpusSpec
from tests.agent.conftest import run_cli

TINY = proxy_recipe("tiny")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def point(tokens: int, tokens_per_s: float | None, precision: str = "fp32",
          status: str = "complete") -> EnvelopePoint:
    return EnvelopePoint.model_validate({
        "precision": precision, "batch_size": tokens // 64, "seq_len": 64,
        "tokens_per_step": tokens, "status": status, "tokens_per_s": tokens_per_s})


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


def test_recipelab_envelope_prints_the_table_writes_the_plot_and_saves_the_memory_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    model = tmp_path / "memory-model.json"
    monkeypatch.setenv("RECIPELAB_MEMORY_MODEL", str(model))
    out = tmp_path / "envelope"
    cli = run_cli("envelope", "--preset", "tiny", "--batch", "4,32", "--seq-len", "32",
                  "--precision", "fp32", "--steps", "3", "--warmup", "1", "--out", str(out),
                  cwd=tmp_path)
    output, _ = cli.communicate(timeout=280)

    assert cli.returncode == 0, output
    assert "throughput envelope" in output and "tokens/s" in output
    assert "fp32: peak memory = " in output and "KiB per token" in output
    assert (out / PLOT_PNG).read_bytes().startswith(PNG_SIGNATURE)
    assert fitted_line(load_memory_model(model), TINY, detect_device()) is not None


def test_bad_sweep_axes_are_refused_with_what_to_type_instead(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["envelope", "--preset", "tiny", "--batch", "4,eight"])
    assert result.exit_code == 2
    assert "--batch takes comma-separated whole numbers such as 2,4,8; got '4,eight'" in result.output
    result = CliRunner().invoke(app, ["envelope", "--preset", "tiny", "--memory-limit", "lots"])
    assert result.exit_code == 2 and "--memory-limit takes a size such as 6GiB" in result.output
    assert not (tmp_path / "envelope").exists(), "nothing is run or written"


def test_sweep_values_parse_or_explain() -> None:
    assert parse_ints("2, 4,8", "--batch") == (2, 4, 8)
    with pytest.raises(ValueError, match="positive"):
        parse_ints("0,4", "--batch")
    assert parse_precisions("bf16,fp32") == ("bf16", "fp32"), "the user's order sets the reference"
    with pytest.raises(ValueError, match="fp32, bf16, fp8"):
        parse_precisions("fp16")
    assert parse_bytes("6GiB") == 6 * 2**30 and parse_bytes("512MiB") == 512 * 2**20
    assert parse_bytes("1000") == 1000
    with pytest.raises(ValueError, match="6GiB"):
        parse_bytes("six gigs")
    with pytest.raises(ValueError, match="at least one step is timed"):
        SweepAxes(batch_sizes=(2,), seq_lens=(64,), precisions=("fp32",), steps=5, warmup=5)


def test_throughput_plateaus_where_no_later_point_gains_5_percent() -> None:
    rising_then_flat = [point(128, 1000), point(256, 1800), point(512, 2000), point(1024, 2050),
                        point(2048, 2080)]
    assert plateau_tokens(rising_then_flat) == 512
    assert plateau_tokens([point(128, 1000), point(256, 2000), point(512, 4000)]) is None
    dips_then_recovers = [point(128, 1000), point(256, 1500), point(512, 1200), point(1024, 1700)]
    assert plateau_tokens(dips_then_recovers) is None
    with_oom = [point(128, 1000), point(256, 1020), point(512, None, status="oom")]
    assert plateau_tokens(with_oom) == 128


def test_each_precision_gains_relative_to_the_first_at_the_same_geometry() -> None:
    points = with_gains([point(256, 1000, "bf16"), point(256, 1600, "fp8"),
                         point(512, None, "bf16", status="oom"), point(512, 3000, "fp8")],
                        ["bf16", "fp8"])
    assert [p.gain for p in points] == [1.0, 1.6, None, None]



WRITE_A_REPORT = """
import sys
from pathlib import Path
import recipelab.envelope as env
swept = "matplotlib" in sys.modules
report = env.EnvelopeReport(
    device={"kind": "cpu", "name": "cpu"}, recipe={}, params=1, steps=4, warmup=1,
    memory_limit_bytes=None, plateaus={"fp32": None}, fits=[], points=[env.EnvelopePoint(
        precision="fp32", batch_size=4, seq_len=64, tokens_per_step=256, status="complete",
        tokens_per_s=1000.0, step_ms=10.0, peak_memory_bytes=2**28)])
env.write_outputs(report, Path(sys.argv[1]))
print(swept, "matplotlib.pyplot" in sys.modules)
"""


def test_the_sweep_never_imports_matplotlib_and_the_plot_never_touches_pyplot(
        tmp_path: Path) -> None:
    """A plot drawn with pyplot joins its global figure registry and the user's backend; the
    envelope draws on a Figure of its own, and only once it writes."""
    done = subprocess.run([sys.executable, "-c", WRITE_A_REPORT, str(tmp_path)], text=True,
                          capture_output=True, timeout=120, check=False,
                          env={**os.environ, "MPLBACKEND": "module://no.such.backend"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]
    assert (tmp_path / PLOT_PNG).read_bytes().startswith(PNG_SIGNATURE)
