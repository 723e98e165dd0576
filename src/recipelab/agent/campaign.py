"""The campaign loop: propose, check, train, record; then promote finalists to stress runs.

The agent is the only writer of the trajectory. Its state lives in the store, never only in
memory, so that ``recipelab run`` after any crash (or a kill -9) picks up where it stopped:
trials left running become ``interrupted`` and run once more, stress runs continue from
their checkpoints, and a completed trial is never run or recorded twice.
"""

from __future__ import annotations

import dataclasses
import signal
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console

from recipelab.agent.display import CampaignProgress
from recipelab.agent.events import campaign_logger
from recipelab.agent.executor import Executor, LocalExecutor, TrialHandle
from recipelab.agent.executors import build_executor
from recipelab.agent.lock import CampaignLock
from recipelab.agent.memory_updates import learn_peak
from recipelab.agent.priors import load_priors, log_priors
from recipelab.agent.proposers import build_proposer
from recipelab.agent.records import (
    agent_provenance,
    as_measurement,
    as_observation,
    as_proposal,
    proposal_fields,
    result_fields,
)
from recipelab.agent.seeds import (
    Winner,
    baseline_proposals,
    name_winner,
    noise_marks,
    rank_finalists,
    rerun_proposals,
)
from recipelab.agent.settings import CampaignSettings
from recipelab.agent.stress import judge_stress, mid_ranked
from recipelab.guardrails import CHECKS, DeviceInfo, GuardContext, Verdict, detect_device, judge
from recipelab.proposer import Observation, Proposal, Proposer, default_space
from recipelab.recipe import PROXY_PRESETS, Recipe, get_target
from recipelab.report import CloudRates, ReportContext, write_report
from recipelab.trainer.spec import TrialResult, TrialSpec
from recipelab.trajectory import TrajectoryStore
from recipelab.trajectory.noise import NoiseFloor, noise_floor
from recipelab.trajectory.record import TrialRecord, utc_now

BASELINE_PROPOSER = "baseline"
TRIALS_DIR = "trials"
PROXY_LOG_EVERY = 10
STRESS_ATTEMPTS = 5
"""Interruptions after which a stress run is given up. Each attempt resumes from the last
checkpoint, so a run killed with its orchestrator loses little; one that keeps being
interrupted may itself be what brings the orchestrator down."""
POLL_INTERVAL_S = 0.02


@dataclass
class InFlight:
    """A trial handed to the executor whose result has not come back yet."""

    record: TrialRecord
    recipe: Recipe
    handle: TrialHandle
    started: float  # time.monotonic() at submission, for the record's wall_s


@dataclass(frozen=True)
class CampaignSummary:
    proxy_trials: int
    rejected: int
    stress_runs: int
    best: TrialRecord | None
    stopped_early: bool
    noise: NoiseFloor | None = None  # measured from the baseline's seeds
    winner: Winner | None = None  # the finalist with the best mean over its seeds


