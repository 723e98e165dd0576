"""The long run's three plots: written as PNGs whatever the run measured, even nothing."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from matplotlib.image import imread

from recipelab.longrun.run_plots import PLOT_FILES, series, write_plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
COLUMNS = ("step", "tokens", "bytes_seen", "train_loss", "val_loss", "val_bpb", "grad_norm",
           "param_norm", "lr", "tokens_per_s", "mfu", "usd_spent", "elapsed_h")


def row(step: int | str, **measured: object) -> dict[str, object]:
    """A metrics row as the long run logs it: every column, "" where nothing was measured."""
    return {**dict.fromkeys(COLUMNS, ""), "step": step, **measured}


def full_run(steps: int = 40) -> list[dict[str, object]]:
    rows = []
    for step in range(1, steps + 1):
        loss = 2 + 5 * math.exp(-step / 10)
        rows.append(row(step, train_loss=loss, grad_norm=1 + math.exp(-step / 5),
                        param_norm=40 + step / 10, tokens_per_s=5e4, mfu=0.4,
                        elapsed_h=step / 3600, lr=1e-3))
        if step % 10 == 0:
            rows[-1].update(val_loss=loss + 0.1, val_bpb=(loss + 0.1) / math.log(2) / 3.5)
    return rows


def assert_pngs(paths: list[Path], out: Path) -> None:
    assert [p.name for p in paths] == list(PLOT_FILES)
    assert [p.parent for p in paths] == [out] * 3
    for path in paths:
        assert path.read_bytes()[:8] == PNG_MAGIC, path.name
        height, width = imread(path).shape[:2]
        assert width > height > 100, f"{path.name} is {width}x{height}"


def test_a_run_writes_the_loss_gradnorm_and_throughput_plots(tmp_path: Path) -> None:
    assert_pngs(write_plots(full_run(), tmp_path), tmp_path)


def test_a_run_without_validation_rows_still_writes_every_plot(tmp_path: Path) -> None:
    rows = [{**r, "val_loss": "", "val_bpb": None} for r in full_run()]
    assert_pngs(write_plots(rows, tmp_path), tmp_path)


@pytest.mark.parametrize("rows", [
    [],  # stopped before its first logged row
    [row(1, elapsed_h=0.0)],  # stopped at step 1 with nothing measured but the clock
    [row(1, train_loss=float("nan"), grad_norm=float("inf"), elapsed_h=0.0)],  # diverged at once
], ids=["no rows", "one empty row", "non-finite values"])
def test_a_run_stopped_at_its_first_step_still_writes_every_plot(
        tmp_path: Path, rows: list[dict[str, object]]) -> None:
    assert_pngs(write_plots(rows, tmp_path / "run"), tmp_path / "run")


def test_a_series_keeps_the_measured_rows_whatever_their_spelling() -> None:
    rows = [row(1, train_loss="3.5"), row(2), row(3, train_loss=None), row("4", train_loss=2.5),
            row(5, train_loss="nan")]
    line = series(rows, "step", "train_loss", "train loss")
    assert (line.xs, line.ys) == ([1.0, 4.0], [3.5, 2.5])
