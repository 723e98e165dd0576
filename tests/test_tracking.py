"""MLflow tracking against real local stores (a ``file:`` directory and a SQLite database),
read back with MLflow's own client: what recipelab logs is what a user finds in MLflow."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("mlflow", reason="the mlflow extra: pip install 'recipelab[mlflow]'")

from mlflow.tracking import MlflowClient

from recipelab.tracking import (
    MAX_METRICS_PER_BATCH,
    MAX_PARAM_VALUE_CHARS,
    RUN_URI_FILE,
    MlflowRun,
    RunNotFound,
    TrackingUnavailable,
    check_tracking_uri,
    read_run_id,
    read_run_location,
    write_run_uri,
)


def metric_steps(client: MlflowClient, run_id: str, name: str) -> dict[int, float]:
    return {m.step: m.value for m in client.get_metric_history(run_id, name)}


def test_every_step_logged_is_read_back_with_its_step(mlflow_store: str) -> None:
    run = MlflowRun.start(mlflow_store, "exp", "long-run")
    steps = range(0, 2 * MAX_METRICS_PER_BATCH + 10)  # more than one batch per metric
    run.log_history({"train_loss": [(s, 5.0 / (s + 1)) for s in steps]})
    for step in (0, 10, 20):
        run.log_metrics({"val_bpb": 1.5 - step / 100, "lr": 3e-3, "mfu": None,
                         "grad_norm": math.nan, "tokens_per_s": 1e5}, step=step)
    run.end()

    client = MlflowClient(mlflow_store)
    history = metric_steps(client, run.run_id, "train_loss")
    assert sorted(history) == list(steps)
    assert history[9] == pytest.approx(0.5)
    assert metric_steps(client, run.run_id, "val_bpb") == pytest.approx({0: 1.5, 10: 1.4, 20: 1.3})
    logged = client.get_run(run.run_id).data.metrics
    assert "mfu" not in logged and "grad_norm" not in logged  # None and NaN are left out
    assert client.get_run(run.run_id).info.status == "FINISHED"


def test_params_are_flattened_with_dots_and_long_values_cut_to_mlflow_limit(mlflow_store: str) -> None:
    run = MlflowRun.start(mlflow_store, "exp", "params")
    recipe = {"optimizer": {"lr": 3e-3, "betas": [0.9, 0.95], "name": "adamw"},
              "shape": {"layers": 4, "attention": {"qk_norm": True}}, "seed": 0,
              "note": "x" * (MAX_PARAM_VALUE_CHARS + 50)}
    recipe.update({f"knob_{i}": i for i in range(150)})  # more than one batch of params
    run.log_params(recipe)

    params = MlflowClient(mlflow_store).get_run(run.run_id).data.params
    assert params["optimizer.lr"] == "0.003"
    assert params["optimizer.betas"] == "[0.9, 0.95]"
    assert params["optimizer.name"] == "adamw"
    assert params["shape.attention.qk_norm"] == "true"
    assert params["knob_149"] == "149"
    assert len(params["note"]) == MAX_PARAM_VALUE_CHARS


def test_a_run_is_reopened_from_its_run_uri_file_not_duplicated(mlflow_store: str, tmp_path: Path) -> None:
    out = tmp_path / "pretrain"
    out.mkdir()
    first = MlflowRun.start(mlflow_store, "exp", "pretrain", tags={"recipelab.kind": "long_run"})
    written = write_run_uri(out, first)
    first.log_metrics({"train_loss": 4.0}, step=0)
    first.end("KILLED")  # the machine went away

    assert written == out / RUN_URI_FILE
    assert read_run_id(out) == first.run_id
    location = read_run_location(out)
    assert location is not None and location.run_id == first.run_id
    again = MlflowRun.start(mlflow_store, "exp", "pretrain", run_id=read_run_id(out))
    assert MlflowClient(mlflow_store).get_run(first.run_id).info.status == "RUNNING"
    again.log_metrics({"train_loss": 3.0}, step=1)
    again.end()

    client = MlflowClient(mlflow_store)
    runs = client.search_runs([location.experiment_id])
    assert [r.info.run_id for r in runs] == [first.run_id]
    assert metric_steps(client, first.run_id, "train_loss") == {0: 4.0, 1: 3.0}
    assert runs[0].data.tags["recipelab.kind"] == "long_run"
    assert runs[0].info.status == "FINISHED"


def test_a_child_run_names_its_parent_and_an_artifact_is_stored(mlflow_store: str, tmp_path: Path) -> None:
    parent = MlflowRun.start(mlflow_store, "campaign", "campaign")
    child = MlflowRun.start(mlflow_store, "campaign", "p0001", parent=parent, tags={"trial": "p0001"})
    recipe = tmp_path / "recipe.json"
    recipe.write_text('{"seed": 0}')
    child.log_artifact(recipe, "recipe")
    child.set_tag("recipelab.status", "failed")
    child.end("FAILED")

    client = MlflowClient(mlflow_store)
    children = client.search_runs([parent.experiment_id],
                                  f"tags.`mlflow.parentRunId` = '{parent.run_id}'")
    assert [c.info.run_id for c in children] == [child.run_id]
    assert children[0].info.status == "FAILED"
    assert children[0].data.tags["recipelab.status"] == "failed"
    assert [a.path for a in client.list_artifacts(child.run_id, "recipe")] == ["recipe/recipe.json"]


def test_a_sqlite_store_keeps_artifacts_beside_its_database(tmp_path: Path, monkeypatch) -> None:
    """Not in the current directory, MLflow's default, which moves with the shell."""
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    run = MlflowRun.start(f"sqlite:///{tmp_path / 'mlflow.db'}", "exp", "r")
    artifact = tmp_path / "a.txt"
    artifact.write_text("a")
    run.log_artifact(artifact)

    assert (tmp_path / "mlartifacts").is_dir()
    assert list(elsewhere.iterdir()) == []


