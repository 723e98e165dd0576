"""Specifications of the Ray executor, on a real local Ray instance (2 CPUs, loopback)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import ray

from recipelab.runner.ray import WORKER_FILE, RayExecutor
from recipelab.targets import proxy_recipe
from recipelab.trainer.spec import CorpusSpec, TrialSpec

pytestmark = pytest.mark.usefixtures("ray_cluster")


def tiny_spec(tmp_path: Path, corpus: CorpusSpec, trial_id: str, **update: object) -> TrialSpec:
    return TrialSpec(trial_id=trial_id, recipe=proxy_recipe("tiny").apply({"steps": 5, **update}),
                     corpus=corpus, out_dir=str(tmp_path / trial_id))


def test_a_trial_is_a_ray_task_that_trains_in_place_and_reports_its_worker(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    executor = RayExecutor()
    spec = tiny_spec(tmp_path, corpus, "t1")
    result = executor.wait(executor.submit(spec, timeout_s=120))
    executor.close()
    assert ray.is_initialized(), "closing must not stop a Ray instance it did not start"
    assert result.status == "complete" and result.val_bpb is not None
    worker = json.loads((tmp_path / "t1" / WORKER_FILE).read_text())
    assert worker["worker_pid"] != os.getpid()
    assert (tmp_path / "t1" / "result.json").exists()


def test_a_trial_on_a_machine_without_the_campaign_directory_hands_its_files_back(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    """``shared_files=False``: every task trains in scratch, as on a node that cannot see
    the campaign directory."""
    executor = RayExecutor(shared_files=False)
    out_dir = tmp_path / "t2"
    result = executor.wait(executor.submit(tiny_spec(tmp_path, corpus, "t2"), timeout_s=120))
    assert result.status == "complete"
    assert not (out_dir / WORKER_FILE).exists(), "the task trained here, not in scratch"
    assert "val_bpb" in (out_dir / "trial.log").read_text()
    assert json.loads((out_dir / "result.json").read_text())["trial_id"] == "t2"


def test_checkpoints_of_a_trial_in_scratch_come_home_as_written_and_go_out_to_resume(
        tmp_path: Path, corpus: CorpusSpec) -> None:
    """A stress run on a node without the campaign directory: its checkpoints arrive in the
    campaign directory while it trains, so a lost worker costs only the steps since the last
    one; the re-run is handed that checkpoint and continues from it."""
    executor = RayExecutor(shared_files=False)
    spec = tiny_spec(tmp_path, corpus, "s0", steps=100_000).model_copy(
        update={"kind": "stress", "checkpoint_every": 5})
    handle = executor.submit(spec, timeout_s=300)
    latest = spec.checkpoint_path / "latest"
    deadline = time.monotonic() + 120
    while not latest.exists():  # polling is what installs the checkpoints that arrived
        assert executor.poll(handle) is None and time.monotonic() < deadline
        time.sleep(0.2)
    executor.cancel(handle)
    assert executor.wait(handle).status == "failed"
    kept = latest.read_text().strip()
    assert (spec.checkpoint_path / kept / "model.safetensors").exists()

    resumed = spec.model_copy(update={"recipe": spec.recipe.apply({"steps": 30})})
    result = executor.wait(executor.submit(resumed, resume=True, timeout_s=300))
    executor.close()

    assert result.status == "complete", result.message
    assert result.resumed_from_step is not None and result.resumed_from_step >= 5


def test_the_device_is_the_one_a_worker_sees(tmp_path: Path) -> None:
    executor = RayExecutor()
    assert executor.device("cpu").kind == "cpu"
    with pytest.raises(ValueError, match="on the Ray workers: --device cuda was asked"):
        executor.device("cuda")
