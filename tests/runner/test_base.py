"""The Executor base (:mod:`recipelab.runner.base`): an executor implements submit, poll and
cancel and nothing else it lacks (its device, its slots, prestart and close have defaults);
``wait`` polls until the one result comes back; a failing or timed-out trial is a result
that says why."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from recipelab.runner.base import Executor, TrialHandle, failed, timed_out
from recipelab.targets import proxy_recipe
from recipelab.trainer.spec import TrialResult, TrialSpec


def spec_in(tmp_path: Path, trial_id: str = "p0001") -> TrialSpec:
    """A spec for the tiny proxy; nothing here runs it, so its folder need not exist."""
    return TrialSpec(trial_id=trial_id, recipe=proxy_recipe("tiny"), out_dir=str(tmp_path / trial_id))


class CountingExecutor(Executor):
    """The smallest real executor: a trial's result comes back on its ``polls_needed``-th poll,
    and every poll is counted."""

    name = "counting"

    def __init__(self, polls_needed: int) -> None:
        self.polls_needed = polls_needed
        self.polls = 0

    def submit(self, spec: TrialSpec, *, resume: bool = False,
               timeout_s: float | None = None) -> TrialHandle:
        now = time.monotonic()
        return TrialHandle(spec, now, None if timeout_s is None else now + timeout_s)

    def poll(self, handle: TrialHandle) -> TrialResult | None:
        self.polls += 1
        if self.polls < self.polls_needed:
            return None
        return TrialResult(trial_id=handle.trial_id, status="complete", val_bpb=2.5)

    def cancel(self, handle: TrialHandle) -> None:
        self.polls_needed = 0


def test_wait_polls_until_the_trial_ends_and_returns_its_one_result(tmp_path: Path) -> None:
    executor = CountingExecutor(polls_needed=3)
    result = executor.wait(executor.submit(spec_in(tmp_path)), interval_s=0.001)
    assert (result.trial_id, result.status, result.val_bpb) == ("p0001", "complete", 2.5)
    assert executor.polls == 3


def test_a_handle_names_the_trial_of_its_spec(tmp_path: Path) -> None:
    handle = TrialHandle(spec_in(tmp_path, "s0004"), submitted_at=10.0, deadline=None)
    assert handle.trial_id == "s0004"


def test_an_executor_without_its_own_device_or_slots_leaves_both_to_this_machine() -> None:
    """None from ``device``: the guardrails judge this machine's device as ``--device``
    resolves here; None from ``slots``: ``--parallel auto`` decides how many run at once."""
    executor = CountingExecutor(polls_needed=1)
    assert executor.device("cpu") is None and executor.device("cuda") is None
    assert executor.slots() is None
    executor.prestart()  # the hooks an executor without warm workers need not write
    executor.close()


@pytest.mark.parametrize("missing", ["submit", "poll", "cancel"])
def test_an_executor_must_submit_poll_and_cancel(missing: str) -> None:
    members = {name: getattr(CountingExecutor, name) for name in ("submit", "poll", "cancel")
               if name != missing}
    partial = type("Partial", (Executor,), members)
    with pytest.raises(TypeError, match=missing):
        partial()


def test_a_failed_trial_is_a_result_naming_the_trial_its_reason_and_message(tmp_path: Path) -> None:
    result = failed(spec_in(tmp_path), "oom", "CUDA out of memory")
    assert (result.trial_id, result.status, result.reason, result.message) == (
        "p0001", "failed", "oom", "CUDA out of memory")
    assert result.val_bpb is None


def test_a_timed_out_trial_says_its_limit_and_how_it_was_stopped(tmp_path: Path) -> None:
    result = timed_out(spec_in(tmp_path), 600.0)
    assert (result.status, result.reason) == ("failed", "timeout")
    assert result.message == "the trial ran past its 600 s timeout and was killed"
    lost = timed_out(spec_in(tmp_path), 1.5, "its Ray task was cancelled")
    assert lost.message == "the trial ran past its 1.5 s timeout and its Ray task was cancelled"


def test_a_sub_second_timeout_does_not_read_as_zero_seconds(tmp_path: Path) -> None:
    assert "its 0.05 s timeout" in str(timed_out(spec_in(tmp_path), 0.05).message)
    assert "its 0.123 s timeout" in str(timed_out(spec_in(tmp_path), 0.1234).message)
    assert "its 10,000 s timeout" in str(timed_out(spec_in(tmp_path), 1e4).message), "no 1e+04"
