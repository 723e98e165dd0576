"""The campaign loop: propose, check, train, record; then promote finalists to stress runs.

The agent is the only writer of the trajectory. Its state lives in the store, never only in
memory, so that ``recipelab run`` after any crash (or a kill -9) picks up where it stopped:
trials left running become ``interrupted`` and run once more, stress runs continue from
their checkpoints, and a completed trial is never run or recorded twice.
"""

from __future__ import annotations

import dataclasses
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console

from recipelab.agent.display import CampaignProgress
from recipelab.agent.events import campaign_logger, redact
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
    search_trials,
)
from recipelab.agent.settings import CampaignSettings, SettingsError
from recipelab.agent.stress import judge_stress, mid_ranked
from recipelab.agent.window import (
    TrialTimes,
    WindowPlan,
    measured_times,
    plan_window,
    preset_floor,
    too_short_message,
)
from recipelab.guardrails import CHECKS, DeviceInfo, GuardContext, Verdict, judge
from recipelab.guardrails.hardware import resolve_device
from recipelab.guardrails.memory_fit import memory_model_path, read_for_guardrail
from recipelab.proposer import ClassicalProposer, Observation, Proposal, Proposer, default_space
from recipelab.recipe import BASELINE_PROPOSER, PROXY_PRESETS, Recipe, get_target
from recipelab.report import CloudRates, ReportContext, write_report
from recipelab.trainer.spec import TrialResult, TrialSpec
from recipelab.trajectory import TrajectoryStore
from recipelab.trajectory.noise import NoiseFloor, noise_floor
from recipelab.trajectory.record import TrialRecord, utc_now

