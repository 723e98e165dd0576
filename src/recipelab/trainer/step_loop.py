"""The one step loop: every optimizer step of a trial and of a long run is taken here.

:func:`run_steps` sets the step's learning rate, takes the core step
(:func:`~recipelab.trainer.core.train_step`) and adds its loss and gradient norm to the
:class:`Interval`, on the device, so the hot loop never waits for the host. What a step
leads to is the caller's: a trial logs a curve point and checks for divergence, a long run
also evaluates, watches its budget and agrees on a stop across ranks. Both say it through
:class:`StepHooks`, so the two cannot drift apart in the arithmetic of a step
(``tests/longrun/test_same_core.py`` holds them to the same per-step losses).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from recipelab.recipe import Recipe
from recipelab.trainer.core import set_learning_rate, train_step
from recipelab.trainer.device import synchronize


@dataclass
class Interval:
    """Loss and grad-norm accumulated since the last curve point, kept on the device. Saved
    in checkpoints, so a resume between two curve points still reports the uninterrupted
    curve."""

    loss_sum: torch.Tensor
    grad_max: torch.Tensor
    steps: int = 0
    losses: list[torch.Tensor] = field(default_factory=list)  # each step's, on the device

    @classmethod
    def zeros(cls, device: torch.device) -> Interval:
        return cls(torch.zeros((), device=device), torch.zeros((), device=device))

    def add(self, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        """One step's loss and gradient norm, without waiting for the device."""
        self.loss_sum += loss
        self.losses.append(loss)
        torch.maximum(self.grad_max, grad_norm, out=self.grad_max)
        self.steps += 1

    def state(self) -> dict[str, Any]:
        return {"loss_sum": self.loss_sum.item(), "grad_max": self.grad_max.item(),
                "steps": self.steps, "losses": self.step_losses()}

    def load(self, state: dict[str, Any]) -> None:
        self.loss_sum.fill_(state["loss_sum"])
        self.grad_max.fill_(state["grad_max"])
        self.steps = int(state["steps"])
        self.losses = [torch.tensor(math.nan if v is None else v, device=self.loss_sum.device)
                       for v in state.get("losses", [])]

    def step_losses(self) -> list[float | None]:
        """The interval's per-step losses read back in one transfer; None where not finite."""
        if not self.losses:
            return []
        return [v if math.isfinite(v) else None for v in torch.stack(self.losses).tolist()]

    def reset(self) -> None:
        self.loss_sum.zero_()
        self.grad_max.zero_()
        self.steps = 0
        self.losses = []


@dataclass(frozen=True)
class Step:
    """One optimizer step just taken: how many are done with it, its mean loss and gradient
    norm (on the device) and the learning rate it took."""

    done: int
    loss: torch.Tensor
    grad_norm: torch.Tensor
    lr: float


class StepHooks(Protocol):
    """What a caller does around the steps."""

    def timing_starts(self, step: int) -> None:
        """The device is synchronized and step ``step`` is the first timed one: the steps
        before paid for allocator and kernel warm-up."""

    def after(self, step: Step) -> bool:
        """Log, evaluate, checkpoint; True to stop after ``step``."""


@dataclass
class Stepper:
    """The pieces every step needs: the (compiled, maybe DDP-wrapped) forward, the optimizer
    and its parameters, the recipe, the batch of a micro-step index and the autocast context;
    ``no_sync`` is DDP's, to skip the all-reduce of all but the last micro-batch."""

    forward: nn.Module
    optimizer: torch.optim.Optimizer
    params: list[nn.Parameter]
    recipe: Recipe
    batch: Callable[[int], tuple[torch.Tensor, torch.Tensor]]
    context: Callable[[], AbstractContextManager[Any]]
    no_sync: Callable[[], AbstractContextManager[Any]] | None = None


def run_steps(stepper: Stepper, interval: Interval, device: torch.device, *, start: int,
              end: int, timed_from: int, hooks: StepHooks) -> int:
    """Take the steps ``start`` … ``end - 1``, or until ``hooks.after`` asks to stop; returns
    how many are done."""
    done = start
    for step in range(start, end):
        if step == timed_from:
            synchronize(device)
            hooks.timing_starts(step)
        lr = set_learning_rate(stepper.optimizer, stepper.recipe, step)
        loss, grad_norm = train_step(stepper.forward, stepper.optimizer, stepper.params,
                                     stepper.recipe, step, stepper.batch, stepper.context,
                                     stepper.no_sync)
        interval.add(loss, grad_norm)
        done = step + 1
        if hooks.after(Step(done, loss, grad_norm, lr)):
            break
    return done
