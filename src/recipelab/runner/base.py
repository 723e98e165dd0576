"""The Executor: where and on what a trial runs, behind three calls and three hooks.

A campaign ``submit``\\ s a :class:`~recipelab.trainer.spec.TrialSpec`, ``poll``\\ s its handle until
one :class:`~recipelab.trainer.spec.TrialResult` comes back, and may ``cancel`` it. A failing
trial is a result, never an exception. The hooks have no-op defaults, so an executor
implements only what it has:

- ``device(requested)``: the device its trials will run on, which the guardrails judge
  (None: this machine's, as ``--device`` resolves here);
- ``prestart()``: get the next trial's process ready while the current one trains;
- ``close()``: release workers, connections, clusters.

Every executor passes the conformance suite in ``tests/runner/conformance.py``.
"""

from __future__ import annotations

import abc
import time
from dataclasses import dataclass

from recipelab.guardrails.base import DeviceInfo
from recipelab.trainer.spec import FailureReason, TrialResult, TrialSpec


@dataclass
class TrialHandle:
    """A submitted trial. ``deadline`` is a ``time.monotonic()`` instant, or None."""

    spec: TrialSpec
    submitted_at: float
    deadline: float | None

    @property
    def trial_id(self) -> str:
        return self.spec.trial_id


class Executor(abc.ABC):
    """Where trials run. Implementations never raise for a failing trial: it is a result."""

    name = "executor"

    @abc.abstractmethod
    def submit(self, spec: TrialSpec, *, resume: bool = False,
               timeout_s: float | None = None) -> TrialHandle:
        """Start ``spec``; ``resume`` continues from its checkpoint when there is one."""

    @abc.abstractmethod
    def poll(self, handle: TrialHandle) -> TrialResult | None:
        """The trial's result once it has ended, else None. Enforces the timeout."""

    @abc.abstractmethod
    def cancel(self, handle: TrialHandle) -> None:
        """Stop the trial now; a later ``poll`` returns a failed result."""

    def device(self, requested: str) -> DeviceInfo | None:
        """The device trials asked to run on ``requested`` get, when it is not this machine's
        (None: resolve ``requested`` here)."""
        return None

    def slots(self) -> int | None:
        """How many trials this executor runs at once by its own resources (a cluster's), or
        None when that is the machine's business (``--parallel auto`` decides it)."""
        return None

    def prestart(self) -> None:  # noqa: B027 - optional hook, a no-op unless overridden
        """Make the next submission start faster (called while a trial trains)."""

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op unless overridden
        """Release whatever the executor holds (warm workers, connections)."""

    def wait(self, handle: TrialHandle, interval_s: float = 0.02) -> TrialResult:
        """Poll until the trial ends."""
        while True:
            result = self.poll(handle)
            if result is not None:
                return result
            time.sleep(interval_s)


def failed(spec: TrialSpec, reason: FailureReason, message: str) -> TrialResult:
    return TrialResult(trial_id=spec.trial_id, status="failed", reason=reason, message=message)


def timed_out(spec: TrialSpec, limit_s: float, how: str = "was killed") -> TrialResult:
    """The result of a trial stopped at its timeout (``limit_s`` in whole seconds, to 3
    figures below 10, so a sub-second limit does not read as "0 s" nor 1,800 as "1.8e+03")."""
    limit = f"{limit_s:,.0f}" if limit_s >= 10 else f"{limit_s:.3g}"
    return failed(spec, "timeout", f"the trial ran past its {limit} s timeout and {how}")
