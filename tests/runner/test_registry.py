"""Executors are built from their registry, whose names are exactly what ``--executor``
accepts."""

from __future__ import annotations

from typing import get_args

from recipelab import environment
from recipelab.agent.setup.settings import ExecutorSettings
from recipelab.runner import EXECUTORS, LocalExecutor, build_executor


def test_the_registry_holds_every_executor_the_settings_accept() -> None:
    assert set(EXECUTORS) == set(get_args(ExecutorSettings.model_fields["kind"].annotation))


def test_local_is_built_from_the_registry_with_its_gpu_sharers() -> None:
    executor = build_executor("local", parallel=3)
    assert isinstance(executor, LocalExecutor)
    assert executor.env == {environment.PARALLEL_ON_DEVICE: "3"}
