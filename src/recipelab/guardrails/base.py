"""The vocabulary every guardrail check speaks: device, measurements, context and verdict.

A check is a plain callable ``(recipe, ctx) -> reasons``. Everything a check may consult
about the campaign travels in one frozen :class:`GuardContext`, so checks stay pure
functions that are trivial to test and to register by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from recipelab.recipe import Recipe
from recipelab.targets import Target
from recipelab.units import GIB

if TYPE_CHECKING:
    from recipelab.guardrails.memory_fit import MemoryModel


@dataclass(frozen=True)
class DeviceInfo:
    """What the guardrails need to know about the device trials run on."""

    kind: Literal["cpu", "cuda"]
    name: str
    memory_bytes: int  # total device memory; on CPU and on unified-memory GPUs (GB10) the RAM
    compute_capability: tuple[int, int] | None  # CUDA only
    has_transformer_engine: bool
    native_bf16: bool  # CPU: avx512_bf16 / amx_bf16 (or aarch64 bf16); CUDA: capability >= 8.0


@dataclass(frozen=True)
class Measurement:
    """A completed trial on this device: the evidence that calibrates memory and time models.

    ``recipe`` is optional because time calibration needs only the throughput figures, but
    memory calibration has to re-predict the measured trial's peak from its full recipe;
    measurements without one are skipped by :func:`~recipelab.guardrails.memory.calibration_factor`.
    """

    params: int
    tokens_per_step: int
    flops_per_token: int
    tokens_per_s: float
    peak_memory_bytes: int
    wall_s: float
    steps: int
    recipe: Recipe | None = None


@dataclass(frozen=True)
class GuardContext:
    """Everything about the campaign a check may consult."""

    target: Target
    baseline: Recipe  # the campaign's unedited proxy recipe
    device: DeviceInfo
    param_budget: int  # max parameters a candidate may have
    searchable: frozenset[str] = frozenset()  # dotted shape knobs allowed to leave the target's
    seen: frozenset[str] = frozenset()  # Recipe.fingerprint() of candidates run or queued
    memory_reserve_bytes: int = 0  # kept free for an LLM server sharing the device
    # trials the campaign keeps in flight at once on this device: each gets its share of
    # the memory left after the reserve (a Ray task has a device of its own: 1)
    parallel_on_one_device: int = 1
    timeout_s: float | None = None  # per-trial timeout
    measurements: tuple[Measurement, ...] = ()
    # The fitted memory lines (guardrails.memory_fit), read by the caller; None: the analytic
    # memory model only, and ``memory_model_problem`` says why when the file was unusable.
    memory_model: MemoryModel | None = None
    memory_model_problem: str | None = None


@dataclass(frozen=True)
class Verdict:
    """The outcome of judging one candidate.

    ``recipe`` is the validated candidate whenever the schema passed (also on a rejection by
    a later check, so the agent can record what was rejected) and None when it did not.
    """

    accepted: bool
    recipe: Recipe | None
    reasons: tuple[str, ...]  # empty when accepted
    checks: tuple[str, ...]  # names of the checks that rejected


Check = Callable[[Recipe, GuardContext], list[str]]
"""A guardrail: the reasons to reject ``recipe`` in ``ctx``; an empty list means pass."""


def gib(n_bytes: float) -> str:
    """``n_bytes`` as a human-readable GiB figure for reasons, e.g. ``"3.25 GiB"``."""
    return f"{n_bytes / GIB:.2f} GiB"
