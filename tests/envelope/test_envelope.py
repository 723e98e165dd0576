"""``recipelab envelope`` as a person runs it: the table, the plot and the memory line it
saves, and sweep axes refused with what to type instead. Its parts: test_measure.py (real
points, recorded OOMs, skipped precisions), test_findings.py, test_values.py, test_plot.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from recipelab.cli import app
from recipelab.envelope import PLOT_PNG
from recipelab.guardrails import detect_device
from recipelab.guardrails.memory_fit import fitted_line, load_memory_model
from recipelab.targets import proxy_recipe
from tests.agent.conftest import run_cli

TINY = proxy_recipe("tiny")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


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
