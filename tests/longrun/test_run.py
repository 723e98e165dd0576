"""``recipelab pretrain``: the long run on the tiny proxy shape, in-process and as real
processes (a 2-process torchrun on gloo, and a SIGKILL followed by a resume)."""

from __future__ import annotations

import csv
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recipelab.cli import app
from recipelab.longrun.pretrain_config import CHECKPOINT_DIR, PretrainConfig
from recipelab.longrun.run import run_pretrain
from recipelab.longrun.run_process import LOCK_FILE, RunLocked
from recipelab.targets import proxy_recipe
from recipelab.trainer.spec import CorpusSpec

RECIPE = proxy_recipe("tiny").apply({"steps": 30})
CURVE_COLUMNS = ("step", "tokens", "train_loss", "val_bpb", "grad_norm", "param_norm", "lr")
POLL_S = 0.02


def config(out: Path, corpus: CorpusSpec, **options: object) -> PretrainConfig:
    settings: dict[str, object] = {"log_every": 5, "eval_every": 10, "checkpoint_every": 10,
                                   "threads": 1, "device": "cpu", **options}
    recipe = RECIPE.apply({"steps": settings.pop("steps")}) if "steps" in settings else RECIPE
    return PretrainConfig.model_validate({"recipe": recipe.model_dump(), "out_dir": str(out),
                                          "corpus": corpus.model_dump(), **settings})