TRIALS_DIR = "trials"
PROXY_LOG_EVERY = 10
STRESS_ATTEMPTS = 5
"""Interruptions after which a stress run is given up. Each attempt resumes from the last
checkpoint, so a run killed with its orchestrator loses little; one that keeps being
interrupted may itself be what brings the orchestrator down."""
POLL_INTERVAL_S = 0.02
ERROR_TEXT_LIMIT = 500

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
    failing: str | None = None  # the reason a run of failed trials stopped the campaign


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
        self.device = device or self._resolve_device(settings)
        self.memory_model_path = memory_model_path()  # read once here, then after each peak learnt
        self.memory_model, self.memory_model_problem = read_for_guardrail(self.memory_model_path)
        self.console = console or Console(stderr=True)
        self.progress = CampaignProgress(self.console, settings.iterations)
        self.stops = StopRequests()
        self.store: TrajectoryStore
        self.log: Any = None
        self._consecutive_rejections = 0
        self._failure_run: list[TrialRecord] = []  # the latest proxy trials, all failed alike
        self.failing: str | None = None  # set when that run reached max_consecutive_failures
        self._fallback: Proposer | None = None
        self._plan: WindowPlan | None = None
        self._window_hopeless = False  # not even one stress run fits: the search fills it
        self._search_spent = False  # the search reached the window's Phase 2 reserve
        self._cached: list[TrialRecord] | None = None
        self.parallel = settings.parallel
        self._inflight: dict[str, InFlight] = {}

    @staticmethod
    def _resolve_device(settings: CampaignSettings) -> DeviceInfo:
        """The device the guardrails judge: the one ``--device`` asks trials to run on.

        With the Ray executor it is resolved here on the orchestrator, so a cluster whose
        workers have other hardware than this machine should be given ``--device`` explicitly.
        """
        try:
            return resolve_device(settings.device)
        except ValueError as error:
            raise SettingsError(str(error)) from None

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
        """The proxy trials spent from ``--iterations`` (see :func:`seeds.search_trials`)."""
        return search_trials(self._records("proxy"))

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
            timeout_s=self.settings.trial_timeout_s, measurements=measurements,
            memory_model=self.memory_model, memory_model_problem=self.memory_model_problem)

    # -- budget ----------------------------------------------------------------------------

    def _times(self) -> TrialTimes | None:
        return measured_times(self._records("proxy"))

    def _fits_window(self, deadline: datetime | None, steps: int | None = None) -> bool:
        """Whether a trial of ``steps`` (default: a proxy trial's) can finish before the
        deadline, at the measured trial costs."""
        if deadline is None:
            return True
        times = self._times()
        seconds = times.seconds(steps or self.baseline.steps) if times else 0.0
        if self._plan is not None and times is not None:
            return self._plan.fits(datetime.now(timezone.utc), seconds)
        return (deadline - datetime.now(timezone.utc)).total_seconds() > seconds

    def _window_plan(self, deadline: datetime, times: TrialTimes) -> WindowPlan:
        s = self.settings
        return plan_window(deadline, times, proxy_steps=self.baseline.steps,
                           stress_steps=s.stress_steps, promote=s.promote, fidelity=s.fidelity,
                           noise_seeds=s.noise_seeds, parallel=self.parallel)

    def _update_plan(self, deadline: datetime | None) -> WindowPlan | None:
        """Re-plan the window from the trials measured so far; say so when the split moves
        by a minute or more, and warn once when not even one stress run can fit."""
        times = self._times() if deadline is not None else None
        if deadline is None or times is None:
            return self._plan
        plan = self._window_plan(deadline, times)
        previous, self._plan = self._plan, plan
        if previous is None or abs((plan.search_until - previous.search_until).total_seconds()) >= 60:
            self.log.info("window_planned", **plan.as_event())
        if previous is None and self.settings.promote > 0 and not plan.one_stress_fits(
                datetime.now(timezone.utc) + timedelta(seconds=plan.proxy_s)):
            self._window_hopeless = True
            self.log.warning("window_too_short", stress_s=round(plan.stress_s, 1),
                             left_s=round((deadline - datetime.now(timezone.utc)).total_seconds(), 1),
                             stress_steps=self.settings.stress_steps, estimated=False,
                             fix=too_short_message(plan, datetime.now(timezone.utc),
                                                   self.settings.stress_steps))
        return plan

    def _warn_if_obviously_short(self, deadline: datetime | None) -> None:
        """Before anything is measured: warn when the window cannot hold the baseline's seeds
        and one stress run even at the preset's lower-bound trial time."""
        if deadline is None or self.settings.promote == 0 or self._times() is not None:
            return
        plan = self._window_plan(deadline, preset_floor(self.settings.preset, self.baseline.steps))
        now = datetime.now(timezone.utc)
        needed = self.settings.noise_seeds * plan.proxy_s / self.parallel + plan.stress_s
        if not plan.fits(now, needed):
            self.log.warning("window_too_short", stress_s=round(plan.stress_s, 1),
                             left_s=round((deadline - now).total_seconds(), 1),
                             stress_steps=self.settings.stress_steps, estimated=True,
                             fix=too_short_message(plan, now, self.settings.stress_steps))

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
        if self.failing is not None:
            return False
        plan = self._update_plan(deadline)
        if plan is not None and not self._window_hopeless:
            if plan.search_may_launch(datetime.now(timezone.utc)):
                return True
            if not self._search_spent:
                self._search_spent = True
                self.log.info("search_window_spent", search_until=plan.search_until.isoformat(),
                              reason="the rest of the window is kept for Phase 2 (seed "
                              "re-runs, stress runs)")
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
            try:
                self.proposer.prefetch(self._history())
            except Exception as error:  # a proposer's fault is never the campaign's end
                self._proposer_failed("prefetch", error)

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
        if (learnt := learn_peak(final, self.device, self.log, self.memory_model_path)) is not None:
            self.memory_model, self.memory_model_problem = learnt, None
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
        proposals = self._proposals(n)
        baseline_id = self._baseline_id()
        return [dataclasses.replace(p, parent_id=baseline_id)
                if p.parent_id is None and baseline_id is not None else p
                for p in proposals[:n]]

    def _proposals(self, n: int) -> list[Proposal]:
        """The proposer's proposals; when it raises, the classical proposer's for this turn."""
        history = self._history()
        try:
            return self.proposer.propose(history, n)
        except Exception as error:  # a proposer's fault is never the campaign's end
            self._proposer_failed("propose", error)
        if self._fallback is None:
            s = self.settings
            self._fallback = ClassicalProposer(self.baseline, None, self.space, sampler=s.sampler,
                                               seed=s.seed, priors=self.priors.observations)
        try:
            return self._fallback.propose(history, n)
        except Exception as error:
            self._proposer_failed("fallback", error)
            return []

    def _proposer_failed(self, call: str, error: Exception) -> None:
        """Log a proposer's exception (type and message, secrets redacted by the logger and
        the text cut short) and that the classical proposer takes the turn."""
        text = f"{type(error).__name__}: {error}"[:ERROR_TEXT_LIMIT]
        self.log.warning("proposer_failed", proposer=self.proposer.name, call=call,
                         error_type=type(error).__name__, error=redact(text, []),
                         fallback="classical" if call == "propose" else None)

    def _note_outcome(self, record: TrialRecord) -> None:
        """Count a finished proxy trial towards a run of failures with the same reason; at
        ``max_consecutive_failures`` stop launching: the campaign would only repeat them."""
        if record.kind != "proxy" or not record.trained:
            return
        if record.status == "complete":
            self._failure_run = []
            return
        if self._failure_run and self._failure_run[-1].reason != record.reason:
            self._failure_run = []
        self._failure_run.append(record)
        limit = self.settings.max_consecutive_failures
        if len(self._failure_run) >= limit and self.failing is None:
            self.failing = record.reason or "crash"
            log = record.artifacts.get("dir", f"{TRIALS_DIR}/{record.trial_id}") + "/trial.log"
            hint = failure_hint(self.failing, timeout_s=self.settings.trial_timeout_s, log=log,
                                preset=self.settings.preset)
            self.log.error("too_many_failures", trial_id=record.trial_id, count=limit,
                           reason=self.failing, message=record.message, hint=hint,
                           trials=[r.trial_id for r in self._failure_run[-limit:]])

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
        if any(r.trained for r in stress):
            return
        interrupted = [r for r in stress if r.status == "interrupted"]
        if len(interrupted) >= STRESS_ATTEMPTS:
            self.log.warning("stress_given_up", trial_id=finalist.trial_id,
                             attempts=len(interrupted))
            return
        steps = self.settings.stress_steps
        if not self._fits_window(deadline, steps):
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
        try:  # e.g. an LLM proposer's HTTP client and prefetch thread
            self.proposer.close()
        except Exception as error:
            self._proposer_failed("close", error)
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
        times = self._times()
        plan = self._window_plan(deadline, times) if deadline and times else None
        self.log.info("campaign_started", target=self.target.name, preset=self.settings.preset,
                      corpus=self.settings.corpus.source, params=self.baseline.param_count(),
                      iterations=self.settings.iterations,
                      deadline=deadline.isoformat() if deadline else None,
                      window=plan.describe() if plan else None,
                      device=f"{self.device.kind}:{self.device.name}",
                      executor=self.settings.executor, parallel=self.parallel,
                      db=self.store.index_name)
        log_priors(self.log, self.priors)
        self._warn_if_obviously_short(deadline)
        self._update_plan(deadline)
        if not stress_only:
            self._search(deadline)
        if not self.stops.stop and self.failing is None:
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
                      stopped_early=summary.stopped_early, failing=summary.failing)
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
            for record in self._poll_inflight():
                self._note_outcome(record)
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
            proxy_trials=len(search_trials(proxies)),
            rejected=sum(r.status == "rejected" for r in proxies),
            stress_runs=sum(r.trained for r in self._records("stress")),
            best=min(complete, key=lambda r: r.val_bpb or 0.0) if complete else None,
            stopped_early=stopped_early, noise=self._noise(),
            winner=name_winner(self.finalists(), proxies, self._noise()), failing=self.failing)
