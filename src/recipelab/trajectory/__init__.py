"""The campaign's memory: trial records, and the JSONL + SQLite store that keeps them."""

from recipelab.trajectory.record import (
    TERMINAL_STATUSES,
    Status,
    TrialRecord,
    TrialRow,
    utc_now,
)
from recipelab.trajectory.store import ReconcileReport, StoreError, TrajectoryStore

__all__ = [
    "TERMINAL_STATUSES",
    "ReconcileReport",
    "Status",
    "StoreError",
    "TrajectoryStore",
    "TrialRecord",
    "TrialRow",
    "utc_now",
]
