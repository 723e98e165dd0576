"""The executor conformance suite: what every :class:`~recipelab.runner.Executor` must do.

A campaign relies on these and nothing more, so an executor that passes them can run a
campaign. ``test_conformance.py`` runs them on every executor recipelab ships: the local
subprocesses, Ray tasks (in place and in scratch), and the in-memory fake the scheduling
tests use. Each check takes a :class:`Harness`: the executor, and how to make and watch
its trials.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from recipelab.runner import Executor
from recipelab.trainer.spec import TrialResult, TrialSpec

LONG_STEPS = 100_000  # a trial that outlasts any check unless it is stopped
WAIT_S = 180.0


@dataclass
class Harness:
    executor: Executor
    spec: Callable[..., TrialSpec]  # (trial_id, **recipe edits) -> a spec in a fresh out_dir
    progressed: Callable[[TrialSpec], bool]  # the trial has written a checkpoint


def check_a_trial_comes_back_as_one_result_naming_it(h: Harness) -> None:
    spec = h.spec("c1")
    result = h.executor.wait(h.executor.submit(spec, timeout_s=WAIT_S))
    assert (result.status, result.trial_id) == ("complete", "c1"), result.message
    assert result.val_bpb is not None
    assert (Path(spec.out_dir) / "spec.json").exists() and spec.result_path.exists()


def check_a_stale_result_is_not_taken_for_this_attempts(h: Harness) -> None:
    spec = h.spec("c2", steps=LONG_STEPS)
    Path(spec.out_dir).mkdir(parents=True)
    stale = TrialResult(trial_id="c2", status="complete", val_bpb=123.0)
    spec.result_path.write_text(stale.model_dump_json())
    handle = h.executor.submit(spec, timeout_s=WAIT_S)
    assert h.executor.poll(handle) is None, "an earlier attempt's result came back"
    h.executor.cancel(handle)
    assert h.executor.wait(handle).val_bpb != 123.0


def check_a_trial_past_its_timeout_fails_as_timeout_saying_the_limit(h: Harness) -> None:
    spec = h.spec("c3", steps=LONG_STEPS)
    result = h.executor.wait(h.executor.submit(spec, timeout_s=1.5))
    assert (result.status, result.reason) == ("failed", "timeout"), result.message
    assert result.message is not None and "1.5 s" in result.message


def check_a_cancelled_trial_ends_as_failed(h: Harness) -> None:
    handle = h.executor.submit(h.spec("c4", steps=LONG_STEPS), timeout_s=WAIT_S)
    h.executor.cancel(handle)
    assert h.executor.wait(handle).status == "failed"


def check_a_stress_run_resumes_from_its_last_checkpoint(h: Harness) -> None:
    spec = h.spec("c5", steps=LONG_STEPS).model_copy(
        update={"kind": "stress", "checkpoint_every": 5})
    handle = h.executor.submit(spec, timeout_s=WAIT_S)
    deadline = time.monotonic() + WAIT_S
    while not h.progressed(spec):
        assert h.executor.poll(handle) is None and time.monotonic() < deadline
        time.sleep(0.05)
    h.executor.cancel(handle)
    h.executor.wait(handle)

    again = spec.model_copy(update={"recipe": spec.recipe.apply({"steps": 40})})
    result = h.executor.wait(h.executor.submit(again, resume=True, timeout_s=WAIT_S))

    assert result.status == "complete", result.message
    assert result.resumed_from_step is not None and result.resumed_from_step >= 5


def check_the_device_is_none_or_what_was_asked(h: Harness) -> None:
    device = h.executor.device("cpu")
    assert device is None or device.kind == "cpu"


CHECKS = [check_a_trial_comes_back_as_one_result_naming_it,
          check_a_stale_result_is_not_taken_for_this_attempts,
          check_a_trial_past_its_timeout_fails_as_timeout_saying_the_limit,
          check_a_cancelled_trial_ends_as_failed,
          check_a_stress_run_resumes_from_its_last_checkpoint,
          check_the_device_is_none_or_what_was_asked]
