"""How a long run ends short of its steps: preempted (SIGTERM), diverged, stopped by the
sidecar's spend, or refused before it starts. Real processes where a signal or an exit
status is the point; in-process runs elsewhere."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, load_model, save_model
from typer.testing import CliRunner

from recipelab.cli import app
from recipelab.longrun.pretrain_config import CHECKPOINT_DIR, METRICS_LONG_FILE
from recipelab.longrun.run import run_pretrain
from recipelab.trainer.core import build_model
from recipelab.trainer.spec import CorpusSpec
from tests.longrun.test_run import RECIPE, config, events, launch, metrics

POLL_S = 0.02


def cli(recipe: Path, out: Path, corpus: CorpusSpec, *extra: str) -> list[str]:
    return ["pretrain", "--recipe", str(recipe), "--out", str(out), "--corpus", corpus.source,
            "--log-every", "5", "--eval-every", "10", "--device", "cpu", "--threads", "1", *extra]


def spend_file(path: Path, spent: float, projected: float) -> str:
    path.write_text(json.dumps({
        "spent_usd": spent, "rate_usd_per_hr": 1.46, "hours_elapsed": spent / 1.46,
        "projected_total_usd": projected,
        "last_update_utc": datetime.now(timezone.utc).isoformat()}))
    return str(path)


def test_sigterm_checkpoints_the_step_and_exits_143_and_the_resume_ends_the_same_curve(
        tmp_path: Path, corpus: CorpusSpec, trainer_env: dict[str, str]) -> None:
    recipe = tmp_path / "recipe.json"
    recipe.write_text(RECIPE.apply({"steps": 40}).model_dump_json())
    env = {**trainer_env, "RECIPELAB_CACHE": corpus.cache_dir or ""}
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    run_pretrain(config(whole, corpus, steps=40, checkpoint_every=1000))
    command = [sys.executable, "-m", "recipelab", *cli(recipe, cut, corpus, "--checkpoint-every", "1000")]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    while not (cut / "metrics.csv").exists() or not metrics(cut):  # training has begun
        assert process.poll() is None, "the run ended before it was preempted"
        time.sleep(POLL_S)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 128 + signal.SIGTERM
    latest = (cut / CHECKPOINT_DIR / "latest").read_text().strip()  # no periodic checkpoint:
    step = int(latest.removeprefix("step-"))  # this one is SIGTERM's
    assert 5 <= step < 40
    assert next(e for e in events(cut) if e["event"] == "preempted")["step"] == step
    assert json.loads((cut / "manifest.json").read_text())["stop_reason"] == "preempted"
    launch([sys.executable, "-m", "recipelab", *cli(recipe, cut, corpus, "--checkpoint-every",
                                                    "1000", "--resume-from-latest")],
           env, timeout=300)
    assert [(r["step"], r["train_loss"], r["val_bpb"]) for r in metrics(cut)] == [
        (r["step"], r["train_loss"], r["val_bpb"]) for r in metrics(whole)]


def test_a_nan_stops_the_run_with_exit_4_keeping_the_last_good_checkpoint(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    out = tmp_path / "nan"
    recipe = tmp_path / "recipe.json"
    recipe.write_text(RECIPE.apply({"steps": 40, "optimizer.lr": 1.0,
                                    "optimizer.grad_clip": 0.0}).model_dump_json())
    result = CliRunner().invoke(app, cli(recipe, out, corpus, "--checkpoint-every", "5"),
                                env={"OMP_NUM_THREADS": "1", "RECIPELAB_CACHE": corpus.cache_dir or ""})
    assert result.exit_code == 4, result.output
    stop = [e for e in events(out) if e["event"] == "diverged"]
    assert len(stop) == 1 and "lower learning rate" in str(stop[0]["how"])
    saved = sorted(p.name for p in (out / CHECKPOINT_DIR).glob("step-*"))
    assert stop[0]["last_good_checkpoint"] == (saved[-1] if saved else None)
    for name in saved:  # every checkpoint kept holds finite weights
        weights = load_file(str(out / CHECKPOINT_DIR / name / "model.safetensors"))
        assert all(bool(t.isfinite().all()) for t in weights.values()), name
    assert json.loads((out / "manifest.json").read_text())["stop_reason"] == "diverged"
    assert not (out / "final.safetensors").exists()


def test_a_sidecar_spend_over_the_cap_exits_3_at_once_without_a_checkpoint(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    recipe = tmp_path / "recipe.json"
    recipe.write_text(RECIPE.model_dump_json())
    cost = spend_file(tmp_path / "cost.json", spent=35.5, projected=36.0)
    out = tmp_path / "spent"
    result = CliRunner().invoke(app, cli(recipe, out, corpus, "--budget-cap-usd", "35",
                                         "--budget-curr-cost-uri", cost, "--checkpoint-every", "1"),
                                env={"OMP_NUM_THREADS": "1"})
    assert result.exit_code == 3, result.output
    assert not (out / CHECKPOINT_DIR).exists()
    budget = json.loads((out / "budget.json").read_text())
    assert (budget["stop_reason"], budget["source"], budget["spent_usd"]) == (
        "budget_spent", "sidecar", 35.5)


def test_a_sidecar_projection_over_the_cap_exits_3_after_a_checkpoint(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    recipe = tmp_path / "recipe.json"
    recipe.write_text(RECIPE.model_dump_json())
    cost = spend_file(tmp_path / "cost.json", spent=20.0, projected=36.0)
    out = tmp_path / "projected"
    result = CliRunner().invoke(app, cli(recipe, out, corpus, "--budget-cap-usd", "35",
                                         "--alert-at-usd", "10", "--budget-curr-cost-uri", cost,
                                         "--checkpoint-every", "1000"), env={"OMP_NUM_THREADS": "1"})
    assert result.exit_code == 3, result.output
    assert (out / CHECKPOINT_DIR / "latest").read_text().strip() == "step-00000005"
    names = [e["event"] for e in events(out)]
    assert names.count("budget_alert") == 1 and names.count("budget_stop") == 1


def test_a_cap_with_no_way_to_know_the_spend_is_one_line_and_exit_2(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    recipe = tmp_path / "recipe.json"
    recipe.write_text(RECIPE.model_dump_json())
    out = tmp_path / "blind"
    result = CliRunner().invoke(app, cli(recipe, out, corpus, "--budget-cap-usd", "35"))
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert "--budget-curr-cost-uri" in result.output and "--price-per-hour" in result.output
    assert not out.exists()


def test_a_new_run_into_a_directory_with_checkpoints_is_refused_and_loses_nothing(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    out = tmp_path / "earlier"
    run_pretrain(config(out, corpus, steps=10, checkpoint_every=5))
    before = (out / "metrics.csv").read_text()
    with pytest.raises(ValueError, match="--resume-from-latest"):
        run_pretrain(config(out, corpus, steps=10))
    assert (out / "metrics.csv").read_text() == before


def test_spend_carries_across_invocations_of_the_same_run(tmp_path: Path, corpus: CorpusSpec) -> None:
    out = tmp_path / "restarted"
    run_pretrain(config(out, corpus, steps=5, checkpoint_every=0, price_per_hour=3600.0))
    first = json.loads((out / "budget.json").read_text())["spent_usd"]
    run_pretrain(config(out, corpus, steps=5, checkpoint_every=0, price_per_hour=3600.0))
    assert json.loads((out / "budget.json").read_text())["spent_usd"] > first


def test_metrics_come_wide_and_long_and_the_final_weights_reload_byte_for_byte(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    out = tmp_path / "artifacts"
    run_pretrain(config(out, corpus, steps=10))
    wide = metrics(out)
    long = (out / METRICS_LONG_FILE).read_text().splitlines()
    assert long[0] == "step,name,value"
    measured = {(r["step"], k, v) for r in wide for k, v in r.items() if k != "step" and v != ""}
    assert {tuple(line.split(",")) for line in long[1:]} == measured
    assert {"val_loss", "val_bpb"} <= {name for _, name, _ in measured}
    model = build_model(RECIPE, torch.device("cpu"))  # the recipe's model, freshly initialised
    load_model(model, str(out / "final.safetensors"))
    again = tmp_path / "again.safetensors"
    save_model(model, str(again))
    assert again.read_bytes() == (out / "final.safetensors").read_bytes()
