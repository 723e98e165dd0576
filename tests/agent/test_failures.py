"""The failure streak: a run of proxy trials failing for one reason stops the night once,
with a hint that names the fix; anything else breaks the run."""

from __future__ import annotations

from typing import Any

from recipelab.agent.failures import FailureStreak
from recipelab.agent.setup.settings import WindowSettings
from recipelab.trajectory.record import TrialRecord


class Log:
    def __init__(self) -> None:
        self.errors: list[dict[str, Any]] = []

    def error(self, event: str, **fields: Any) -> None:
        self.errors.append({"event": event, **fields})


def record(trial_id: str, status: str = "failed", reason: str | None = "oom",
           kind: str = "proxy") -> TrialRecord:
    return TrialRecord(campaign="c", trial_id=trial_id, kind=kind, status=status, reason=reason)


def streak(limit: int = 3) -> tuple[FailureStreak, Log]:
    log = Log()
    return FailureStreak(WindowSettings(max_consecutive_failures=limit), "tiny", log), log


def test_the_limit_of_one_reason_in_a_row_stops_the_night_once_with_its_hint() -> None:
    failures, log = streak()
    for n in range(5):
        failures.note(record(f"p{n}"))
    assert failures.failing == "oom"
    (stopped,) = log.errors  # said once, not per trial after the limit
    assert stopped["event"] == "too_many_failures" and stopped["trials"] == ["p0", "p1", "p2"]
    assert "out of memory" in stopped["hint"]


def test_a_success_or_another_reason_starts_the_count_again() -> None:
    failures, log = streak()
    for trial in (record("p0"), record("p1"), record("p2", status="complete", reason=None),
                  record("p3"), record("p4", reason="timeout"), record("p5")):
        failures.note(trial)
    assert failures.failing is None and log.errors == []


def test_only_trained_proxy_trials_count() -> None:
    failures, _ = streak(limit=2)
    failures.note(record("p0", status="rejected"))
    failures.note(record("s0", kind="stress"))
    failures.note(record("p1"))
    assert failures.failing is None
