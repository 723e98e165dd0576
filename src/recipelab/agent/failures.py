"""A run of failed trials: when the same failure keeps coming back, stop and say what to do.

A recipe space where every trial fails alike (every one out of memory, every one past its
timeout, a corpus the trainer cannot read) would otherwise spend the whole night repeating
it. After ``max_consecutive_failures`` proxy trials in a row fail for the same reason, the
campaign stops launching and logs ``too_many_failures`` with a fix for that reason.
"""

from __future__ import annotations

from typing import Any

from recipelab.agent.setup.settings import WindowSettings
from recipelab.agent.trials import trial_folder
from recipelab.trajectory.record import TrialRecord


def failure_hint(reason: str, *, timeout_s: float, log: str, preset: str) -> str:
    """What to do when every recent trial fails with the same ``reason``."""
    diverging = ("lower the learning rates (optimizer.lr) or raise the warmup; check the "
                 f"baseline trains with 'recipelab train --preset {preset}'")
    hints = {
        "oom": "the trials run out of memory: lower batch_size or seq_len (or the preset's "
               "--budget), lower --memory-reserve-gib, or free memory on the device",
        "timeout": f"the trials run past --trial-timeout (now {timeout_s:g} s): raise it, or use "
                   "a smaller --preset",
        "disk_full": "the disk is full: free space where the campaign directory and the corpus "
                     "cache live, then run the same command again",
        "nan": f"the losses become NaN: {diverging}",
        "diverged": f"the losses diverge: {diverging}",
    }
    return hints.get(reason, f"the trainer crashes: read {log} for the traceback")


class FailureStreak:
    """The latest trained proxy trials, while they all failed for the same reason."""

    def __init__(self, window: WindowSettings, preset: str, log: Any) -> None:
        """``window`` says how many failures in a row stop the night; ``preset`` is named in
        the hint for a trial too large for it."""
        self.window = window
        self.preset = preset
        self.log = log
        self.run: list[TrialRecord] = []
        self.failing: str | None = None  # set once the streak reached its limit

    def note(self, record: TrialRecord) -> None:
        if record.kind != "proxy" or not record.trained:
            return
        if record.status == "complete":
            self.run = []
            return
        if self.run and self.run[-1].reason != record.reason:
            self.run = []
        self.run.append(record)
        limit = self.window.max_consecutive_failures
        if len(self.run) >= limit and self.failing is None:
            self.failing = record.reason or "crash"
            log = f"{trial_folder(record)}/trial.log"
            hint = failure_hint(self.failing, timeout_s=self.window.trial_timeout_s, log=log,
                                preset=self.preset)
            self.log.error("too_many_failures", trial_id=record.trial_id, count=limit,
                           reason=self.failing, message=record.message, hint=hint,
                           trials=[r.trial_id for r in self.run[-limit:]])
