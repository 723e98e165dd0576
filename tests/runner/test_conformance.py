"""Every executor passes the conformance suite (``conformance.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from recipelab.runner import Executor, FakeExecutor, LocalExecutor
from recipelab.targets import proxy_recipe
from recipelab.trainer.spec import CorpusSpec, TrialSpec

from .conformance import CHECKS, Harness

FAKE_STEP_S = 1e-3  # the fake's trials take this long per step


def has_checkpoint(spec: TrialSpec) -> bool:
    return (spec.checkpoint_path / "latest").exists()


def fake_progressed() -> Callable[[TrialSpec], bool]:
    """The fake writes no checkpoint files; 50 ms is ten of its checkpoints."""
    started = time.monotonic()
    return lambda spec: time.monotonic() - started > 0.05


def make_executor(name: str) -> tuple[Executor, Callable[[TrialSpec], bool]]:
    if name == "fake":
        return FakeExecutor(duration=lambda spec: spec.recipe.steps * FAKE_STEP_S), fake_progressed()
    if name == "local":
        return LocalExecutor(), has_checkpoint
    from recipelab.runner.ray import RayExecutor

    # ray-shared finds the campaign directory; ray-scratch acts as a node that cannot see it
    return RayExecutor(shared_files=None if name == "ray-shared" else False), has_checkpoint


@pytest.fixture(params=["fake", "local", "ray-shared", "ray-scratch"])
def harness(request: pytest.FixtureRequest, tmp_path: Path, corpus: CorpusSpec) -> Iterator[Harness]:
    if request.param.startswith("ray"):
        request.getfixturevalue("ray_cluster")

    def spec(trial_id: str, **edits: object) -> TrialSpec:
        recipe = proxy_recipe("tiny").apply({"steps": 10, **edits})
        return TrialSpec(trial_id=trial_id, recipe=recipe, corpus=corpus,
                         out_dir=str(tmp_path / trial_id))

    executor, progressed = make_executor(request.param)
    yield Harness(executor, spec, progressed)
    executor.close()


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__.removeprefix("check_"))
def test_every_executor_conforms(harness: Harness, check: Callable[[Harness], None]) -> None:
    check(harness)
