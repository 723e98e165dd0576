"""``pretrain --mlflow-uri`` against real local stores, read back with MLflow's client: every
logged step, the recipe as params, the artifacts, and one run across a stop and its resume."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("mlflow", reason="the mlflow extra: pip install 'recipelab[mlflow]'")

from mlflow.tracking import MlflowClient

from recipelab.longrun.run import run_pretrain
from recipelab.tracking import read_run_id
from recipelab.trainer.spec import CorpusSpec
from tests.longrun.test_run import config, events


def test_a_long_run_logs_every_step_its_recipe_and_its_artifacts(
        mlflow_store: str, tmp_path: Path, corpus: CorpusSpec) -> None:
    out = tmp_path / "run"
    run_pretrain(config(out, corpus, steps=10, mlflow_uri=mlflow_store, inject_spike_at_step=4,
                        spike_steps=2, price_per_hour=1.0))
    run_id = read_run_id(out)
    assert run_id is not None
    client = MlflowClient(mlflow_store)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["recipelab.stop_reason"] == "complete"
    assert run.data.tags["recipelab.spike_rehearsal"] == "steps 4-5"
    assert run.data.params["recipe.optimizer.lr"] == str(config(out, corpus).recipe.optimizer.lr)
    for name, steps in (("train_loss", [5, 10]), ("val_bpb", [10]), ("val_loss", [10]),
                        ("usd_spent", [5, 10]), ("lr", [5, 10])):
        assert sorted(m.step for m in client.get_metric_history(run_id, name)) == steps, name
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"manifest.json", "metrics.csv", "metrics-long.csv", "loss-curve.png"} <= artifacts


def test_a_resume_reopens_the_same_run_and_completes_its_curve(
        mlflow_store: str, tmp_path: Path, corpus: CorpusSpec) -> None:
    out = tmp_path / "capped"
    stopped = run_pretrain(config(out, corpus, steps=10_000_000, price_per_hour=3600.0,
                                  budget_cap_usd=500.0, eval_every=1000, checkpoint_every=1000,
                                  mlflow_uri=mlflow_store))
    assert stopped.stop_reason == "budget_projection"
    first = read_run_id(out)
    assert first is not None and MlflowClient(mlflow_store).get_run(first).info.status == "KILLED"
    resumed = run_pretrain(config(out, corpus, steps=10, resume_from_latest=True, mlflow_uri=mlflow_store))
    assert resumed.stop_reason == "complete" and read_run_id(out) == first
    client = MlflowClient(mlflow_store)
    experiment = client.get_experiment_by_name("pretrain")
    assert experiment is not None
    assert len(client.search_runs([experiment.experiment_id])) == 1
    assert client.get_run(first).info.status == "FINISHED"
    assert 10 in {m.step for m in client.get_metric_history(first, "train_loss")}


def test_a_store_that_cannot_be_reached_is_a_warning_and_the_run_goes_on(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    out = tmp_path / "down"
    result = run_pretrain(config(out, corpus, steps=5, eval_every=5,
                                 mlflow_uri="http://user:secret@127.0.0.1:9/"))
    assert result.stop_reason == "complete"
    failed = [e for e in events(out) if e["event"] == "mlflow_failed"]
    assert failed and all("secret" not in str(e) for e in failed)
    assert "secret" not in (out / "events.jsonl").read_text()
