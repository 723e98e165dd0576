"""Shared fixtures: one tokenized corpus cache per session, single-threaded torch, and the
MLflow stores the tracking tests log to.

The machine running the tests has two shared cores; two torch threads per process fight
with everything else for them (a tiny-preset step goes from ~20 ms to ~300 ms), so tests
run torch, in-process and in trainer subprocesses, on one thread.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from recipelab.trainer.spec import CorpusSpec


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session", autouse=True)
def _private_memory_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Campaigns and sweeps under test record peaks in a memory model of their own, never in
    the user's (trainer and CLI subprocesses inherit the variable)."""
    before = os.environ.get("RECIPELAB_MEMORY_MODEL")
    os.environ["RECIPELAB_MEMORY_MODEL"] = str(tmp_path_factory.mktemp("memory") / "model.json")
    yield
    if before is None:
        os.environ.pop("RECIPELAB_MEMORY_MODEL", None)
    else:
        os.environ["RECIPELAB_MEMORY_MODEL"] = before


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> CorpusSpec:
    """The built-in python-docs corpus, tokenized once per session into a private cache."""
    return CorpusSpec(source="python-docs",
                      cache_dir=str(tmp_path_factory.mktemp("corpus-cache")))


@pytest.fixture(scope="session")
def trainer_env() -> dict[str, str]:
    """The environment for ``python -m recipelab.trainer`` subprocesses (one torch thread)."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """A Ray instance on this machine (2 CPUs, loopback) for one test module: starting one
    costs seconds. Imported here, not at the top: Ray is an optional extra."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1", runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def attributed_campaign(tmp_path_factory: pytest.TempPathFactory, corpus: CorpusSpec) -> Path:
    """A finished campaign on the in-memory fake executor whose winner's edit has a real part
    (the learning rate, 1e-2 to the fake's optimum 3e-3) and a planted neutral part
    (``optimizer.eps``, which the fake ignores), attributed at three seeds: the records the
    report, the export and the calibration read (see tests/agent/test_attribution_phase.py)."""
    from recipelab.agent.campaign import Campaign
    from recipelab.agent.settings import (
        CampaignSettings,
        ExecutorSettings,
        LadderSettings,
        SearchSettings,
        WindowSettings,
        save,
    )
    from recipelab.proposer import Observation, Proposal, Proposer
    from recipelab.runner import FakeExecutor

    settings = CampaignSettings(name="attributed", preset="tiny", corpus=corpus, precision="fp32",
                                window=WindowSettings(iterations=4),
                                ladder=LadderSettings(promote=1, stress_steps=30,
                                                      stress_checkpoint_every=10, rung_size=0),
                                search=SearchSettings(noise_seeds=3), executor=ExecutorSettings(parallel=1))
    baseline = settings.baseline()

    class Planted(Proposer):
        name = "planted"

        def propose(self, history: list[Observation], n: int) -> list[Proposal]:
            return [Proposal.from_edit(baseline, None, {"optimizer.lr": 3e-3,
                                                        "optimizer.eps": 1e-10},
                                       "a better learning rate and a neutral eps", self.name)]

    directory = tmp_path_factory.mktemp("attributed")
    save(settings, directory)  # as 'recipelab run' does, for 'recipelab export DIR'
    Campaign(settings, directory, proposer=Planted(), executor=FakeExecutor(
        recipe_noise=0.002)).run()
    return directory


@pytest.fixture(params=["file", "sqlite"])
def mlflow_store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A real local MLflow store of each kind recipelab documents: a directory and SQLite."""
    if request.param == "file":
        return (tmp_path / "mlruns").as_uri()
    return f"sqlite:///{tmp_path / 'mlflow.db'}"
