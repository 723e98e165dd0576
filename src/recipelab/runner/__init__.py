"""Where and on what a trial runs: the :class:`Executor` base and its implementations.

- :class:`LocalExecutor`: subprocesses of this machine, with a warm worker;
- :class:`~recipelab.runner.ray.RayExecutor`: Ray tasks on a cluster (imported on demand,
  Ray being an optional extra);
- :class:`FakeExecutor`: in memory, for tests of scheduling.

Local and Ray trials follow one launch protocol (:mod:`recipelab.runner.launch`) and one
file-system contract (:mod:`recipelab.runner.files`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from recipelab.runner.base import Executor, TrialHandle, failed, timed_out
from recipelab.runner.fake import FakeExecutor
from recipelab.runner.local import LocalExecutor

ExecutorKind = Literal["local", "ray"]


def _local(ray_address: str | None, parallel: int) -> Executor:
    return LocalExecutor(parallel=parallel)


def _ray(ray_address: str | None, parallel: int) -> Executor:
    from recipelab.runner.ray import RayExecutor  # Ray is an optional extra

    return RayExecutor(address=ray_address)


EXECUTORS: dict[str, Callable[[str | None, int], Executor]] = {"local": _local, "ray": _ray}
"""``--executor`` names and how each builds its executor: the one place a new one is added."""

__all__ = ["EXECUTORS", "Executor", "ExecutorKind", "FakeExecutor", "LocalExecutor",
           "TrialHandle", "build_executor", "failed", "timed_out"]


def build_executor(kind: ExecutorKind, *, ray_address: str | None = None,
                   parallel: int = 1) -> Executor:
    """The executor a campaign's ``--executor`` names, for ``parallel`` trials in flight
    (on one machine, they share its GPU; a Ray task has a GPU of its own)."""
    return EXECUTORS[kind](ray_address, parallel)