class StopRequests:
    """SIGINT/SIGTERM: the first lets the trials in flight finish, the second cancels them."""

    def __init__(self) -> None:
        self.count = 0

    @property
    def stop(self) -> bool:
        return self.count >= 1

    @property
    def cancel(self) -> bool:
        return self.count >= 2

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.count += 1

    @contextmanager
    def installed(self) -> Iterator[None]:
        previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class Campaign:
    def __init__(self, settings: CampaignSettings, directory: Path, *,
                 executor: Executor | None = None, proposer: Proposer | None = None,
                 device: DeviceInfo | None = None, console: Console | None = None) -> None:
        self.settings = settings
        self.directory = directory
        self.baseline = settings.baseline()
        preset = PROXY_PRESETS[settings.preset]
        self.target = get_target(settings.target or preset.default_target)
        self.param_budget = settings.budget or preset.budget
        self.space = default_space(self.baseline)
        self.executor = executor or build_executor(settings)
        self.priors = load_priors(settings.calibrate_from, self.space)
        self.proposer = proposer or build_proposer(settings, self.baseline, self.space,
                                                   self.target, self.priors.summary,
                                                   self.priors.observations)
        self.device = device or detect_device()
        self.console = console or Console(stderr=True)
        self.progress = CampaignProgress(self.console, settings.iterations)
        self.stops = StopRequests()
        self.store: TrajectoryStore
        self.log: Any = None
        self._consecutive_rejections = 0
        self._cached: list[TrialRecord] | None = None
        self.parallel = settings.parallel
        self._inflight: dict[str, InFlight] = {}

    # -- bookkeeping from the store ------------------------------------------------------------

    def _records(self, kind: str | None = None) -> list[TrialRecord]:
        """Every record, read from the store once per change (the agent is its only writer)."""
        if self._cached is None:
            self._cached = self.store.records()
        return [r for r in self._cached if kind is None or r.kind == kind]

    def _write(self, record: TrialRecord) -> None:
        if record.status == "running":
            self.store.mark_running(record)
        else:
            self.store.append(record)
        self._cached = None

    def _trained_proxies(self) -> list[TrialRecord]:
        return [r for r in self._records("proxy") if r.status in ("complete", "failed")]

    def _history(self) -> list[Observation]:
        return [as_observation(r) for r in self._records("proxy")]

    def _next_id(self, prefix: str) -> str:
        taken = [int(r.trial_id[1:]) for r in self._records() if r.trial_id[:1] == prefix
                 and r.trial_id[1:].isdigit()]
        return f"{prefix}{max(taken, default=-1) + 1:04d}"

    def _baseline_id(self) -> str | None:
        for record in self._records("proxy"):
            if record.proposer == BASELINE_PROPOSER and record.status == "complete":
                return record.trial_id
        return None

    def _pending_retries(self, kind: str) -> list[TrialRecord]:
        """Interrupted trials of ``kind`` not yet re-run (a candidate is re-queued once)."""
        records = self._records(kind)
        retried = {r.retry_of for r in records if r.retry_of}
        return [r for r in records if r.status == "interrupted" and not r.retry_of
                and r.trial_id not in retried]

    def _context(self, exclude: str | None = None) -> GuardContext:
        records = self._records()
        # An interrupted candidate never got a result, so proposing it again is no duplicate
        # (an interrupted baseline must run again, or the campaign has no reference).
        seen = {r.fingerprint for r in records if r.fingerprint and r.kind == "proxy"
                and r.status not in ("rejected", "interrupted")}
        seen.discard(exclude)
        measurements = tuple(m for r in records if r.kind == "proxy"
                             if (m := as_measurement(r)) is not None)
        return GuardContext(
            target=self.target, baseline=self.baseline, device=self.device,
            param_budget=self.param_budget, searchable=frozenset(self.settings.searchable),
            seen=frozenset(seen), memory_reserve_bytes=int(self.settings.memory_reserve_gib * 2**30),
            timeout_s=self.settings.trial_timeout_s, measurements=measurements)

    # -- budget ----------------------------------------------------------------------------

    def _typical_wall_s(self) -> float | None:
        walls = [r.metrics["wall_s"] for r in self._trained_proxies()
                 if r.metrics.get("wall_s") is not None]
        return statistics.median(walls) if walls else None

    def _fits_window(self, deadline: datetime | None, scale: float = 1.0) -> bool:
        """Whether a trial (``scale`` times a typical proxy trial) can finish before the deadline."""
        if deadline is None:
            return True
        typical = self._typical_wall_s() or 0.0
        remaining = (deadline - datetime.now(timezone.utc)).total_seconds()
        return remaining > typical * scale

    def _inflight_proxies(self) -> int:
        return sum(f.record.kind == "proxy" for f in self._inflight.values())

    def _launchable(self) -> int:
        """How many more proxy trials may start now: free slots, within ``iterations``."""
        free = self.parallel - len(self._inflight)
        if self.settings.iterations is None:
            return free
        started = len(self._trained_proxies()) + self._inflight_proxies()
        return min(free, self.settings.iterations - started)

    def _budget_left(self, deadline: datetime | None) -> bool:
        """Whether another proxy trial may start (trials in flight count as spent)."""
        iterations = self.settings.iterations
        if iterations is not None and (len(self._trained_proxies()) + self._inflight_proxies()
                                       >= iterations):
            return False
        if iterations is None and deadline is None:
            return False
        return self._fits_window(deadline)

    # -- one trial ---------------------------------------------------------------------------

    def _save_artifacts(self, trial_id: str, proposal: Proposal) -> dict[str, str]:
        """Write what the proposer kept (e.g. the exact LLM prompt and reply) into the trial's
        folder; the record references the files."""
        saved = {}
        for name, text in proposal.artifacts.items():
            if Path(name).name != name or name.startswith("."):
                continue  # artifact names come from our proposers; anything else is ignored
            path = self.directory / TRIALS_DIR / trial_id / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            saved[name] = str(path.relative_to(self.directory))
        if "fallback.txt" in proposal.artifacts:
            self.log.warning("llm_fallback", trial_id=trial_id,
                             cause=proposal.artifacts["fallback.txt"], proposer=proposal.proposer)
        return saved

    def _reject(self, trial_id: str, proposal: Proposal, verdict: Verdict, iteration: int,
                artifacts: dict[str, str]) -> None:
        recipe = verdict.recipe
        record = TrialRecord(
            campaign=self.settings.name, trial_id=trial_id, iteration=iteration, kind="proxy",
            status="rejected", reasons=list(verdict.reasons),
            recipe=recipe.model_dump(mode="json") if recipe else proposal.candidate,
            fingerprint=recipe.fingerprint() if recipe else None,
            finished_at=utc_now(), artifacts=artifacts, **proposal_fields(proposal))
        self._write(record)
        self.log.warning("rejected", trial_id=trial_id, proposer=proposal.proposer,
                         edit=proposal.edit, reasons=list(verdict.reasons))

    def _launch(self, record: TrialRecord, recipe: Recipe, *, log_every: int,
                checkpoint_every: int = 0, resume: bool = False,
                out_dir: Path | None = None, timeout_s: float) -> None:
        """Mark ``record`` running and hand it to the executor; :meth:`_poll_inflight` records
        its result."""
        out_dir = out_dir or self.directory / TRIALS_DIR / record.trial_id
        spec = TrialSpec(trial_id=record.trial_id, kind=record.kind,
                         recipe=recipe, corpus=self.settings.corpus, out_dir=str(out_dir),
                         device=self.settings.device, log_every=log_every,
                         checkpoint_every=checkpoint_every,
                         threads=self.settings.trial_threads(),
                         compile=self.settings.trial_compile(record.kind))
        record.artifacts = {**record.artifacts, "dir": str(out_dir.relative_to(self.directory))}
        record.started_at = utc_now()
        record.status = "running"
        self._write(record)
        self.log.info("trial_started", trial_id=record.trial_id, kind=record.kind,
                      proposer=record.proposer, edit=record.edit, hypothesis=record.hypothesis)
        started = time.monotonic()
        handle = self.executor.submit(spec, resume=resume, timeout_s=timeout_s)
        self._inflight[record.trial_id] = InFlight(record, recipe, handle, started)
        self._show(current=self._running())
        if isinstance(self.executor, LocalExecutor):
            self.executor.prestart()
        if record.kind == "proxy":
            self.proposer.prefetch(self._history())

    def _running(self) -> str | None:
        return ", ".join(f"{f.record.trial_id} ({f.record.kind})"
                         for f in self._inflight.values()) or None

    def _poll_inflight(self) -> list[TrialRecord]:
        """Record every trial in flight that has ended; after a second stop signal, cancel
        them all as ``interrupted``."""
        finished = []
        for trial_id, flight in list(self._inflight.items()):
            if self.stops.cancel:
                self.executor.cancel(flight.handle)
                self.executor.poll(flight.handle)
                del self._inflight[trial_id]
                finished.append(self._finish(flight.record, status="interrupted",
                                             message="cancelled by a second stop signal"))
                continue
            result = self.executor.poll(flight.handle)
            if result is not None:
                del self._inflight[trial_id]
                finished.append(self._record_result(flight, result))
        return finished

    def _record_result(self, flight: InFlight, result: TrialResult) -> TrialRecord:
        record, recipe = flight.record, flight.recipe
        fields = result_fields(result, recipe, time.monotonic() - flight.started,
                               agent_provenance(self.device, recipe.seed))
        if result.status == "interrupted":
            self.log.warning("trial_lost", trial_id=record.trial_id, kind=record.kind,
                             message=result.message)
        elif record.kind == "stress":
            verdict = judge_stress(fields["curve"], result.reason)
            fields["verdict"] = verdict.verdict
            fields["message"] = result.message or verdict.explanation
            self.log.info("stress_verdict", trial_id=record.trial_id, parent=record.parent,
                          verdict=verdict.verdict, explanation=verdict.explanation)
        elif record.proposer != BASELINE_PROPOSER:
            fields["metrics"].update(noise_marks(fields["val_bpb"], self._noise()))
        return self._finish(record, **fields)

    def _finish(self, record: TrialRecord, **fields: Any) -> TrialRecord:
        final = record.model_copy(update={**fields, "finished_at": utc_now()})
        final = TrialRecord.model_validate(final.model_dump())
        self._write(final)
        learn_peak(final, self.device, self.log)
        self._show(current=self._running())
        self.log.info("trial_finished", trial_id=final.trial_id, kind=final.kind,
                      status=final.status, reason=final.reason, val_bpb=final.val_bpb,
                      message=final.message, wall_s=final.metrics.get("wall_s"))
        return final

    def _try(self, proposal: Proposal, *, retry_of: TrialRecord | None = None) -> None:
        """Judge ``proposal``; record its rejection, or launch it (without waiting for it)."""
        iteration = len(self._trained_proxies()) + self._inflight_proxies()
        trial_id = self._next_id("p")
        self.log.info("proposal", trial_id=trial_id, proposer=proposal.proposer,
                      edit=proposal.edit, hypothesis=proposal.hypothesis,
                      retry_of=retry_of.trial_id if retry_of else None)
        verdict = judge(proposal.candidate,
                        self._context(exclude=retry_of.fingerprint if retry_of else None),
                        checks=[c for c in CHECKS if c not in self.settings.skip_checks])
        artifacts = self._save_artifacts(trial_id, proposal)
        if not verdict.accepted or verdict.recipe is None:
            self._reject(trial_id, proposal, verdict, iteration, artifacts)
            self._consecutive_rejections += 1
            return
        self._consecutive_rejections = 0
        recipe = verdict.recipe
        record = TrialRecord(
            campaign=self.settings.name, trial_id=trial_id, iteration=iteration, kind="proxy",
            status="queued", recipe=recipe.model_dump(mode="json"),
            fingerprint=recipe.fingerprint(), retry_of=retry_of.trial_id if retry_of else None,
            artifacts=artifacts, **proposal_fields(proposal))
        self._launch(record, recipe, log_every=PROXY_LOG_EVERY,
                     timeout_s=self.settings.trial_timeout_s)

    def _propose(self, n: int = 1) -> list[Proposal]:
        """Up to ``n`` proposals; the proposer sees the trials in flight as ``running``."""
        seeds = baseline_proposals(self.baseline, self._records("proxy"), self.settings.noise_seeds, n)
        if seeds:
            return seeds
        proposals = self.proposer.propose(self._history(), n)
        baseline_id = self._baseline_id()
        return [dataclasses.replace(p, parent_id=baseline_id)
                if p.parent_id is None and baseline_id is not None else p
                for p in proposals[:n]]

    # -- stress runs -------------------------------------------------------------------------

    def _noise(self) -> NoiseFloor | None:
        return noise_floor(self._records("proxy"))

    def finalists(self) -> list[TrialRecord]:
        """The best ``promote`` complete proxy trials by val_bpb (repeats with another seed
        are evidence about their original, not candidates)."""
        return rank_finalists(self._records("proxy"), self.settings.promote)

    def stress_candidates(self) -> list[TrialRecord]:
        """The finalists, then ``fidelity`` trials spread over the rest of the ranking, so the
        proxy-to-stress rank agreement is measured on more than the top few."""
        ranked = rank_finalists(self._records("proxy"), len(self._records("proxy")))
        return self.finalists() + mid_ranked(ranked[self.settings.promote:], self.settings.fidelity)

    def _stress(self, finalist: TrialRecord, deadline: datetime | None) -> None:
        stress = [r for r in self._records("stress") if r.parent == finalist.trial_id]
        if any(r.status in ("complete", "failed") for r in stress):
            return
        interrupted = [r for r in stress if r.status == "interrupted"]
        if len(interrupted) >= STRESS_ATTEMPTS:
            self.log.warning("stress_given_up", trial_id=finalist.trial_id,
                             attempts=len(interrupted))
            return
        steps = self.settings.stress_steps
        if not self._fits_window(deadline, scale=steps / self.baseline.steps):
            self.log.info("stress_skipped", trial_id=finalist.trial_id,
                          reason="cannot finish before the campaign's deadline")
            return
        recipe = Recipe.model_validate(finalist.recipe).apply({"steps": steps})
        trial_id = self._next_id("s")
        self.log.info("promoted", trial_id=trial_id, parent=finalist.trial_id,
                      val_bpb=finalist.val_bpb, steps=steps,
                      **noise_marks(finalist.val_bpb, self._noise()))
        record = TrialRecord(
            campaign=self.settings.name, trial_id=trial_id, iteration=finalist.iteration,
            kind="stress", status="queued", recipe=recipe.model_dump(mode="json"),
            fingerprint=recipe.fingerprint(), parent=finalist.trial_id,
            proposer=finalist.proposer, hypothesis=finalist.hypothesis, edit=finalist.edit,
            retry_of=interrupted[0].trial_id if interrupted else None)
        timeout = self.settings.trial_timeout_s * max(1.0, steps / self.baseline.steps)
        self._launch(
            record, recipe, log_every=self.settings.stress_log_every,
            checkpoint_every=self.settings.stress_checkpoint_every, resume=True,
            out_dir=self.directory / TRIALS_DIR / f"stress-{finalist.trial_id}", timeout_s=timeout)

    def promote(self, deadline: datetime | None = None) -> None:
        """Stress-run the finalists, up to ``parallel`` at a time; one lost while running is
        resumed from its checkpoint."""
        self._settle_close_finalists(deadline)
        finalists = self.stress_candidates()
        queue = list(finalists)
        while True:
            for record in self._poll_inflight():
                if (record.kind == "stress" and record.status == "interrupted"
                        and not self.stops.cancel):
                    queue += [f for f in finalists if f.trial_id == record.parent]
            while queue and not self.stops.stop and len(self._inflight) < self.parallel:
                self._stress(queue.pop(0), deadline)
            if not self._inflight and (not queue or self.stops.stop):
                return
            time.sleep(POLL_INTERVAL_S)

    def _settle_close_finalists(self, deadline: datetime | None) -> None:
        """Re-run with more seeds the finalists whose lead is within the noise floor, so the
        winner is named by its mean over seeds (see :mod:`recipelab.agent.seeds`)."""
        for proposal in rerun_proposals(self.finalists(), self._records("proxy"), self._noise()):
            while len(self._inflight) >= self.parallel:
                self._poll_inflight()
                time.sleep(POLL_INTERVAL_S)
            if self.stops.stop or not self._fits_window(deadline):
                break
            self._try(proposal)
        while self._inflight:
            self._poll_inflight()
            time.sleep(POLL_INTERVAL_S)

    # -- the whole campaign ------------------------------------------------------------------

    def _show(self, current: str | None) -> None:
        best = self.summary().best
        self.progress.update(len(self._trained_proxies()), best.val_bpb if best else None, current)

    def _open(self) -> None:
        if isinstance(self.executor, LocalExecutor):
            self.executor.prestart()  # import torch in the first worker while we set up
        self.store = TrajectoryStore(self.directory, self.settings.name, db_url=self.settings.db)
        self.log, self._sink = campaign_logger(self.settings.name, self.directory, self.console)
        report = self.store.reconcile()
        self._cached = None
        for line in report.set_aside:
            self.log.warning("jsonl_line_set_aside", line=line, side_file=str(report.side_file))
        if report.rebuilt:
            self.log.warning("sqlite_rebuilt", reason="missing or corrupt; rebuilt from JSONL")
        for record in report.interrupted:
            self.log.warning("trial_interrupted", trial_id=record.trial_id, kind=record.kind)

    def _close(self) -> None:
        self.executor.close()
        self.store.close()
        self._sink.close()

    def run(self, *, stress_only: bool = False) -> CampaignSummary:
        """Run (or resume) the campaign to the end of its budget, then the stress runs."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with CampaignLock(self.directory), self.stops.installed():
            self._open()
            try:
                with self.progress:
                    return self._run(stress_only)
            finally:
                self._close()

    def _run(self, stress_only: bool) -> CampaignSummary:
        started = datetime.now(timezone.utc)
        deadline = self.settings.deadline(started)
        self._consecutive_rejections = 0
        self.log.info("campaign_started", target=self.target.name, preset=self.settings.preset,
                      corpus=self.settings.corpus.source, params=self.baseline.param_count(),
                      iterations=self.settings.iterations,
                      deadline=deadline.isoformat() if deadline else None,
                      executor=self.settings.executor, parallel=self.parallel,
                      db=self.store.index_name)
        log_priors(self.log, self.priors)
        if not stress_only:
            self._search(deadline)
        if not self.stops.stop:
            self.promote(deadline)
        summary = self.summary(stopped_early=self.stops.stop)
        self.log.info("campaign_finished", proxy_trials=summary.proxy_trials,
                      rejected=summary.rejected, stress_runs=summary.stress_runs,
                      best_trial=summary.best.trial_id if summary.best else None,
                      best_val_bpb=summary.best.val_bpb if summary.best else None,
                      winner=summary.winner.record.trial_id if summary.winner else None,
                      winner_mean_val_bpb=summary.winner.mean_val_bpb if summary.winner else None,
                      winner_within_noise=summary.winner.within_noise if summary.winner else None,
                      noise_spread=summary.noise.spread if summary.noise else None,
                      stopped_early=summary.stopped_early)
        try:  # the report is a by-product: one that cannot be written never fails the campaign
            write_report(self.directory, self._records(), ReportContext(
                self.settings.name, self.target, self.settings.preset, CloudRates.from_environment()))
        except Exception as error:
            self.log.warning("report_failed", error=f"{type(error).__name__}: {error}")
        return summary

    def _search(self, deadline: datetime | None) -> None:
        """Keep up to ``parallel`` proxy trials in flight until the budget is spent, then wait
        for the last ones. A stop signal ends launching; a second cancels what is in flight."""
        launching = True
        while True:
            self._poll_inflight()
            if (launching and not self.stops.stop and len(self._inflight) < self.parallel
                    and self._budget_left(deadline)):
                launching = self._launch_next()
                continue
            if not self._inflight:
                break
            time.sleep(POLL_INTERVAL_S)
        if self.stops.stop:
            self.log.info("stopped", reason="stop signal: the trials in flight were finished")

    def _launch_next(self) -> bool:
        """Start what comes next: a lost trial's one re-run, else fresh proposals for the free
        slots. False when the proposer has nothing more worth launching."""
        retries = self._pending_retries("proxy")
        if retries:
            self.log.info("requeued", trial_id=retries[0].trial_id)
            self._try(as_proposal(retries[0]), retry_of=retries[0])
            return True
        if self._consecutive_rejections >= self.settings.max_consecutive_rejections:
            self.log.error("too_many_rejections", count=self._consecutive_rejections,
                           hint="the proposer keeps proposing what the guardrails reject")
            return False
        proposals = self._propose(max(1, self._launchable()))
        if not proposals:
            self.log.warning("no_proposal", proposer=self.proposer.name)
            return False
        for proposal in proposals:
            if self.stops.stop:
                break
            self._try(proposal)
        return True

    def summary(self, stopped_early: bool = False) -> CampaignSummary:
        proxies = self._records("proxy")
        complete = [r for r in proxies if r.status == "complete" and r.val_bpb is not None]
        return CampaignSummary(
            proxy_trials=sum(r.status in ("complete", "failed") for r in proxies),
            rejected=sum(r.status == "rejected" for r in proxies),
            stress_runs=sum(r.status in ("complete", "failed") for r in self._records("stress")),
            best=min(complete, key=lambda r: r.val_bpb or 0.0) if complete else None,
            stopped_early=stopped_early, noise=self._noise(),
            winner=name_winner(self.finalists(), proxies, self._noise()))
