"""An in-memory executor for tests of scheduling: trials that take a set time and produce a
result computed from their recipe, without a process or torch.

A campaign's decisions (what to launch, when to stop, what to promote, what to re-run after
a loss) depend only on when results come back and what they say. :class:`FakeExecutor`
controls both, so a test of kills, windows, retries or promotion runs in milliseconds and
the real subprocess is left to the tests of what only a real trainer shows. It keeps the
file contract of the real executors (``spec.json`` in, ``result.json`` out, stale results
removed) and the checkpoint contract of stress runs: a trial lost or cancelled mid-run
resumes from its last whole ``checkpoint_every`` step.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Collection
from dataclasses import dataclass

from recipelab.fsutil import atomic_write_text
from recipelab.guardrails.base import DeviceInfo
from recipelab.recipe import Recipe
from recipelab.runner import launch
from recipelab.runner.base import Executor, TrialHandle, failed, timed_out
from recipelab.trainer.spec import CurvePoint, TrialResult, TrialSpec
from recipelab.units import GIB

Outcome = Callable[[TrialSpec], TrialResult]
Duration = Callable[[TrialSpec], float]

CPU = DeviceInfo("cpu", "fake CPU", 16 * GIB, None, False, native_bf16=False)


def synthetic_val_bpb(recipe: Recipe, recipe_noise: float = 0.0) -> float:
    """A smooth, deterministic val_bpb: best at a learning rate of 3e-3 and a warmup of 6,
    plus a seed-dependent wobble of up to ±0.01, so searches have something to find and
    seeds something to disagree about. Every other knob (``optimizer.eps`` among them) has no
    effect at all, which is what a planted neutral edit needs.

    The wobble alone is shared by every recipe at one seed, so paired differences would be
    exact. ``recipe_noise`` adds, as a real trainer has, a part of the seed's effect that a
    recipe does *not* share with the others: up to ±``recipe_noise``, from the recipe
    (without its seed and steps) and the seed together, so a paired interval has a width."""
    lr_miss = math.log10(recipe.optimizer.lr / 3e-3) ** 2
    warmup_miss = ((recipe.schedule.warmup_steps - 6) / 20) ** 2
    wobble = (zlib.crc32(str(recipe.seed).encode()) % 2001 - 1000) / 100_000
    own = 0.0
    if recipe_noise:
        key = recipe.model_copy(update={"seed": 0, "steps": 1}).fingerprint() + str(recipe.seed)
        own = recipe_noise * (zlib.crc32(key.encode()) % 2001 - 1000) / 1000
    return round(2.0 + 0.5 * lr_miss + 0.1 * warmup_miss + wobble + own, 6)


def synthetic_outcome(spec: TrialSpec, start_step: int = 0, seconds: float = 0.0,
                      recipe_noise: float = 0.0) -> TrialResult:
    """A complete trial with a loss curve falling to its :func:`synthetic_val_bpb`, which
    took ``seconds``: a fifth of them to set up, the rest training."""
    recipe = spec.recipe
    final = synthetic_val_bpb(recipe, recipe_noise)
    every = max(1, spec.log_every)
    curve = [CurvePoint(step=s, loss=final * math.log(2) * (1 + 2 / math.sqrt(s + 1)),
                        grad_norm=1.0, lr=recipe.optimizer.lr)
             for s in range(every - 1, recipe.steps, every)]
    return TrialResult(
        trial_id=spec.trial_id, status="complete", val_bpb=final,
        train_loss=curve[-1].loss if curve else None, steps_done=recipe.steps, curve=curve,
        tokens_per_s=1e5, step_ms=1.0, peak_memory_bytes=recipe.param_count() * 16,
        params=recipe.param_count(), setup_s=0.2 * seconds, train_s=0.8 * seconds, eval_s=0.0,
        resumed_from_step=start_step or None)


@dataclass
class FakeHandle(TrialHandle):
    duration_s: float = 0.0
    start_step: int = 0
    lost: bool = False
    cancelled: bool = False


class FakeExecutor(Executor):
    """Trials that end ``duration(spec)`` seconds after submission with ``outcome(spec)``.

    The trials named in ``lose_midway`` come back ``interrupted`` half-way through their first
    attempt, as when a Ray worker dies. ``submitted`` lists every spec in submission order.
    Without an ``outcome``, results are :func:`synthetic_outcome`'s, with ``recipe_noise``.
    """

    name = "fake"

    def __init__(self, outcome: Outcome | None = None, *, duration: Duration | None = None,
                 device: DeviceInfo | None = None, lose_midway: Collection[str] = (),
                 recipe_noise: float = 0.0) -> None:
        self.outcome = outcome
        self.recipe_noise = recipe_noise
        self.lose_midway = set(lose_midway)
        self.duration = duration or (lambda spec: 0.0)
        self._device = device
        self.submitted: list[TrialSpec] = []
        self._progress: dict[str, int] = {}  # out_dir → steps a lost stress run checkpointed

    def device(self, requested: str) -> DeviceInfo | None:
        return self._device

    def submit(self, spec: TrialSpec, *, resume: bool = False,
               timeout_s: float | None = None) -> FakeHandle:
        launch.prepare(spec)
        self.submitted.append(spec)
        now = time.monotonic()
        start = min(self._progress.get(spec.out_dir, 0), spec.recipe.steps) if resume else 0
        left = 1.0 - start / max(1, spec.recipe.steps)
        handle = FakeHandle(spec=spec, submitted_at=now,
                            deadline=now + timeout_s if timeout_s else None,
                            duration_s=self.duration(spec) * left, start_step=start)
        return handle

    def poll(self, handle: TrialHandle) -> TrialResult | None:
        assert isinstance(handle, FakeHandle), "poll() on a handle this executor did not submit"
        spec, now = handle.spec, time.monotonic()
        if spec.trial_id in self.lose_midway and now - handle.submitted_at >= handle.duration_s / 2:
            self.lose_midway.discard(spec.trial_id)
            handle.lost = True
        if handle.lost or handle.cancelled:
            self._keep_progress(handle, now)
            result = (failed(spec, "crash", "cancelled") if handle.cancelled else TrialResult(
                trial_id=spec.trial_id, status="interrupted", message="lost its fake worker"))
        elif now - handle.submitted_at >= handle.duration_s:
            result = (self.outcome(spec) if self.outcome
                      else synthetic_outcome(spec, handle.start_step, handle.duration_s,
                                             self.recipe_noise))
        elif handle.deadline is not None and now > handle.deadline:
            result = timed_out(spec, handle.deadline - handle.submitted_at)
        else:
            return None
        atomic_write_text(spec.result_path, result.model_dump_json(indent=2))
        return result

    def cancel(self, handle: TrialHandle) -> None:
        assert isinstance(handle, FakeHandle)
        handle.cancelled = True

    def _keep_progress(self, handle: FakeHandle, now: float) -> None:
        """What a lost stress run's checkpoints kept: its last whole ``checkpoint_every``."""
        every = handle.spec.checkpoint_every
        if not every or handle.duration_s <= 0:
            return
        fraction = min(1.0, (now - handle.submitted_at) / handle.duration_s)
        done = handle.start_step + fraction * (handle.spec.recipe.steps - handle.start_step)
        self._progress[handle.spec.out_dir] = int(done) // every * every
