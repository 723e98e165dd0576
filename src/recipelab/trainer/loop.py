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
from recipelab.trainer.core import build_model, build_optimizer, set_learning_rate, train_step
from recipelab.trainer.data import DataError, Dataset, load_dataset, sample_batch
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
from recipelab.trainer.spec import CurvePoint, FailureReason, TrialResult, TrialSpec
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


@dataclass
class Interval:
    """Loss and grad-norm accumulated since the last curve point, kept on the device so the
    hot loop never waits for the host. Checkpointed, so a resume between two curve points
    still reports the uninterrupted curve."""

    loss_sum: torch.Tensor
    grad_max: torch.Tensor
    steps: int = 0
    losses: list[torch.Tensor] = field(default_factory=list)  # each step's, on the device

    @classmethod
    def zeros(cls, device: torch.device) -> Interval:
        return cls(torch.zeros((), device=device), torch.zeros((), device=device))

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

    def _say(self, message: str) -> None:
        """Log a line; a log that can no longer be written (a full disk) keeps what it has."""
        with contextlib.suppress(OSError):
            print(message, file=self.log, flush=True)

    def _save(self, model: nn.Module, optimizer: torch.optim.Optimizer, step: int,
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
        self._say(f"resumed from checkpoint at step {state.step}")
        return state.step

    def train(self, model: GPT, data: Dataset, device: torch.device,
              context: Callable[[], AbstractContextManager[Any]]) -> float:
        """Run the optimizer steps; returns the mean train loss of the last interval."""
        recipe, spec, progress = self.recipe, self.spec, self.progress
        optimizer = build_optimizer(model, recipe, device)
        forward = maybe_compile(model, spec.compile)
        interval = Interval.zeros(device)
        start = self._restore(model, optimizer, interval)
        params = [p for p in model.parameters() if p.requires_grad]
        limit = spec.divergence_factor * math.log(recipe.shape.vocab_size)
        timed_from = max(start, _timed_warmup(recipe.steps, spec.timed_warmup_steps))
        last_loss = progress.curve[-1].loss if progress.curve else math.nan

        def batch(index: int) -> tuple[torch.Tensor, torch.Tensor]:
            x, y = sample_batch(data.train, recipe.batch_size, recipe.seq_len, recipe.seed, index)
            return to_device(x, device), to_device(y, device)

        clock = time.perf_counter()
        for step in range(start, recipe.steps):
            if step == timed_from:
                synchronize(device)
                clock = time.perf_counter()
            lr = set_learning_rate(optimizer, recipe, step)
            step_loss, grad_norm = train_step(forward, optimizer, params, recipe, step, batch,
                                              context)
            interval.loss_sum += step_loss
            interval.losses.append(step_loss)
            torch.maximum(interval.grad_max, grad_norm, out=interval.grad_max)
            interval.steps += 1
            progress.steps_done = step + 1
            if progress.steps_done % spec.log_every == 0 or progress.steps_done == recipe.steps:
                last_loss = interval.loss_sum.item() / interval.steps
                point = CurvePoint(step=progress.steps_done, loss=last_loss,
                                   grad_norm=interval.grad_max.item(), lr=lr)
                progress.curve.append(point)
                self._say(point.log_line())
                progress.losses += interval.step_losses()
                _check_loss(last_loss, progress.steps_done, limit)
                interval.reset()
            if spec.checkpoint_every and progress.steps_done % spec.checkpoint_every == 0:
                self._save(model, optimizer, progress.steps_done, interval)
        synchronize(device)
        if recipe.steps > timed_from:
            progress.timed_steps = recipe.steps - timed_from
            progress.timed_s = time.perf_counter() - clock
        return last_loss

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
        self._say(f"trial {spec.trial_id}: {model.param_count():,} parameters on {device}, "
                  f"{data.description}")
        trained = time.perf_counter()
        train_loss = self.train(model, data, device, context)
        evaluated = time.perf_counter()
        score = bits_per_byte(model, data.eval_tokens, data.tokenizer.token_bytes,
                              recipe.seq_len, recipe.batch_size, device, context)
        done = time.perf_counter()
        if not math.isfinite(score.bpb):
            raise TrialFailure("nan", f"val_bpb is {score.bpb}")
        self._say(f"val_bpb {score.bpb:.4f} over {score.bytes:,} bytes")
        progress = self.progress
        tokens_per_s = (progress.timed_steps * recipe.tokens_per_step / progress.timed_s
                        if progress.timed_s > 0 else None)
        return TrialResult(
            trial_id=spec.trial_id, status="complete", val_bpb=score.bpb, train_loss=train_loss,
            val_bpb_stderr=score.stderr, steps_done=progress.steps_done, curve=progress.curve,
            losses=progress.losses, tokens_per_s=tokens_per_s,
            step_ms=(1000 * progress.timed_s / progress.timed_steps
                     if progress.timed_steps else None),
            peak_memory_bytes=peak_memory_bytes(device), params=model.param_count(),
            setup_s=trained - begin, train_s=evaluated - trained, eval_s=done - evaluated,
            resumed_from_step=progress.resumed_from,
            provenance=provenance(device, recipe.seed), timed_steps=progress.timed_steps or None,
        )

    def failure(self, reason: FailureReason, message: str) -> TrialResult:
        self._say(f"trial failed ({reason}): {message}")
        return TrialResult(
            trial_id=self.spec.trial_id, status="failed", reason=reason,
            message=message, steps_done=self.progress.steps_done, curve=self.progress.curve,
            losses=self.progress.losses,
            resumed_from_step=self.progress.resumed_from,
        )


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
