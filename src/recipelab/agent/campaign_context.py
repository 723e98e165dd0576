"""What every phase of an open campaign works with, built in one place.

A campaign opens once per ``run``: :func:`open_context` reconciles its store, starts its event
log and its trial book, and fixes the window's deadline. The phases (search, ladder,
attribution) each take the :class:`CampaignContext` and read everything they decide from its
:class:`~recipelab.trajectory.ledger.Ledger`; none reaches into another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console

from recipelab.agent.deadline import Deadline
from recipelab.agent.failures import FailureStreak
from recipelab.agent.guard_context import guard_context
from recipelab.agent.records import as_measurement
from recipelab.agent.setup.settings import CampaignSettings
from recipelab.agent.signals import StopRequests
from recipelab.agent.trials import GuardrailMemory, TrialBook, trial_folder
from recipelab.agent.watch.console_lines import console_output
from recipelab.eventlog import LogFormat, campaign_logger
from recipelab.guardrails import CHECKS, DeviceInfo, GuardContext
from recipelab.recipe import Recipe
from recipelab.runner import Executor
from recipelab.runner.files import read_node
from recipelab.trajectory import TrajectoryStore
from recipelab.trajectory.ledger import Ledger

POLL_INTERVAL_S = 0.02
"""How long a phase waits between two polls of the trials in flight."""


@dataclass
class CampaignContext:
    """An open campaign: its settings and baseline, where trials run, and the services that
    start, record and stop them. ``close`` ends the event log (the store is the campaign's)."""

    settings: CampaignSettings
    directory: Path
    baseline: Recipe
    device: DeviceInfo
    memory: GuardrailMemory
    stops: StopRequests
    store: TrajectoryStore
    log: Any  # a structlog BoundLogger bound to the campaign
    book: TrialBook
    deadline: Deadline
    failures: FailureStreak
    close: Callable[[], None]

    @property
    def ledger(self) -> Ledger:
        return self.book.ledger

    @property
    def parallel(self) -> int:
        """How many trials may run at once."""
        return self.settings.executor.resolved_parallel

    @property
    def checks(self) -> list[str]:
        """The guardrails a candidate must pass: all but those ``--skip-check`` names."""
        return [c for c in CHECKS if c not in self.settings.search.skip_checks]

    def guard_context(self, exclude: str | None = None) -> GuardContext:
        """What the guardrails judge a candidate against now: the memory model, the
        fingerprints proposed so far (but ``exclude``, a retried trial's own), the proxies'
        measured throughput."""
        ledger = self.ledger
        return guard_context(
            self.settings, self.baseline, self.device,
            memory=(self.memory.model, self.memory.problem),
            seen=ledger.proposed_fingerprints() - {exclude},
            measurements=(m for r in ledger.proxies if (m := as_measurement(r)) is not None))


def open_context(settings: CampaignSettings, directory: Path, *, baseline: Recipe,
                 device: DeviceInfo, executor: Executor, memory: GuardrailMemory,
                 stops: StopRequests, console: Console, log_format: LogFormat,
                 on_change: Callable[[], None],
                 on_record: Callable[..., None]) -> CampaignContext:
    """Open the campaign in ``directory``: its store reconciled (what a crash left is logged),
    its event log, its trial book and the window's deadline from now."""
    executor.prestart()  # e.g. import torch in the first worker while we set up
    store = TrajectoryStore(directory, settings.name, db_url=settings.store.db)
    log, sink = campaign_logger(settings.name, directory, console,
                                console_output(log_format, colors=console.is_terminal))
    book = TrialBook(settings, directory, store, executor, device, memory, log,
                     on_change=on_change, on_record=on_record)
    report = store.reconcile(node_of=lambda record: read_node(directory / trial_folder(record)))
    for line in report.set_aside:
        log.warning("jsonl_line_set_aside", line=line, side_file=str(report.side_file))
    if report.rebuilt:
        log.warning("sqlite_rebuilt", reason="missing or corrupt; rebuilt from JSONL")
    for record in report.interrupted:
        log.warning("trial_interrupted", trial_id=record.trial_id, kind=record.kind)
    deadline = Deadline(settings, settings.window.deadline(datetime.now(timezone.utc)),
                        baseline.steps, log)
    return CampaignContext(settings, directory, baseline, device, memory, stops, store, log, book,
                           deadline, FailureStreak(settings.window, settings.preset, log), close=sink.close)


class Phase(Protocol):
    """One step of a campaign's walk (search, ladder, attribution, width rung).

    The contract every phase keeps (tests/agent/test_campaign_context.py checks each):

    - It decides everything from the records in ``ctx.ledger``, never from state of its own
      kept across runs. So after a crash it redoes only what is missing, and on a campaign
      whose records already hold its work it trains nothing and writes nothing.
    - It launches nothing once ``ctx.stops.stop`` is set, and waits for what it launched.
    - It reaches into no other phase: what one leaves for the next is records.
    """

    def run(self, ctx: CampaignContext) -> None: ...
