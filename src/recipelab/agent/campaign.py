"""The campaign: open it, walk its phases, report.

:class:`Campaign` builds what a night needs before it starts (the executor, the search space,
the priors, the proposer), then :meth:`Campaign.run` opens the campaign once
(:func:`~recipelab.agent.campaign_context.open_context`: the store, the event log, the trial
 book, the deadline) and walks its phases over that context, each reading everything it
 decides from the records:

1. :class:`~recipelab.agent.phases.search_phase.SearchPhase`: proxy trials until the budget is spent;
2. :class:`~recipelab.agent.phases.ladder_phase.LadderPhase`: seed re-runs settle close finalists,
   then successive halving climbs to the top rung, where the winner is named;
3. :class:`~recipelab.agent.phases.attribution_phase.AttributionPhase`: which parts of the winner's
   edit carry its gain.

A stop signal, or a run of identical failures, ends the walk. The campaign is the only writer
of the trajectory, and its state lives in the store, never only in memory, so that
``recipelab run`` after any crash (or a kill -9) picks up where it stopped: trials left
running become ``interrupted`` and run once more, longer runs continue from their
checkpoints, and a completed trial is never run or recorded twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from recipelab.agent.campaign_context import CampaignContext, Phase, open_context
from recipelab.agent.campaign_lock import CampaignLock
from recipelab.agent.campaign_tracking import CampaignTracking
from recipelab.agent.phases.attribution_phase import AttributionPhase
from recipelab.agent.phases.ladder_phase import LadderPhase
from recipelab.agent.phases.proxy_trials import ProxyTrials
from recipelab.agent.phases.search_phase import SearchPhase, history
from recipelab.agent.phases.width_phase import WidthPhase
from recipelab.agent.setup.machine import Resolved, resolve
from recipelab.agent.setup.priors import load_priors, log_priors
from recipelab.agent.setup.proposer_choice import GuardedProposer, build_proposer
from recipelab.agent.setup.settings import CampaignSettings
from recipelab.agent.signals import StopRequests
from recipelab.agent.trials import GuardrailMemory
from recipelab.agent.watch.display import CampaignProgress
from recipelab.agent.watch.live_report import LiveReport
from recipelab.eventlog import LogFormat
from recipelab.guardrails import DeviceInfo
from recipelab.guardrails.hardware import supported_precisions
from recipelab.guardrails.memory_fit import MemoryModel
from recipelab.proposer import Proposer, default_space
from recipelab.report import CloudRates, ReportContext, write_report
from recipelab.runner import Executor, build_executor
from recipelab.trajectory.attribution import recommendation_line, result_of
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.noise import NoiseFloor
from recipelab.trajectory.record import TrialRecord
from recipelab.trajectory.verdict import Winner


@dataclass(frozen=True)
class CampaignSummary:
    proxy_trials: int
    rejected: int
    stress_runs: int
    best: TrialRecord | None
    stopped_early: bool
    noise: NoiseFloor | None = None  # measured from the baseline's seeds
    winner: Winner | None = None  # named by the highest-fidelity evidence (see Ledger)
    failing: str | None = None  # the reason a run of failed trials stopped the campaign
    rung_runs: int = 0
    winner_line: str = ""  # Ledger.winner_line: the campaign's verdict on the console
    recommendation_line: str = ""  # the attribution's recommendation, printed after it


class Campaign:
    """One campaign in its directory (see the module): built before the night, run by
    :meth:`run`, resumed by building it again."""

    def __init__(self, settings: CampaignSettings | Resolved, directory: Path, *,
                 executor: Executor | None = None, proposer: Proposer | None = None,
                 device: DeviceInfo | None = None, console: Console | None = None,
                 log_format: LogFormat = "events") -> None:
        """``settings`` as :func:`~recipelab.agent.setup.machine.resolve` left them (``recipelab
        run`` resolves them before its preflight), or raw settings, resolved here for
        ``executor`` (``device``: the one trials run on, when the caller knows it)."""
        if isinstance(settings, Resolved):
            resolved = settings
        else:
            if executor is None and settings.executor.kind == "ray":
                executor = build_executor("ray", ray_address=settings.executor.ray_address)
            resolved = resolve(settings, executor, device=device)
        executor = executor or resolved.executor
        self.settings, self.device, self.auto_notes = (resolved.settings, resolved.device,
                                                       resolved.notes)
        self.directory = directory
        self.baseline = self.settings.baseline()
        self.target = self.settings.target_spec()
        self.executor = executor or build_executor(
            self.settings.executor.kind, ray_address=self.settings.executor.ray_address,
            parallel=self.settings.executor.resolved_parallel)
        self.space = default_space(self.baseline, self.settings.searchable, precisions=supported_precisions(
            self.baseline, self.target, self.device))
        self.priors = load_priors(self.settings.search.calibrate_from, self.space)
        self.proposer = proposer or build_proposer(self.settings, self.baseline, self.space,
                                                   self.target, self.priors.summary,
                                                   self.priors.observations)
        self.memory = GuardrailMemory.read()
        self.console = console or Console(stderr=True)
        self.log_format = log_format
        self.progress = CampaignProgress(self.console, self.settings.window.iterations)
        self.stops = StopRequests()
        # while it runs: the open campaign, its MLflow run and its live report
        self.context: CampaignContext | None = None
        self.tracking: CampaignTracking | None = None
        self.live_report: LiveReport | None = None

    @property
    def memory_model(self) -> MemoryModel | None:
        return self.memory.model

    # -- the whole campaign ------------------------------------------------------------------

    def run(self, *, stress_only: bool = False) -> CampaignSummary:
        """Run (or resume) the campaign to the end of its budget, then the ladder and the
        attribution (``stress_only``: those alone)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with CampaignLock(self.directory), self.stops.installed():
            ctx = self.context = self._open()
            guarded = GuardedProposer(self.proposer, self.settings, self.baseline, self.space,
                                      self.priors.observations, ctx.log)
            try:
                with self.progress:
                    return self._run(ctx, self.phases(guarded, stress_only))
            finally:
                self._close(ctx, guarded)

    def phases(self, guarded: GuardedProposer, stress_only: bool = False) -> list[Phase]:
        """The phases in order. One that needs the named winner goes after the ladder."""
        proxies = ProxyTrials(after_launch=lambda ctx: guarded.prefetch(history(ctx)))
        search: list[Phase] = [] if stress_only else [SearchPhase(guarded, proxies)]
        return [*search, LadderPhase(proxies, self.priors.calibration.horizon_fits),
                AttributionPhase(), WidthPhase()]

    def _open(self) -> CampaignContext:
        ctx = open_context(self.settings, self.directory, baseline=self.baseline,
                           device=self.device, executor=self.executor, memory=self.memory,
                           stops=self.stops, console=self.console, log_format=self.log_format,
                           on_change=self._show, on_record=self._track)
        if self.settings.store.mlflow_uri:
            self.tracking = CampaignTracking(self.settings, self.directory, ctx.log)
        self._track(*ctx.ledger.records)  # trials ended before a resume, or never logged
        return ctx

    def _track(self, *records: TrialRecord) -> None:
        """Copy ended trials to MLflow when the campaign has ``--mlflow-uri``, and rewrite
        the live report."""
        if self.tracking is not None:
            self.tracking.record(records)
        if self.live_report is not None and self.context is not None:
            self.live_report.trial_ended(self.context.ledger)

    def _report_context(self) -> ReportContext:
        return ReportContext(self.settings.name, self.target, self.settings.preset,
                             CloudRates.from_environment(),
                             tuple(self.priors.calibration.horizon_fits),
                             corpus=self.settings.corpus.source)

    def _ends(self, ctx: CampaignContext) -> str:
        """When the night ends, for the live report."""
        window = self.settings.window
        if window.until is not None or window.hours is not None:
            at = ctx.deadline.at
            return f"the window closes at {at:%H:%M} UTC" if at is not None else "at the window's end"
        done = len(ctx.ledger.search_trials)
        return (f"after {window.iterations} proxy trials ({done} done), then the ladder"
                + (" and attribution" if self.settings.ladder.attribution else ""))

    def _close(self, ctx: CampaignContext, guarded: GuardedProposer) -> None:
        if self.tracking is not None:
            self.tracking.close(stopped_early=self.stops.stop)
        guarded.close()
        self.executor.close()
        ctx.store.close()
        ctx.close()

    def _show(self) -> None:
        if self.context is None:
            return
        ledger = self.context.ledger
        best = ledger.best
        self.progress.update(len(ledger.search_trials), best.val_bpb if best else None,
                             self.context.book.running())

    def _run(self, ctx: CampaignContext, phases: list[Phase]) -> CampaignSummary:
        self.live_report = LiveReport(self.directory, self._report_context(), ctx.log,
                                      running=ctx.book.running, ends=lambda: self._ends(ctx))
        plan = ctx.deadline.initial_plan(ctx.ledger.proxies)
        ctx.log.info("campaign_started", target=self.target.name, preset=self.settings.preset,
                     corpus=self.settings.corpus.source, params=self.baseline.param_count(),
                     iterations=self.settings.window.iterations,
                     deadline=ctx.deadline.at.isoformat() if ctx.deadline.at else None,
                     window=plan.describe() if plan else None,
                     device=f"{self.device.kind}:{self.device.name}",
                     executor=self.executor.name, parallel=self.settings.executor.resolved_parallel,
                     precision=self.baseline.precision, db=ctx.store.index_name)
        for note in self.auto_notes:
            ctx.log.info("auto_resolved", what=note)
        log_priors(ctx.log, self.priors, self.baseline.precision)
        ctx.deadline.warn_if_obviously_short(ctx.ledger.proxies)
        ctx.deadline.update(ctx.ledger.proxies)
        for phase in phases:
            if self.stops.stop or ctx.failures.failing is not None:
                break
            phase.run(ctx)
        summary = summarize(ctx, stopped_early=self.stops.stop)
        counts = ctx.ledger.counts()
        ctx.log.info("campaign_finished", proxy_trials=summary.proxy_trials,
                     rejected=summary.rejected, rung_runs=summary.rung_runs,
                     stress_runs=summary.stress_runs,
                     best_trial=summary.best.trial_id if summary.best else None,
                     best_val_bpb=summary.best.val_bpb if summary.best else None,
                     winner=summary.winner.record.trial_id if summary.winner else None,
                     winner_evidence=summary.winner.evidence if summary.winner else None,
                     winner_mean_val_bpb=summary.winner.mean_val_bpb if summary.winner else None,
                     winner_within_noise=summary.winner.within_noise if summary.winner else None,
                     noise_spread=summary.noise.spread if summary.noise else None,
                     winner_line=summary.winner_line,
                     recommendation_line=summary.recommendation_line,
                     stopped_early=summary.stopped_early, failing=summary.failing,
                     llm_trials=counts.llm, search_trials=counts.proposed)
        try:  # the report is a by-product: one that cannot be written never fails the campaign
            write_report(self.directory, ctx.ledger, self._report_context())
        except Exception as error:
            ctx.log.warning("report_failed", error=f"{type(error).__name__}: {error}")
        return summary


def summarize(ctx: CampaignContext, stopped_early: bool) -> CampaignSummary:
    """Where the campaign stands, from its records: the console's last lines."""
    ledger = ctx.ledger
    counts = ledger.counts()
    return CampaignSummary(
        proxy_trials=counts.trained, rejected=counts.rejected,
        stress_runs=counts.stress_trained, best=ledger.best, stopped_early=stopped_early,
        noise=ledger.noise, winner=ledger.winner, failing=ctx.failures.failing,
        rung_runs=counts.rung_trained, winner_line=ledger.winner_line(),
        recommendation_line=recommendation(ledger))


def recommendation(ledger: Ledger) -> str:
    """The attribution's recommendation for the winner, once it has one; the baseline when
    the check one size up overruled the winner (the winner line says why)."""
    if ledger.lost_one_size_up is not None:
        return "recommended: the baseline, which the campaign keeps ('recipelab export' writes it)"
    winner = ledger.winner
    result = result_of(ledger.records, winner.record.trial_id) if winner else None
    return recommendation_line(result) if result is not None else ""
