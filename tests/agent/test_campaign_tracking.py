"""A campaign in MLflow (``--mlflow-uri``): one parent run, one child run per ended trial,
reopened (never duplicated) on resume, and never a reason for a trial to stop or be lost.
Real local stores, read back with MLflow's client; trials on the in-memory fake executor."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

pytest.importorskip("mlflow", reason="the mlflow extra: pip install 'recipelab[mlflow]'")

from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from recipelab.agent.campaign import Campaign
from recipelab.agent.campaign_tracking import PARENT_TAG, TRIAL_ID_TAG, logged_settings
from recipelab.agent.setup.settings import CampaignSettings, save
from recipelab.runner.fake import synthetic_outcome
from recipelab.tracking import RUN_URI_FILE, MlflowRun, read_run_id
from recipelab.trainer.spec import TrialResult, TrialSpec

from .conftest import events, fake_executor, read_jsonl


def runs_of(uri: str, campaign: str) -> tuple[list[Run], list[Run]]:
    """The campaign's experiment's runs: (parents, children)."""
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(campaign)
    assert experiment is not None, f"no experiment {campaign!r}"
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    return ([r for r in runs if PARENT_TAG not in r.data.tags],
            [r for r in runs if PARENT_TAG in r.data.tags])


def test_each_ended_trial_is_one_child_run_with_its_recipe_val_bpb_and_curve(
        tmp_path: Path, tiny_settings: CampaignSettings, mlflow_store: str) -> None:
    settings = tiny_settings.model_copy(update={"iterations": 3, "promote": 1, "mlflow_uri": mlflow_store})
    campaign_dir = tmp_path / "campaign"

    Campaign(settings, campaign_dir, executor=fake_executor()).run()

    records = {r["trial_id"]: r for r in read_jsonl(campaign_dir / "trajectory.jsonl")}
    parents, children = runs_of(mlflow_store, "tiny")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert read_run_id(campaign_dir) == parents[0].info.run_id
    assert parents[0].data.params["preset"] == "tiny"
    assert parents[0].data.params["ladder.promote"] == "1"  # each component's fields, dotted
    assert "store.mlflow_uri" not in parents[0].data.params, "a URL that may hold credentials"
    by_trial = {c.data.tags[TRIAL_ID_TAG]: c for c in children}
    assert sorted(by_trial) == sorted(records) and len(children) == len(records)
    # the rung runs are the baseline's learning-rate family, for the horizon rule
    assert {r["kind"] for r in records.values()} == {"proxy", "rung", "stress"}
    client = MlflowClient(mlflow_store)
    for trial_id, record in records.items():
        child = by_trial[trial_id]
        assert child.data.tags[PARENT_TAG] == parents[0].info.run_id
        assert child.data.tags["recipelab.status"] == record["status"] == "complete"
        assert child.data.tags["recipelab.kind"] == record["kind"]
        assert child.info.status == "FINISHED"
        assert child.data.metrics["val_bpb"] == pytest.approx(record["val_bpb"])
        assert child.data.params["optimizer.lr"] == str(record["recipe"]["optimizer"]["lr"])
        assert child.data.params["seed"] == str(record["recipe"]["seed"])
        curve = {m.step: m.value for m in client.get_metric_history(child.info.run_id, "train_loss")}
        assert curve == pytest.approx({p["step"]: p["loss"] for p in record["curve"]})
        assert len(curve) > 1


def test_a_resumed_campaign_reopens_its_run_and_logs_no_trial_twice(
        tmp_path: Path, tiny_settings: CampaignSettings, mlflow_store: str) -> None:
    settings = tiny_settings.model_copy(update={"iterations": 2, "promote": 0, "mlflow_uri": mlflow_store})
    campaign_dir = tmp_path / "campaign"
    Campaign(settings, campaign_dir, executor=fake_executor()).run()
    parent_id = read_run_id(campaign_dir)
    assert parent_id is not None
    # a crash while p0001 was being logged again left a half-logged child behind
    parent = MlflowRun.start(mlflow_store, "tiny", "tiny", run_id=parent_id)
    MlflowRun.start(mlflow_store, "tiny", "p0001", parent=parent, tags={TRIAL_ID_TAG: "p0001"})

    resumed = settings.model_copy(update={"iterations": 4})
    Campaign(resumed, campaign_dir, executor=fake_executor()).run()

    parents, children = runs_of(mlflow_store, "tiny")
    assert [p.info.run_id for p in parents] == [parent_id]
    assert parents[0].info.status == "FINISHED"
    assert sorted(c.data.tags[TRIAL_ID_TAG] for c in children) == [
        "p0000", "p0001", "p0002", "p0003"]
    assert {c.info.status for c in children} == {"FINISHED"}


def test_a_store_down_mid_campaign_loses_no_trial_and_the_next_record_catches_up(
        tmp_path: Path, tiny_settings: CampaignSettings) -> None:
    """The file store's experiment directory is taken away while p0001 trains (a real
    failure of the store: MLflow cannot create the run) and given back while p0002 trains."""
    store_dir = tmp_path / "mlruns"
    settings = tiny_settings.model_copy(update={"iterations": 3, "promote": 0,
                                                "mlflow_uri": store_dir.as_uri()})
    campaign_dir = tmp_path / "campaign"
    aside = tmp_path / "aside"
    broken: list[Path] = []

    def outcome(spec: TrialSpec) -> TrialResult:
        if spec.trial_id == "p0001":  # the store goes down
            experiment = next(p for p in store_dir.iterdir() if (p / "meta.yaml").exists()
                              and p.name != "0")
            experiment.rename(aside)
            experiment.write_text("not an experiment")
            broken.append(experiment)
        if spec.trial_id == "p0002":  # and comes back
            broken[0].unlink()
            aside.rename(broken[0])
        return synthetic_outcome(spec)

    summary = Campaign(settings, campaign_dir, executor=fake_executor(outcome=outcome)).run()

    assert summary.proxy_trials == 3
    failures = events(campaign_dir, "mlflow_failed")
    assert [f["pending"] for f in failures] == [["p0001"]]
    assert failures[0]["level"] == "warning" and "tracking server is up" in failures[0]["error"]
    _, children = runs_of(store_dir.as_uri(), "tiny")
    assert sorted(c.data.tags[TRIAL_ID_TAG] for c in children) == ["p0000", "p0001", "p0002"]


def test_an_unreachable_server_stops_no_trial_and_its_password_is_never_written(
        tmp_path: Path, tiny_settings: CampaignSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    settings = tiny_settings.model_copy(update={
        "iterations": 2, "promote": 0, "mlflow_uri": f"http://ann:hunter2@127.0.0.1:{port}"})
    campaign_dir = tmp_path / "campaign"
    campaign_dir.mkdir()
    save(settings, campaign_dir)

    summary = Campaign(settings, campaign_dir, executor=fake_executor()).run()

    assert summary.proxy_trials == 2
    assert [r["status"] for r in read_jsonl(campaign_dir / "trajectory.jsonl")] == ["complete"] * 2
    failures = events(campaign_dir, "mlflow_failed")
    assert failures and failures[-1]["pending"] == ["p0000", "p0001"]
    assert f"http://ann:[redacted]@127.0.0.1:{port}" in failures[-1]["uri"]
    for written in campaign_dir.rglob("*"):
        if written.is_file():
            assert "hunter2" not in written.read_text(errors="replace"), written
    assert not (campaign_dir / RUN_URI_FILE).exists()
    shutil.rmtree(campaign_dir)


def test_the_urls_that_may_hold_credentials_are_not_logged_from_whichever_component_holds_them(
        tiny_settings: CampaignSettings) -> None:
    settings = tiny_settings.model_copy(update={
        "llm_base_url": "http://ann:hunter2@127.0.0.1:8000/v1", "db": "postgresql://ann:hunter2@db/t",
        "mlflow_uri": "http://ann:hunter2@127.0.0.1:5000"})
    logged = logged_settings(settings)
    assert "hunter2" not in repr(logged)
    assert logged["proposer"]["llm_share"] == settings.proposer.llm_share  # the rest is logged
    assert "llm_base_url" not in logged["proposer"] and logged["store"] == {}
