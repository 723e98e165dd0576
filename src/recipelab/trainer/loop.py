"""One trial, start to finish: build, train, evaluate, and always hand back a result.

Every way a trial can end becomes a :class:`TrialResult`: ``complete``, or ``failed`` with a
reason (``oom``, ``nan``, ``diverged``, ``crash``). A timeout is the launcher's to declare,
since a hung process cannot report it. The hot loop keeps host work to the minimum: losses
and gradient norms stay on the device and are read back once per logging interval.
"""

from __future__ import annotations

import contextlib
import math
import time
import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, TextIO

import torch
from torch import nn

from recipelab.errors import RecipelabError
from recipelab.fsutil import is_disk_full
from recipelab.trainer import checkpoint
from recipelab.trainer.batches import sample_batch
from recipelab.trainer.core import build_model, build_optimizer
from recipelab.trainer.data import DataError, Dataset, load_dataset
from recipelab.trainer.device import (
    UnsupportedPrecision,
    autocast,
    check_precision,
    configure_device,
    configure_threads,
    is_out_of_memory,
    maybe_compile,
    peak_memory_bytes,
    provenance,
    reset_peak_memory,
    resolve_device,
    synchronize,
    to_device,
)
from recipelab.trainer.evaluate import bits_per_byte
from recipelab.trainer.model import GPT
from recipelab.trainer.spec import (
    CurvePoint,
    EvalBlocks,
    FailureReason,
    TrialResult,
    TrialSpec,
)
from recipelab.trainer.step_loop import Interval, Step, Stepper, run_steps
from recipelab.trainer.telemetry import DeviceSampler

TIMED_WARMUP_STEPS = 5


