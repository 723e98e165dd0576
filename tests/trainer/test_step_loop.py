"""Specification of :mod:`recipelab.trainer.step_loop`: the one loop of optimizer steps that
trials and the long run share, and the :class:`~recipelab.trainer.step_loop.Interval` that
gathers their losses on the device between two curve points."""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import dataclass, field

import pytest
import torch

from recipelab.targets import proxy_recipe
from recipelab.trainer.core import build_model, build_optimizer, set_learning_rate, train_step
from recipelab.trainer.step_loop import Interval, Step, Stepper, run_steps

CPU = torch.device("cpu")
RECIPE = proxy_recipe("tiny").apply({"batch_size": 2, "seq_len": 16, "steps": 6})


@dataclass
class Recorder:
    """Hooks that write down what the loop told them, in order, and ask to stop after step
    ``stop_after`` (when given)."""

    stop_after: int | None = None
    events: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)

    def timing_starts(self, step: int) -> None:
        self.events.append(f"timing from {step}")

    def after(self, step: Step) -> bool:
        self.events.append(f"after {step.done}")
        self.steps.append(step)
        return step.done == self.stop_after


@dataclass
class Run:
    """One call of :func:`run_steps` on a fresh tiny model: what it returned, what the hooks
    heard, the batches it read and the interval it filled."""

    done: int
    hooks: Recorder
    batches: list[int]
    interval: Interval


def batch(index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens of micro-batch ``index``, the same for the same index (as a trial's are)."""
    tokens = torch.randint(0, RECIPE.shape.vocab_size, (RECIPE.batch_size, RECIPE.seq_len + 1),
                           generator=torch.Generator().manual_seed(index))
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def stepper(read: list[int]) -> Stepper:
    """The tiny model from seed 0 with its optimizer; the batch indices it reads go to ``read``."""
    torch.manual_seed(0)
    model = build_model(RECIPE, CPU)

    def recorded(index: int) -> tuple[torch.Tensor, torch.Tensor]:
        read.append(index)
        return batch(index)

    return Stepper(model, build_optimizer(model, RECIPE, CPU), list(model.parameters()), RECIPE,
                   recorded, contextlib.nullcontext)


def run(start: int = 0, end: int = RECIPE.steps, timed_from: int = 0,
        stop_after: int | None = None) -> Run:
    read: list[int] = []
    hooks, interval = Recorder(stop_after), Interval.zeros(CPU)
    done = run_steps(stepper(read), interval, CPU, start=start, end=end, timed_from=timed_from,
                     hooks=hooks)
    return Run(done, hooks, read, interval)


# --- run_steps ------------------------------------------------------------------------------


def test_the_steps_from_start_to_end_are_taken_in_order_and_their_count_returned() -> None:
    done = run(timed_from=99)
    assert done.done == RECIPE.steps
    assert done.hooks.events == [f"after {n}" for n in range(1, RECIPE.steps + 1)]
    assert done.batches == list(range(RECIPE.steps))
    assert done.interval.steps == RECIPE.steps


def test_the_loop_takes_exactly_the_core_steps_at_the_scheduled_rates() -> None:
    """Each step is the core's: its rate set from the schedule first, then one train_step, so a
    trial and a long run cannot drift apart in a step's arithmetic."""
    done = run()
    model_steps = stepper([])
    by_hand = []
    for step in range(RECIPE.steps):
        set_learning_rate(model_steps.optimizer, RECIPE, step)
        loss, grad_norm = train_step(model_steps.forward, model_steps.optimizer,
                                     model_steps.params, RECIPE, step, batch,
                                     contextlib.nullcontext)
        by_hand.append((loss.item(), grad_norm.item()))
    assert [(s.loss.item(), s.grad_norm.item()) for s in done.hooks.steps] == by_hand
    assert [s.lr for s in done.hooks.steps] == [
        RECIPE.optimizer.lr * RECIPE.schedule.lr_multiplier(step, RECIPE.steps)
        for step in range(RECIPE.steps)]


def test_a_resumed_loop_starts_at_its_start_steps_batches_and_rate() -> None:
    done = run(start=3, timed_from=3)
    assert done.done == RECIPE.steps
    assert [s.done for s in done.hooks.steps] == [4, 5, 6]
    assert done.batches == [3, 4, 5]
    assert done.hooks.steps[0].lr == RECIPE.optimizer.lr * RECIPE.schedule.lr_multiplier(
        3, RECIPE.steps)


def test_the_step_after_which_the_hooks_ask_to_stop_is_the_last_one_taken() -> None:
    done = run(stop_after=2)
    assert done.done == 2
    assert done.hooks.events == ["timing from 0", "after 1", "after 2"]
    assert done.batches == [0, 1] and done.interval.steps == 2


def test_timing_starts_once_just_before_the_first_timed_step_and_never_if_it_is_not_taken(
) -> None:
    assert run(timed_from=2, stop_after=4).hooks.events == [
        "after 1", "after 2", "timing from 2", "after 3", "after 4"]
    assert "timing from 3" not in run(timed_from=3, stop_after=2).hooks.events
    assert not any(e.startswith("timing") for e in run(timed_from=RECIPE.steps).hooks.events)


def test_the_interval_gathers_each_steps_loss_and_the_largest_gradient_norm() -> None:
    done = run()
    losses = [s.loss.item() for s in done.hooks.steps]
    assert done.interval.step_losses() == losses
    assert done.interval.loss_sum.item() == pytest.approx(sum(losses), rel=1e-6)
    assert done.interval.grad_max.item() == max(s.grad_norm.item() for s in done.hooks.steps)


# --- Interval -------------------------------------------------------------------------------


def filled() -> Interval:
    """An interval of three steps, the second of which had a NaN loss."""
    interval = Interval.zeros(CPU)
    for loss, grad_norm in ((3.0, 0.5), (math.nan, 2.0), (2.0, 1.0)):
        interval.add(torch.tensor(loss), torch.tensor(grad_norm))
    return interval


def test_a_new_interval_and_a_reset_one_hold_nothing() -> None:
    interval = filled()
    interval.reset()
    for empty in (Interval.zeros(CPU), interval):
        assert (empty.steps, empty.loss_sum.item(), empty.grad_max.item()) == (0, 0.0, 0.0)
        assert empty.step_losses() == []


def test_adding_a_step_never_waits_for_the_device() -> None:
    """Tensors on the ``meta`` device have no values: any read of one to the host would raise."""
    meta = torch.device("meta")
    interval = Interval.zeros(meta)
    interval.add(torch.empty((), device=meta), torch.empty((), device=meta))
    assert interval.steps == 1 and interval.loss_sum.device == meta


def test_a_non_finite_step_loss_reads_back_as_none_which_json_can_carry() -> None:
    assert filled().step_losses() == [3.0, None, 2.0]


def test_an_interval_saved_in_a_checkpoint_loads_back_as_it_was() -> None:
    """A resume between two curve points still reports the uninterrupted curve."""
    state = json.loads(json.dumps(filled().state()))  # a checkpoint's extra state is JSON
    loaded = Interval.zeros(CPU)
    loaded.load(state)
    assert loaded.steps == 3 and loaded.step_losses() == [3.0, None, 2.0]
    assert math.isnan(loaded.loss_sum.item()) and loaded.grad_max.item() == 2.0
    older = {k: v for k, v in state.items() if k != "losses"}  # before per-step losses
    loaded.load(older)
    assert loaded.steps == 3 and loaded.step_losses() == []