def test_reopening_a_run_the_store_does_not_have_says_what_to_do(mlflow_store: str) -> None:
    MlflowRun.start(mlflow_store, "exp", "r")  # the store exists, the run does not
    with pytest.raises(RunNotFound, match=f"remove {RUN_URI_FILE}"):
        MlflowRun.start(mlflow_store, "exp", "r", run_id="0" * 32)


def test_a_path_becomes_an_absolute_file_uri_and_a_relative_sqlite_file_absolute(
        tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert check_tracking_uri("mlruns") == (tmp_path / "mlruns").as_uri()
    assert check_tracking_uri("sqlite:///m.db") == f"sqlite:///{tmp_path / 'm.db'}"
    assert check_tracking_uri("http://mlflow.lan:5000") == "http://mlflow.lan:5000"


def test_a_scheme_mlflow_does_not_serve_is_refused_with_the_uri_redacted() -> None:
    with pytest.raises(TrackingUnavailable) as caught:
        check_tracking_uri("ftp://ann:hunter2@host/mlruns")
    message = str(caught.value)
    assert "hunter2" not in message and "ftp://ann:[redacted]@host/mlruns" in message
    assert "sqlite:///" in message and "http://" in message  # what to give instead


def test_a_server_that_is_down_is_tracking_unavailable_without_its_password(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with pytest.raises(TrackingUnavailable) as caught:
        MlflowRun.start(f"http://ann:hunter2@127.0.0.1:{port}", "exp", "r")
    message = str(caught.value)
    assert "hunter2" not in message
    assert f"http://ann:[redacted]@127.0.0.1:{port}" in message
    assert "tracking server is up" in message


def test_without_mlflow_installed_the_uri_is_refused_with_the_install_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing package is simulated the way Python reports one (a None entry in
    sys.modules makes the import raise ImportError): uninstalling mlflow mid-suite cannot be
    done for real."""
    import sys

    for name in ("mlflow", "mlflow.tracking"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(TrackingUnavailable, match=r"pip install 'recipelab\[mlflow\]'"):
        check_tracking_uri("sqlite:////tmp/never/mlflow.db")
