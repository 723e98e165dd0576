"""The report, rewritten while the campaign runs, so a person can open it at 2 a.m.

After a trial ends, at most once every :data:`LIVE_REPORT_EVERY_S`, the whole report is
rebuilt from the records so far with a first section that says what is training, when the
night ends and the console's last lines, and the page reloads itself. Every file is
replaced atomically (:func:`recipelab.report.render.write_document`), so a browser never
reads half a page. The report is a by-product: one that cannot be written is logged once
and never stops the campaign.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from recipelab.agent.trials import TRIALS_DIR
from recipelab.agent.watch.console_lines import ReadableLines
from recipelab.eventlog import EVENTS_FILE, read_events
from recipelab.report import ReportContext, write_report
from recipelab.report.context import LiveStatus, RunningCurve
from recipelab.trainer.spec import LOG_FILE, CurvePoint
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.record import TrialRecord

LIVE_REPORT_EVERY_S = 30.0
LAST_LINES = 8


def last_console_lines(events_file: Path, count: int = LAST_LINES) -> tuple[str, ...]:
    """The last ``count`` lines the readable console printed, rebuilt from the event log."""
    if not events_file.exists():
        return ()
    lines: deque[str] = deque(maxlen=count)
    readable = ReadableLines()
    for event in read_events(events_file):
        line = readable.line(event)
        if line is not None:
            lines.extend(line.splitlines())
    return tuple(lines)


def running_curves(directory: Path, records: Sequence[TrialRecord]) -> tuple[RunningCurve, ...]:
    """The loss curve each trial in flight has written to its ``trial.log`` so far (a trial
    that trains elsewhere, on a Ray worker without the campaign's disk, has none yet)."""
    curves = []
    for record in records:
        log = directory / TRIALS_DIR / record.trial_id / LOG_FILE
        if record.status != "running" or not log.exists():
            continue
        points = CurvePoint.from_log(log.read_text(errors="replace"))
        if points:
            curves.append(RunningCurve(record.trial_id, tuple(p.step for p in points),
                                       tuple(p.loss for p in points)))
    return tuple(curves)


class LiveReport:
    """Rewrites ``report/`` in ``directory`` as trials end, throttled."""

    def __init__(self, directory: Path, context: ReportContext, log: Any,
                 running: Callable[[], str | None], ends: Callable[[], str],
                 every_s: float | None = None) -> None:
        self.directory = directory
        self.context = context
        self.log = log
        self.running = running
        self.ends = ends
        self.every_s = LIVE_REPORT_EVERY_S if every_s is None else every_s
        self._last = -float("inf")
        self._failed = False

    def trial_ended(self, ledger: Ledger) -> None:
        """Rewrite the report of the campaign's ``ledger`` when the last rewrite is
        ``every_s`` old."""
        now = time.monotonic()
        if now - self._last < self.every_s or self._failed:
            return
        self._last = now
        live = LiveStatus(updated=datetime.now(timezone.utc).strftime("%H:%M:%S UTC"),
                          running=self.running() or "", ends=self.ends(),
                          last_lines=last_console_lines(self.directory / EVENTS_FILE),
                          curves=running_curves(self.directory, ledger.records))
        try:
            write_report(self.directory, ledger, replace(self.context, live=live))
        except Exception as error:  # the report must never stop the night
            self._failed = True
            self.log.warning("live_report_failed", error=f"{type(error).__name__}: {error}",
                             fix="the report is written again at the end; 'recipelab report' "
                                 "writes it on demand")

