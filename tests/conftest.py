"""Shared fixtures: one tokenized corpus cache per session, single-threaded torch, the finished
campaigns the report and the hand-off read (one run each per session), and the
MLflow stores the tracking tests log to.

The machine running the tests has two shared cores; two torch threads per process fight
with everything else for them (a tiny-preset step goes from ~20 ms to ~300 ms), so tests
run torch, in-process and in trainer subprocesses, on one thread.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from recipelab.agent.campaign import Campaign
from recipelab.agent.setup.settings import (
    CampaignSettings,
    ExecutorSettings,
    LadderSettings,
    SearchSettings,
    WindowSettings,
    save,
)
from recipelab.trainer.spec import CorpusSpec
from tests.agent.conftest import ScriptedProposer


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
    report, the export and the calibration read (see tests/agent/phases/test_attribution_phase.py)."""
    from recipelab.proposer import Observation, Proposal, Proposer
    from recipelab.runner import FakeExecutor

    settings = CampaignSettings(name="attributed", preset="tiny", corpus=corpus, precision="fp32",
                                window=WindowSettings(iterations=4),
                                # no width rung: the fake's best rate does not move with size,
                                # so one size up the law's lower rate loses and the campaign
                                # would keep the baseline (tests/agent/phases/test_width_phase.py)
                                ladder=LadderSettings(promote=1, stress_steps=30,
                                                      stress_checkpoint_every=10, rung_size=0,
                                                      width_rung=False),
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


EDITS: list[dict[str, Any]] = [
    {"shape.activation": "gelu"},  # breaks the target's shape: rejected, never trained
    {"optimizer.lr": 0.03},
    {"optimizer.lr": 0.003},
    {"schedule.kind": "linear", "optimizer.weight_decay": 0.0},
    # a quarter of the batch (four times the steps for the same tokens) at twice the rate: a
    # gain the top rung can tell from noise (about 0.1 val_bpb at both seeds), and a rate the
    # export carries (it sets the batch by its own law)
    {"batch_size": 2, "optimizer.lr": 0.02},
]


@pytest.fixture(scope="session")
def finished_campaign(tmp_path_factory: pytest.TempPathFactory, corpus: CorpusSpec) -> Path:
    """Two baseline seeds and five scripted edits (one rejected), seed re-runs of close
    finalists, then the top two and one mid-ranked trial (``fidelity=1``) stress-run; not
    attributed (``attributed_campaign`` is, for tests/report/test_why.py), and no width rung
    (its prediction is Kaplan's; tests/agent/phases/test_width_phase.py has the measured one)."""
    directory = tmp_path_factory.mktemp("campaigns") / "nightly"
    directory.mkdir()
    settings = CampaignSettings(name="nightly", preset="tiny", corpus=corpus, precision="fp32",
                                window=WindowSettings(iterations=6, trial_timeout_s=120),
                                ladder=LadderSettings(promote=2, fidelity=1, stress_steps=24,
                                                      top_seeds=2, close_call_seeds=0,
                                                      stress_log_every=4, stress_checkpoint_every=8,
                                                      rung_size=0, attribution=False,
                                                      width_rung=False),
                                search=SearchSettings(noise_seeds=2), executor=ExecutorSettings(parallel=1))
    save(settings, directory)
    Campaign(settings, directory, proposer=ScriptedProposer(settings.baseline(), EDITS)).run()
    return directory