class TrialFailure(RecipelabError):
    """Ends a trial early with a failure reason (raised inside the training loop)."""

    def __init__(self, reason: FailureReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Progress:
    """What the loop has produced so far, kept for the result whatever happens."""

    curve: list[CurvePoint] = field(default_factory=list)
    losses: list[float | None] = field(default_factory=list)  # every step's, not only logged
    steps_done: int = 0
    resumed_from: int | None = None
    timed_steps: int = 0
    timed_s: float = 0.0


def _timed_warmup(steps: int, requested: int | None = None) -> int:
    """Steps excluded from throughput: the first few pay for allocator and kernel warm-up.
    ``requested`` (the spec's ``timed_warmup_steps``) overrides the default, keeping one
    timed step."""
    if requested is not None:
        return min(requested, steps - 1)
    return min(TIMED_WARMUP_STEPS, steps // 5)


def _check_loss(loss: float, step: int, limit: float) -> None:
    if not math.isfinite(loss):
        raise TrialFailure("nan", f"loss became {loss} at step {step}")
    if loss > limit:
        raise TrialFailure("diverged", f"loss {loss:.3f} at step {step} exceeds {limit:.3f}")


class TrialRunner:
    """Holds the state of one trial so that a failure can still report what was done."""

    def __init__(self, spec: TrialSpec, resume: bool, log: TextIO) -> None:
        self.spec, self.recipe, self.resume, self.log = spec, spec.recipe, resume, log
        self.progress = Progress()

    def say(self, message: str) -> None:
        """Log a line; a log that can no longer be written (a full disk) keeps what it has."""
        with contextlib.suppress(OSError):
            print(message, file=self.log, flush=True)

    def save(self, model: nn.Module, optimizer: torch.optim.Optimizer, step: int,
              interval: Interval) -> None:
        extra = {"curve": [p.model_dump() for p in self.progress.curve],
                 "losses": self.progress.losses, "interval": interval.state()}
        checkpoint.save(self.spec.checkpoint_path, step, model, optimizer, extra)

    def _restore(self, model: nn.Module, optimizer: torch.optim.Optimizer,
                 interval: Interval) -> int:
        if not self.resume:
            return 0
        state = checkpoint.load(self.spec.checkpoint_path, model, optimizer)
        if state is None:
            return 0
        self.progress.curve = [CurvePoint.model_validate(p) for p in state.extra["curve"]]
        self.progress.losses = list(state.extra.get("losses", []))
        interval.load(state.extra["interval"])
        self.progress.resumed_from = self.progress.steps_done = state.step
        self.say(f"resumed from checkpoint at step {state.step}")
        return state.step

    def train(self, model: GPT, data: Dataset, device: torch.device,
              context: Callable[[], AbstractContextManager[Any]]) -> float:
        """Run the optimizer steps; returns the mean train loss of the last interval."""
        recipe, spec = self.recipe, self.spec
        optimizer = build_optimizer(model, recipe, device)
        interval = Interval.zeros(device)
        start = self._restore(model, optimizer, interval)

        def batch(index: int) -> tuple[torch.Tensor, torch.Tensor]:
            x, y = sample_batch(data.train, recipe.batch_size, recipe.seq_len, recipe.seed, index)
            return to_device(x, device), to_device(y, device)

        stepper = Stepper(maybe_compile(model, spec.compile), optimizer,
                          [p for p in model.parameters() if p.requires_grad], recipe, batch,
                          context)
        hooks = TrialHooks(self, model, optimizer, interval)
        timed_from = max(start, _timed_warmup(recipe.steps, spec.timed_warmup_steps))
        run_steps(stepper, interval, device, start=start, end=recipe.steps,
                  timed_from=timed_from, hooks=hooks)
        synchronize(device)
        if recipe.steps > timed_from:
            self.progress.timed_steps = recipe.steps - timed_from
            self.progress.timed_s = time.perf_counter() - hooks.clock
        return hooks.last_loss

    def run(self) -> TrialResult:
        recipe, spec = self.recipe, self.spec
        begin = time.perf_counter()
        configure_threads(spec.threads)
        torch.manual_seed(recipe.seed)
        device = resolve_device(spec.device)
        configure_device(device)
        reset_peak_memory(device)
        check_precision(recipe.precision, device)
        data = load_dataset(spec.corpus, tokenizer=recipe.tokenizer,
                            vocab_size=recipe.shape.vocab_size, eval_bytes=recipe.eval_bytes,
                            min_train_tokens=recipe.batch_size * recipe.seq_len + 1)
        model = build_model(recipe, device)
        context = autocast(recipe.precision, device)
        self.say(f"trial {spec.trial_id}: {model.param_count():,} parameters on {device}, "
                  f"{data.description}")
        trained = time.perf_counter()
        train_loss = self.train(model, data, device, context)
        evaluated = time.perf_counter()
        score = bits_per_byte(model, data.eval_tokens, data.tokenizer.token_bytes,
                              recipe.seq_len, recipe.batch_size, device, context)
        done = time.perf_counter()
        if not math.isfinite(score.bpb):
            raise TrialFailure("nan", f"val_bpb is {score.bpb}")
        self.say(f"val_bpb {score.bpb:.4f} over {score.bytes:,} bytes")
        progress = self.progress
        tokens_per_s = (progress.timed_steps * recipe.tokens_per_step / progress.timed_s
                        if progress.timed_s > 0 else None)
        return TrialResult(
            trial_id=spec.trial_id, status="complete", val_bpb=score.bpb, train_loss=train_loss,
            val_bpb_stderr=score.stderr,
            eval_blocks=EvalBlocks(nats=list(score.block_nats), bytes=list(score.block_bytes),
                                   whole_text=data.eval_whole),
            steps_done=progress.steps_done, curve=progress.curve,
            losses=progress.losses, tokens_per_s=tokens_per_s,
            step_ms=(1000 * progress.timed_s / progress.timed_steps
                     if progress.timed_steps else None),
            peak_memory_bytes=peak_memory_bytes(device), params=model.param_count(),
            setup_s=trained - begin, train_s=evaluated - trained, eval_s=done - evaluated,
            resumed_from_step=progress.resumed_from,
            provenance=provenance(device, recipe.seed), timed_steps=progress.timed_steps or None,
        )

    def failure(self, reason: FailureReason, message: str) -> TrialResult:
        self.say(f"trial failed ({reason}): {message}")
        return TrialResult(
            trial_id=self.spec.trial_id, status="failed", reason=reason,
            message=message, steps_done=self.progress.steps_done, curve=self.progress.curve,
            losses=self.progress.losses,
            resumed_from_step=self.progress.resumed_from,
        )


class TrialHooks:
    """What a trial does after each step: a curve point every ``log_every`` steps (logged,
    and checked for divergence), a checkpoint every ``checkpoint_every``."""

    def __init__(self, runner: TrialRunner, model: nn.Module, optimizer: torch.optim.Optimizer,
                 interval: Interval) -> None:
        self.runner, self.model, self.optimizer, self.interval = runner, model, optimizer, interval
        recipe = runner.recipe
        self.limit = runner.spec.divergence_factor * math.log(recipe.shape.vocab_size)
        curve = runner.progress.curve
        self.last_loss = curve[-1].loss if curve else math.nan
        self.clock = time.perf_counter()

    def timing_starts(self, step: int) -> None:
        self.clock = time.perf_counter()

    def after(self, step: Step) -> bool:
        runner, progress, interval = self.runner, self.runner.progress, self.interval
        spec, steps = runner.spec, runner.recipe.steps
        progress.steps_done = step.done
        if step.done % spec.log_every == 0 or step.done == steps:
            self.last_loss = interval.loss_sum.item() / interval.steps
            point = CurvePoint(step=step.done, loss=self.last_loss,
                               grad_norm=interval.grad_max.item(), lr=step.lr)
            progress.curve.append(point)
            runner.say(point.log_line())
            progress.losses += interval.step_losses()
            _check_loss(self.last_loss, step.done, self.limit)
            interval.reset()
        if spec.checkpoint_every and step.done % spec.checkpoint_every == 0:
            runner.save(self.model, self.optimizer, step.done, interval)
        return False


def run_trial(spec: TrialSpec, *, resume: bool = False, log: TextIO) -> TrialResult:
    """Run ``spec`` and return its result, with the device telemetry sampled meanwhile;
    never raises for a failure of the trial itself."""
    with DeviceSampler(spec.telemetry_interval_s, gpu=spec.device != "cpu") as sampler:
        result = _run_trial(spec, resume, log)
    return result.model_copy(update={"telemetry": sampler.summary()})


def _run_trial(spec: TrialSpec, resume: bool, log: TextIO) -> TrialResult:
    runner = TrialRunner(spec, resume, log)
    try:
        return runner.run()
    except TrialFailure as failure:
        return runner.failure(failure.reason, str(failure))
    except (DataError, UnsupportedPrecision) as error:
        return runner.failure("crash", str(error))
    except OSError as error:
        if not is_disk_full(error):
            raise
        return runner.failure("disk_full", f"no space to write the trial's files: {error}")
    except (RuntimeError, MemoryError) as error:
        if is_out_of_memory(error):
            return runner.failure("oom", f"out of memory: {error}".splitlines()[0])
        traceback.print_exc(file=log)
        return runner.failure("crash", f"{type(error).__name__}: {error}".splitlines()[0])