def metrics(out: Path) -> list[dict[str, str]]:
    with (out / "metrics.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def curve(out: Path) -> list[tuple[str, ...]]:
    return [tuple(row[c] for c in CURVE_COLUMNS) for row in metrics(out)]


def events(out: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def test_a_run_writes_every_artifact_and_rehearses_a_spike(tmp_path: Path, corpus: CorpusSpec) -> None:
    out = tmp_path / "run"
    result = run_pretrain(config(out, corpus, inject_spike_at_step=15, price_per_hour=1.0,
                                 alert_at_usd=1e-9, min_tokens_per_s=1e12))
    assert result.stop_reason == "complete" and result.steps_done == 30
    for name in ("metrics.csv", "budget.json", "events.jsonl", "manifest.json", "final.safetensors",
                 "loss-curve.png", "gradnorm-curve.png", "throughput.png", "spike-postmortem.md"):
        assert (out / name).exists(), name
    rows = metrics(out)
    assert [int(r["step"]) for r in rows] == [5, 10, 15, 20, 25, 30]
    assert all(r["val_bpb"] for r in rows if int(r["step"]) % 10 == 0)
    assert all(r[c] for r in rows for c in ("train_loss", "grad_norm", "param_norm", "lr",
                                             "usd_spent", "tokens"))
    spike_row = next(r for r in rows if r["step"] == "15")
    assert float(spike_row["train_loss"]) > 1.2 * float(rows[1]["train_loss"])  # visible in metrics
    postmortem = (out / "spike-postmortem.md").read_text()
    assert "rare tokens" in postmortem and "recovered:" in postmortem
    budget = json.loads((out / "budget.json").read_text())
    assert {"spent_usd", "projected_total_usd", "rate_usd_per_hour", "elapsed_s"} <= set(budget)
    assert budget["rate_usd_per_hour"] == 1.0 and budget["stop_reason"] == "complete"
    names = [e["event"] for e in events(out)]
    assert names.count("budget_alert") == 1 and names.count("throughput_below_floor") == 1
    assert [e["step"] for e in events(out) if e["event"] == "spike_rehearsal"] == [15]
    assert all(e["campaign"] == "pretrain" for e in events(out))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stop_reason"] == "complete" and manifest["spent_usd"] == pytest.approx(
        budget["spent_usd"], rel=0.5)
    assert manifest["provenance"]["code_version"] and manifest["recipe_fingerprint"]
    assert manifest["cluster"]["torch"] and manifest["cluster"]["world_size"] == 1


def test_without_a_spike_the_same_step_is_not_a_spike(tmp_path: Path, corpus: CorpusSpec) -> None:
    out = tmp_path / "calm"
    run_pretrain(config(out, corpus, steps=15, eval_every=100))
    rows = metrics(out)
    assert float(rows[2]["train_loss"]) < float(rows[1]["train_loss"]) * 1.2
    assert not (out / "spike-postmortem.md").exists()


def test_a_projection_over_the_cap_stops_gracefully_after_a_checkpoint(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    # $3,600 an hour is $1 a second: ten million steps of even a millisecond project far
    # over $500, while the first log step has spent a few dollars.
    out = tmp_path / "capped"
    result = run_pretrain(config(out, corpus, steps=10_000_000, price_per_hour=3600.0,
                                 budget_cap_usd=500.0, eval_every=1000, checkpoint_every=1000))
    assert result.stop_reason == "budget_projection"
    budget = json.loads((out / "budget.json").read_text())
    assert budget["stop_reason"] == "budget_projection"
    assert budget["spent_usd"] <= 500.0 < budget["projected_total_usd"]
    latest = (out / CHECKPOINT_DIR / "latest").read_text().strip()
    assert latest == f"step-{result.steps_done:08d}"
    assert not (out / "final.safetensors").exists()
    stop = [e for e in events(out) if e["event"] == "budget_stop"]
    assert len(stop) == 1 and "checkpoint" in str(stop[0]["how"])


def test_spending_over_the_cap_stops_at_once(tmp_path: Path, corpus: CorpusSpec) -> None:
    out = tmp_path / "spent"
    result = run_pretrain(config(out, corpus, price_per_hour=3600.0, budget_cap_usd=0.001))
    assert result.stop_reason == "budget_spent" and result.steps_done == 1
    budget = json.loads((out / "budget.json").read_text())
    assert budget["stop_reason"] == "budget_spent" and budget["spent_usd"] > 0.001
    assert not (out / CHECKPOINT_DIR).exists()


def test_dry_run_budget_prints_the_projection_and_writes_nothing(
        tmp_path: Path, corpus: CorpusSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = tmp_path / "recipe.json"
    recipe.write_text(RECIPE.model_dump_json())
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("RECIPELAB_CACHE", corpus.cache_dir or "")
    out = tmp_path / "dry"
    result = CliRunner().invoke(app, [
        "pretrain", "--recipe", str(recipe), "--out", str(out), "--corpus", corpus.source,
        "--total-steps", "1000", "--price-per-hour", "36", "--budget-cap-usd", "1e-6",
        "--dry-run-budget", "--device", "cpu", "--threads", "1"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed["total_steps"] == 1000 and printed["measured_steps"] == 5
    steps_cost = printed["seconds_per_step"] * 1000 / 100  # $36/h is $0.01/s; setup is billed too
    assert steps_cost <= printed["projected_total_usd"] <= steps_cost * 1.5 + 1.0
    assert printed["over_cap"] is True
    paths = printed["paths"]
    assert paths["alert"]["step"] is None  # no alert level given
    assert paths["spent_over_cap"]["step"] == 1 and "no checkpoint" in paths["spent_over_cap"]["does"]
    assert paths["projection_over_cap"]["step"] is None  # spending passes a $1e-6 cap first
    assert not (out / "metrics.csv").exists() and not (out / "events.jsonl").exists()


def test_dry_run_budget_says_at_which_step_the_alert_and_the_projection_stop_fire(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    from recipelab.longrun.pretrain_config import dry_run_report

    # $3,600/h is $1/s: a million steps project far over a $50 cap, spent reaches $20 later
    settings = config(tmp_path / "dry", corpus, steps=1_000_000, price_per_hour=3600.0,
                      budget_cap_usd=50.0, alert_at_usd=20.0, dry_run_budget=True)
    report = dry_run_report(settings, run_pretrain(settings))
    paths = report["paths"]
    assert paths["projection_over_cap"]["step"] == settings.log_every
    assert "checkpoint" in paths["projection_over_cap"]["does"]
    alert, spent = paths["alert"]["step"], paths["spent_over_cap"]["step"]
    assert alert is not None and spent is not None and settings.log_every < alert < spent


def launch(command: list[str], env: dict[str, str], timeout: float) -> None:
    """Run a training process to its end; a failure shows the end of what it printed."""
    done = subprocess.run(command, env=env, timeout=timeout, capture_output=True, text=True)
    assert done.returncode == 0, f"exit status {done.returncode}:\n{done.stderr[-6000:]}"


def _pretrain_process(recipe: Path, out: Path, corpus: CorpusSpec, *extra: str,
                      torchrun: int | None = None) -> list[str]:
    common = ["pretrain", "--recipe", str(recipe), "--out", str(out), "--corpus", corpus.source,
              "--log-every", "5", "--eval-every", "10", "--device", "cpu", *extra]
    if torchrun:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", str(torchrun), "-m", "recipelab", *common]
    return [sys.executable, "-m", "recipelab", *common, "--threads", "1"]


def test_two_processes_follow_the_one_process_curve_with_the_same_global_batch(
        tmp_path: Path, corpus: CorpusSpec, trainer_env: dict[str, str]) -> None:
    recipe = tmp_path / "recipe.json"
    recipe.write_text(RECIPE.model_dump_json())
    env = {**trainer_env, "RECIPELAB_CACHE": corpus.cache_dir or ""}
    single, double = tmp_path / "one", tmp_path / "two"
    run_pretrain(config(single, corpus, steps=20))
    launch(_pretrain_process(recipe, double, corpus, "--total-steps", "20",
                             "--checkpoint-every", "10", torchrun=2), env, timeout=240)
    one, two = metrics(single), metrics(double)
    assert [r["step"] for r in one] == [r["step"] for r in two]
    for a, b in zip(one, two, strict=True):
        assert float(b["train_loss"]) == pytest.approx(float(a["train_loss"]), rel=1e-4)
        if a["val_bpb"]:
            assert float(b["val_bpb"]) == pytest.approx(float(a["val_bpb"]), rel=1e-4)
    assert json.loads((double / "manifest.json").read_text())["world_size"] == 2


def test_a_resume_after_sigkill_continues_the_uninterrupted_curve_exactly(
        tmp_path: Path, corpus: CorpusSpec, trainer_env: dict[str, str]) -> None:
    recipe = tmp_path / "recipe.json"
    recipe.write_text(RECIPE.apply({"steps": 40}).model_dump_json())
    env = {**trainer_env, "RECIPELAB_CACHE": corpus.cache_dir or ""}
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    args = ("--checkpoint-every", "7", "--keep-last", "2")  # mid-interval: the partial sum resumes too
    run_pretrain(config(whole, corpus, steps=40, checkpoint_every=7, keep_last=2))
    process = subprocess.Popen(_pretrain_process(recipe, killed, corpus, *args), env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    latest = killed / CHECKPOINT_DIR / "latest"
    while not latest.exists() and process.poll() is None:
        time.sleep(POLL_S)
    os.kill(process.pid, signal.SIGKILL)
    assert process.wait(timeout=60) == -signal.SIGKILL, "the run finished before it was killed"
    assert not (killed / "final.safetensors").exists()
    launch(_pretrain_process(recipe, killed, corpus, *args, "--resume-from-latest"), env,
           timeout=300)
    assert curve(killed) == curve(whole)
    assert len(list((killed / CHECKPOINT_DIR).glob("step-*"))) == 2
    resumed = [e for e in events(killed) if e["event"] == "pretrain_start"]
    assert resumed[-1]["resumed_from"] is not None


def test_a_second_run_into_a_directory_still_being_written_is_refused(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    out = tmp_path / "busy"
    out.mkdir()
    with (out / LOCK_FILE).open("a+") as held:  # what a rank 0 left running by a killed torchrun holds
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("pretrain pid 12345 on elsewhere")
        held.flush()
        with pytest.raises(RunLocked, match=r"pid 12345 .* still writing"):
            run_pretrain(config(out, corpus, resume_from_latest=True))
    assert not (out / "metrics.csv").exists()
    result = run_pretrain(config(out, corpus, steps=5, eval_every=5))  # free again
    assert result.stop_reason == "complete"
