"""The long run's process group, and the rule every collective it makes obeys.

NCCL runs collectives on CUDA tensors only (a CPU tensor raises, so an 8-GPU run would die at
its first stop decision); gloo, the CPU backend, takes CPU tensors. A gloo test on a CPU
cannot see the NCCL rule, so it is written here: every collective goes through
:class:`Collectives`, which makes its tensors on the backend's device and refuses a tensor on
any other device, under every backend, before the library is called.

Every rank takes part in every collective in the same order, so the decisions that end a
run (budget, preemption, divergence) are agreed by one all-reduce per step, not decided on
one rank and broadcast from a branch the others may not reach.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import NoReturn

import torch
import torch.distributed as dist

from recipelab.errors import RecipelabError

__all__ = [
    "BACKEND_DEVICE",
    "CollectiveOnWrongDevice",
    "Collectives",
    "World",
    "check_collective_tensor",
    "exit_rank",
    "process_group",
    "world_from_env",
]

BACKEND_DEVICE = {"nccl": "cuda", "gloo": "cpu"}
"""The device type each backend's collectives take (NCCL: CUDA only; gloo: CPU here)."""

INIT_TIMEOUT = timedelta(minutes=30)
"""Collectives' timeout: long enough for a slow evaluation or checkpoint write on rank 0."""


class CollectiveOnWrongDevice(RecipelabError, RuntimeError):
    """A collective was given a tensor its backend cannot communicate."""


def check_collective_tensor(tensor: torch.Tensor, backend: str) -> None:
    """Raise unless ``tensor`` lives on the device type ``backend`` communicates."""
    wanted = BACKEND_DEVICE.get(backend)
    if wanted is not None and tensor.device.type != wanted:
        raise CollectiveOnWrongDevice(
            f"a {backend} collective was given a tensor on {tensor.device}: {backend} "
            f"communicates {wanted} tensors only; make it with Collectives.tensor()")


@dataclass(frozen=True)
class World:
    """This process's place in a ``torchrun`` launch (rank 0 of 1 for a plain process)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def world_from_env() -> World:
    """The world ``torchrun`` describes in the environment."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    return World(rank=int(os.environ.get("RANK", "0")), size=size,
                 local_rank=int(os.environ.get("LOCAL_RANK", "0")),
                 local_size=int(os.environ.get("LOCAL_WORLD_SIZE", str(size))))


@dataclass(frozen=True)
class Collectives:
    """The collectives of one world, each checked against its backend's device rule.

    With one process every method is the identity, so a 1-process run makes no call into
    ``torch.distributed`` at all.
    """

    world: World
    backend: str | None  # None: a single process
    device: torch.device  # where this world's collective tensors live

    def tensor(self, values: list[float] | list[int], dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype, device=self.device)

    def _checked(self, tensor: torch.Tensor) -> bool:
        if self.backend is None or self.world.size == 1:
            return False
        check_collective_tensor(tensor, self.backend)
        return True

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` summed over the ranks, in place."""
        if self._checked(tensor):
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def mean(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` averaged over the ranks, in place."""
        if self._checked(tensor):
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
            tensor /= self.world.size
        return tensor

    def agree(self, code: int) -> int:
        """The largest of every rank's ``code``: a stop any rank asks for, the most severe
        one when several do."""
        if self.backend is None or self.world.size == 1:
            return code
        flag = self.tensor([code], torch.int64)
        check_collective_tensor(flag, self.backend)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return int(flag.item())

    def barrier(self) -> None:
        if self.backend is not None and self.world.size > 1:
            dist.barrier()


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


@contextmanager
def process_group(world: World, device: torch.device) -> Iterator[Collectives]:
    """The process group of a ``torchrun`` launch, torn down however the run ends."""
    if world.size == 1:
        yield Collectives(world, None, device)
        return
    backend = backend_for(device)
    dist.init_process_group(backend, timeout=INIT_TIMEOUT)
    try:
        yield Collectives(world, backend, device if backend == "nccl" else torch.device("cpu"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def exit_rank(code: int) -> NoReturn:
    """End this rank of a multi-process launch with ``code``, without Python's finalizer.

    Gloo's worker threads free a finished collective's work, and the tensors it holds, after
    the collective has returned; freeing a tensor takes the GIL. ``destroy_process_group``
    does not stop those threads (gloo has no shutdown), and a finalizing interpreter hands
    out no GIL: a late free then aborts the rank (SIGABRT, "terminate called without an
    active exception") and torchrun fails a run that had completed. By the time a rank
    leaves, everything it writes is closed, so the streams are flushed and it exits here.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
