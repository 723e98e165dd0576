"""The campaign loop: propose, check, train, record; then the ladder of fidelities.

:class:`Campaign` is the scheduler. It decides what runs next and when to stop; everything
it decides from is read from a :class:`~recipelab.trajectory.ledger.Ledger` of the records,
and its collaborators do the rest: :class:`~recipelab.agent.trials.TrialBook` launches,
polls and records trials, :class:`~recipelab.agent.deadline.Deadline` keeps the time window,
:class:`~recipelab.agent.failures.FailureStreak` stops a run of identical failures.

The agent is the only writer of the trajectory. Its state lives in the store, never only in
memory, so that ``recipelab run`` after any crash (or a kill -9) picks up where it stopped:
trials left running become ``interrupted`` and run once more, stress runs continue from
their checkpoints, and a completed trial is never run or recorded twice.

Phase 2 climbs in fidelity: seed re-runs settle close finalists, then the **ladder**
(:mod:`recipelab.trajectory.ladder`, successive halving by ``eta``) trains the best of each
rung for longer, the baseline beside them, up to the top rung at ``stress_steps`` where the
finalists and the baseline train at two seeds and the winner is named only outside the paired
interval (:meth:`Ledger.recommendation`). :meth:`Campaign.promote` lists the phases in order,
so a phase that needs the named winner goes after :meth:`Campaign._ladder`; it reads where the
evidence stands from :meth:`Ledger.top_rung`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console

from recipelab.agent.attribution_phase import AttributionPhase
from recipelab.agent.campaign_lock import CampaignLock
from recipelab.agent.campaign_tracking import CampaignTracking
from recipelab.agent.console_lines import console_output
from recipelab.agent.deadline import Deadline
from recipelab.agent.display import CampaignProgress
from recipelab.agent.failures import FailureStreak
from recipelab.agent.guard_context import guard_context
from recipelab.agent.live_report import LiveReport
from recipelab.agent.machine import Resolved, resolve
from recipelab.agent.person_edits import person_proposals
from recipelab.agent.priors import load_priors, log_priors
from recipelab.agent.proposer_choice import GuardedProposer, build_proposer
from recipelab.agent.records import as_measurement, as_observation, as_proposal, proposal_fields
from recipelab.agent.seeds import baseline_proposals, noise_marks, rerun_proposals
from recipelab.agent.settings import CampaignSettings
from recipelab.agent.signals import StopRequests
from recipelab.agent.trials import TRIALS_DIR, GuardrailMemory, TrialBook
from recipelab.eventlog import LogFormat, campaign_logger
from recipelab.guardrails import CHECKS, DeviceInfo, GuardContext, judge
from recipelab.guardrails.hardware import supported_precisions
from recipelab.guardrails.memory_fit import MemoryModel
from recipelab.guardrails.schema import parse_candidate
from recipelab.proposer import Observation, Proposal, Proposer, default_space
from recipelab.recipe import LLM_PROPOSER_PREFIX, Recipe
from recipelab.report import CloudRates, ReportContext, write_report
from recipelab.runner import Executor, build_executor
from recipelab.trajectory import TrajectoryStore
from recipelab.trajectory.attribution import recommendation_line, result_of
from recipelab.trajectory.horizon import HorizonRule, horizon_rule
from recipelab.trajectory.ladder import LR_FAMILY, describe_ladder
from recipelab.trajectory.ledger import LR_FAMILY_PROPOSER, Ledger, Winner
from recipelab.trajectory.noise import NoiseFloor
from recipelab.trajectory.record import TrialRecord, utc_now

PROXY_LOG_EVERY = 10
STRESS_ATTEMPTS = 5
"""Interruptions after which a stress (or rung) run is given up. Each attempt resumes from the last
checkpoint, so a run killed with its orchestrator loses little; one that keeps being
interrupted may itself be what brings the orchestrator down."""
POLL_INTERVAL_S = 0.02
STRESS_CURVE_POINTS = 20
"""A stress run logs at least this many curve points, whatever --stress-steps is, so its
verdict and the report's fit see a spike (the trial keeps every step's loss as well)."""


@dataclass(frozen=True)
class RungJob:
    """One run the ladder owes: ``candidate`` at a budget of ``steps`` of the baseline's
    steps and ``seed``, at ``lr_factor`` times its proxy learning rate (``family``: a
    learning-rate family multiple, or None), as a run of ``kind``."""

    candidate: TrialRecord
    steps: int
    seed: int
    lr_factor: float
    family: float | None = None
    kind: str = "rung"

    @property
    def folder(self) -> str:
        tag = f"-lr{self.family:g}" if self.family else ""
        return f"{self.kind}-{self.steps}-{self.candidate.trial_id}-s{self.seed}{tag}"

    def made(self, run: TrialRecord) -> bool:
        """Whether ``run`` is (an attempt at) this job."""
        return (run.kind == self.kind and run.parent == self.candidate.trial_id
                and run.budget_steps == self.steps
                and int(run.recipe.get("seed", 0)) == self.seed
                and run.edit.get("lr_family") == self.family)


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
    def __init__(self, settings: CampaignSettings | Resolved, directory: Path, *,
                 executor: Executor | None = None, proposer: Proposer | None = None,
                 device: DeviceInfo | None = None, console: Console | None = None,
                 log_format: LogFormat = "events") -> None:
        """``settings`` as :func:`~recipelab.agent.machine.resolve` left them (``recipelab
        run`` resolves them before its preflight), or raw settings, resolved here for
        ``executor`` (``device``: the one trials run on, when the caller knows it)."""
        if isinstance(settings, CampaignSettings):
            if executor is None and settings.executor.kind == "ray":
                executor = build_executor("ray", ray_address=settings.executor.ray_address)
            settings = resolve(settings, executor, device=device)
        executor = executor or settings.executor
        self.settings = settings.settings
        self.device = settings.device
        self.auto_notes = settings.notes
        self.directory = directory
        self._llm_down = False  # since the LLM's last fallback, until its next valid reply
        self.baseline = self.settings.baseline()
        self.target = self.settings.target_spec()
        self.executor = executor or build_executor(
            self.settings.executor.kind, ray_address=self.settings.executor.ray_address,
            parallel=self.settings.executor.trials_in_flight)
        self.space = default_space(self.baseline, self.settings.searchable, precisions=supported_precisions(
            self.baseline, self.target, self.device))
        self.priors = load_priors(self.settings.search.calibrate_from, self.space)
        self.proposer = proposer or build_proposer(self.settings, self.baseline, self.space,
                                                   self.target, self.priors.summary,
                                                   self.priors.observations)
        self.memory = GuardrailMemory.read()
        self.console = console or Console(stderr=True)
        self.log_format = log_format
        self.live_report: LiveReport | None = None  # from the start of the night's work
        self.progress = CampaignProgress(self.console, self.settings.window.iterations)
        self.stops = StopRequests()
        self._consecutive_rejections = 0

    # -- reading the records ------------------------------------------------------------------

    @property
    def memory_model(self) -> MemoryModel | None:
        return self.memory.model

    @property
    def ledger(self) -> Ledger:
        return self.book.ledger

    def _history(self) -> list[Observation]:
        return [as_observation(r) for r in self.ledger.proxies]

    def _context(self, exclude: str | None = None) -> GuardContext:
        ledger = self.ledger
        return guard_context(
            self.settings, self.baseline, self.device,
            memory=(self.memory.model, self.memory.problem),
            seen=ledger.proposed_fingerprints() - {exclude},
            measurements=(m for r in ledger.proxies if (m := as_measurement(r)) is not None))

    def summary(self, stopped_early: bool = False) -> CampaignSummary:
        ledger = self.ledger
        counts = ledger.counts()
        return CampaignSummary(
            proxy_trials=counts.trained, rejected=counts.rejected,
            stress_runs=counts.stress_trained, best=ledger.best, stopped_early=stopped_early,
            noise=ledger.noise, winner=ledger.winner, failing=self.failures.failing,
            rung_runs=counts.rung_trained, winner_line=ledger.winner_line(),
            recommendation_line=self._recommendation_line())

    def _recommendation_line(self) -> str:
        """The attribution's recommendation for the winner, once it has one."""
        winner = self.ledger.winner
        result = result_of(self.ledger.records, winner.record.trial_id) if winner else None
        return recommendation_line(result) if result is not None else ""

    # -- the search ---------------------------------------------------------------------------

    def _proxies_started(self) -> int:
        """Proxy trials spent from ``--iterations``: trained, and in flight."""
        return len(self.ledger.search_trials) + self.book.proxies_in_flight()

    def _search_budget_left(self) -> bool:
        """Whether another proxy trial may start (trials in flight count as spent)."""
        iterations = self.settings.window.iterations
        if iterations is not None and self._proxies_started() >= iterations:
            return False
        if (iterations is None and self.deadline.at is None) or self.failures.failing is not None:
            return False
        return self.deadline.search_may_launch(self.ledger.proxies)

    def _launchable(self) -> int:
        """How many more proxy trials may start now: free slots, within ``iterations``."""
        free = self.settings.executor.trials_in_flight - len(self.book.inflight)
        if self.settings.window.iterations is None:
            return free
        return min(free, self.settings.window.iterations - self._proxies_started())

    def _search(self) -> None:
        """Keep up to ``parallel`` proxy trials in flight until the budget is spent, then wait
        for the last ones. A stop signal ends launching; a second cancels what is in flight."""
        launching = True
        while True:
            for record in self.book.poll(cancel=self.stops.cancel):
                self.failures.note(record)
            if (launching and not self.stops.stop
                    and len(self.book.inflight) < self.settings.executor.trials_in_flight
                    and self._search_budget_left()):
                launching = self._launch_next()
                continue
            if not self.book.inflight:
                break
            time.sleep(POLL_INTERVAL_S)
        if self.stops.stop:
            self.log.info("stopped", reason="stop signal: the trials in flight were finished")

    def _launch_next(self) -> bool:
        """Start what comes next: a lost trial's one re-run, else fresh proposals for the free
        slots. False when the proposer has nothing more worth launching."""
        retries = self.ledger.pending_retries("proxy")
        if retries:
            self.log.info("requeued", trial_id=retries[0].trial_id)
            self._try(as_proposal(retries[0]), retry_of=retries[0])
            return True
        if self._consecutive_rejections >= self.settings.window.max_consecutive_rejections:
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

    def _propose(self, n: int) -> list[Proposal]:
        """The baseline's seeds first, then a person's ``--edit`` edits, then the proposer's
        proposals (parented on the baseline when they name no parent)."""
        search = self.settings.search
        seeds = baseline_proposals(self.baseline, self.ledger.proxies, search.noise_seeds, n)
        if seeds:
            return seeds
        baseline_id = self.ledger.baseline_id
        edits = person_proposals(self.baseline, baseline_id, self.ledger.proxies, search.edits, n)
        if edits:
            return edits
        return [dataclasses.replace(p, parent_id=baseline_id)
                if p.parent_id is None and baseline_id is not None else p
                for p in self.guarded.propose(self._history(), n)[:n]]

    def _try(self, proposal: Proposal, *, retry_of: TrialRecord | None = None) -> None:
        """Judge ``proposal``; record its rejection, or launch it (without waiting for it)."""
        iteration = self._proxies_started()
        trial_id = self.ledger.next_id("p")
        self.log.info("proposal", trial_id=trial_id, proposer=proposal.proposer,
                      edit=proposal.edit, hypothesis=proposal.hypothesis,
                      retry_of=retry_of.trial_id if retry_of else None)
        verdict = judge(self._at_proxy_budget(proposal.candidate),
                        self._context(exclude=retry_of.fingerprint if retry_of else None),
                        checks=[c for c in CHECKS if c not in self.settings.search.skip_checks])
        artifacts = self._save_artifacts(trial_id, proposal)
        record = TrialRecord(
            campaign=self.settings.name, trial_id=trial_id, iteration=iteration, kind="proxy",
            status="queued", retry_of=retry_of.trial_id if retry_of else None,
            recipe=verdict.recipe.model_dump(mode="json") if verdict.recipe else proposal.candidate,
            fingerprint=verdict.recipe.fingerprint() if verdict.recipe else None,
            budget=self.baseline.steps,
            artifacts=artifacts, **proposal_fields(proposal))
        if not verdict.accepted or verdict.recipe is None:
            self._consecutive_rejections += 1
            self.book.write(record.model_copy(update={
                "status": "rejected", "reasons": list(verdict.reasons), "finished_at": utc_now()}),
                say=partial(self.log.warning, "rejected", trial_id=trial_id,
                            proposer=proposal.proposer, edit=proposal.edit,
                            reasons=list(verdict.reasons)))
            return
        self._consecutive_rejections = 0
        self.book.launch(record, verdict.recipe, log_every=PROXY_LOG_EVERY,
                         timeout_s=self.settings.window.trial_timeout_s)
        self.guarded.prefetch(self._history())

    def _at_proxy_budget(self, candidate: Mapping[str, Any]) -> Mapping[str, Any] | Recipe:
        """The candidate trained for the baseline's tokens, in as many of its own steps as its
        batch allows; as given when it is no recipe (the schema check then says why)."""
        recipe, _ = parse_candidate(candidate)
        return candidate if recipe is None else recipe.at_tokens(self.baseline.tokens)

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
        self._note_llm_state(trial_id, proposal)
        return saved

    def _note_llm_state(self, trial_id: str, proposal: Proposal) -> None:
        """Log each fallback, and each change of the LLM's seat: ``llm_down`` at the first
        fallback after a valid reply, ``llm_up`` at its first valid reply after one."""
        if proposal.fallback is not None:
            self.log.warning("llm_fallback", trial_id=trial_id, cause=proposal.fallback,
                             proposer=proposal.proposer)
            if not self._llm_down:
                self.log.warning("llm_down", trial_id=trial_id, cause=proposal.fallback,
                                 hint="the sampler proposes; the LLM's turns keep asking it")
            self._llm_down = True
        elif proposal.proposer.startswith(LLM_PROPOSER_PREFIX) and self._llm_down:
            self.log.info("llm_up", trial_id=trial_id, proposer=proposal.proposer)
            self._llm_down = False

    # -- Phase 2: seed re-runs, then the ladder of fidelities ---------------------------------

    def promote(self) -> None:
        """Phase 2, in order: settle close finalists, then climb the ladder. A later phase
        (one that needs the named winner) goes after :meth:`_ladder` here."""
        self._settle_close_finalists()
        self._ladder()
        AttributionPhase(self).run()  # the winner is named: which parts of its edit carry the gain

    def _ladder(self) -> None:
        """Successive halving from the proxy to the top rung (:mod:`recipelab.trajectory.ladder`):
        each middle rung trains the best of the one below and the baseline; the top rung
        trains the ``promote`` finalists and the baseline at ``top_seeds`` seeds."""
        if self.settings.ladder.promote == 0:
            return
        proxy_steps = self.baseline.steps
        steps = self.settings.ladder.ladder_steps(proxy_steps)
        reason = self.settings.ladder.rung_skip_reason(proxy_steps)
        if reason is None and len(self.ledger.contenders) <= self.settings.ladder.promote:
            reason = (f"only {len(self.ledger.contenders)} candidate(s), not more than --promote "
                      f"{self.settings.ladder.promote}: the middle rungs would have nothing to choose")
            steps = steps[-1:]
        if reason is not None:
            self.log.info("rung_skipped", reason=reason)
        self._in_waves(self._family(proxy_steps, 1.0, self._rule()))  # the rule's first point
        plan = self.settings.ladder.planned_ladder(proxy_steps, len(self.ledger.contenders))
        self.log.info("ladder_planned", eta=self.settings.ladder.eta, rungs=steps,
                      ladder=describe_ladder(plan, proxy_steps, len(self.ledger.contenders)))
        for rung in steps[:-1]:
            if self.stops.stop:
                return
            self._climb(rung, top=False)
        if not self.stops.stop:
            self._climb(steps[-1], top=True)

    def _rule(self) -> HorizonRule:
        """The horizon rule from every record so far (the rungs below included)."""
        return horizon_rule(self.ledger.records, self.priors.calibration.horizon_fits)

    def _family(self, steps: int, factor: float, rule: HorizonRule) -> list[RungJob]:
        """The baseline at ``factor`` × its rate × {½, 2} at a budget of ``steps``: with its
        run at ``factor``, a controlled family for the horizon rule. Nothing once the rule is
        tight, or when the rule is off."""
        baseline = self.ledger.baseline
        if baseline is None or not self.settings.ladder.horizon_rule or rule.tight:
            return []
        return [RungJob(baseline, steps, self.settings.seed, factor * m, family=m)
                for m in LR_FAMILY]

    def _climb(self, steps: int, *, top: bool) -> None:
        """Train one rung: its climbers and the baseline at the rule's learning rate for
        ``steps`` of the baseline's tokens, and the baseline's learning-rate family."""
        ledger, baseline = self.ledger, self.ledger.baseline
        climbers = ledger.climbing_to(steps, top=top)
        rule = self._rule()
        factor = rule.factor(self.baseline.steps, steps) if self.settings.ladder.horizon_rule else 1.0
        seeds = self._top_seeds() if top else [self.settings.seed]
        kind = "stress" if top else "rung"
        family = self._family(steps, factor, rule)
        self.log.info("rung_started", steps=steps, tokens=steps * self.baseline.tokens_per_step,
                      top=top, seeds=seeds, climbers=[c.trial_id for c in climbers],
                      lr_factor=factor, rule=rule.describe(), rule_source=rule.source,
                      lr_family=bool(family))
        controls = [baseline] if baseline is not None else []
        jobs = [RungJob(c, steps, seed, factor, kind=kind)
                for c in [*controls, *climbers] for seed in seeds]
        if top:
            taken = {c.trial_id for c in climbers}
            jobs += [RungJob(c, steps, self.settings.seed, factor, kind=kind)
                     for c in ledger.stress_candidates[len(climbers):] if c.trial_id not in taken]
        self._in_waves([*jobs, *family])

    def _top_seeds(self) -> list[int]:
        """The top rung's seeds: the campaign's, then the baseline's other noise seeds, then
        the next integers, ``top_seeds`` in all."""
        seeds = [self.settings.seed]
        floor = self.ledger.noise
        for seed in [*(floor.seeds if floor else ()), *range(self.settings.seed + 1, 10**6)]:
            if len(seeds) >= self.settings.ladder.top_seeds:
                break
            if seed not in seeds:
                seeds.append(seed)
        return seeds

    def _in_waves(self, jobs: Sequence[RungJob]) -> None:
        """Start each job, up to ``parallel`` at a time; one lost while running is started
        again (it resumes from its checkpoint)."""
        queue = list(jobs)
        while True:
            for record in self.book.poll(cancel=self.stops.cancel):
                if record.status == "interrupted" and not self.stops.cancel:
                    queue += [j for j in jobs if j.made(record)]
            in_flight = self.settings.executor.trials_in_flight
            while queue and not self.stops.stop and len(self.book.inflight) < in_flight:
                self._run_job(queue.pop(0))
            if not self.book.inflight and (not queue or self.stops.stop):
                return
            time.sleep(POLL_INTERVAL_S)

    def _run_job(self, job: RungJob) -> None:
        kind = job.kind
        runs = [r for r in self.ledger.of_kind(kind) if job.made(r)]
        interrupted = self._longer_run_due(job.candidate, runs, kind, job.steps)
        if interrupted is None:
            return
        trial_id = self.ledger.next_id("s" if kind == "stress" else "r")
        lr = float(job.candidate.recipe["optimizer"]["lr"])
        # a resumed attempt keeps the rate its checkpoint was trained at
        lr_factor = (float(interrupted[0].recipe["optimizer"]["lr"]) / lr if interrupted
                     else job.lr_factor)
        self.log.info("promoted" if kind == "stress" else "rung_run", trial_id=trial_id,
                      parent=job.candidate.trial_id, steps=job.steps, seed=job.seed,
                      lr=lr * lr_factor, lr_factor=lr_factor, lr_family=job.family,
                      **noise_marks(job.candidate.val_bpb, self.ledger.noise,
                                    job.candidate.recipe.get("seed")))
        self._launch_longer(job, trial_id, interrupted, lr_factor=lr_factor,
                            log_every=min(self.settings.ladder.stress_log_every,
                                          max(1, job.steps // STRESS_CURVE_POINTS)))

    def _longer_run_due(self, candidate: TrialRecord, runs: Sequence[TrialRecord], kind: str,
                        steps: int) -> list[TrialRecord] | None:
        """The candidate's interrupted runs of ``kind`` when another is due; None (with an
        event when it is news) when one already trained, the attempts are spent, or it cannot
        finish before the deadline."""
        if any(r.trained for r in runs):
            return None
        interrupted = [r for r in runs if r.status == "interrupted"]
        if len(interrupted) >= STRESS_ATTEMPTS:
            self.log.warning(f"{kind}_given_up", trial_id=candidate.trial_id,
                             attempts=len(interrupted))
            return None
        if not self.deadline.fits(self.ledger.proxies, steps):
            self.log.info(f"{kind}_skipped", trial_id=candidate.trial_id,
                          reason="cannot finish before the campaign's deadline")
            return None
        return interrupted

    def _launch_longer(self, job: RungJob, trial_id: str, interrupted: Sequence[TrialRecord],
                       *, log_every: int, lr_factor: float) -> None:
        """Launch ``job``'s recipe for its budget's tokens and its seed, at ``lr_factor``
        times its learning rate, as a checkpointed run of its kind that resumes an interrupted
        one from its folder (``trials/<kind>-<steps>-<candidate id>-s<seed>[-lr<m>]``)."""
        candidate, kind = job.candidate, job.kind
        recipe = Recipe.model_validate(candidate.recipe)
        recipe = recipe.apply({"seed": job.seed, "optimizer.lr": recipe.optimizer.lr * lr_factor}
                              ).at_tokens(job.steps * self.baseline.tokens_per_step)
        edit = {**candidate.edit, **({"lr_family": job.family} if job.family else {})}
        record = TrialRecord(
            campaign=self.settings.name, trial_id=trial_id, iteration=candidate.iteration,
            kind=kind, status="queued", recipe=recipe.model_dump(mode="json"),
            fingerprint=recipe.fingerprint(), parent=candidate.trial_id, budget=job.steps,
            proposer=LR_FAMILY_PROPOSER if job.family else candidate.proposer,
            hypothesis=candidate.hypothesis, edit=edit,
            retry_of=interrupted[0].trial_id if interrupted else None)
        self.book.launch(
            record, recipe, log_every=log_every,
            checkpoint_every=self.settings.ladder.stress_checkpoint_every, resume=True,
            out_dir=self.directory / TRIALS_DIR / job.folder,
            timeout_s=self.settings.window.trial_timeout_s * max(1.0, job.steps / self.baseline.steps))

    def _settle_close_finalists(self) -> None:
        """Re-run with more seeds the finalists whose lead is within the noise floor, so the
        winner is named by its mean over seeds (see :mod:`recipelab.agent.seeds`)."""
        ledger = self.ledger
        for proposal in rerun_proposals(ledger.finalists, ledger.proxies, ledger.noise):
            while len(self.book.inflight) >= self.settings.executor.trials_in_flight:
                self.book.poll(cancel=self.stops.cancel)
                time.sleep(POLL_INTERVAL_S)
            if self.stops.stop or not self.deadline.fits(self.ledger.proxies):
                break
            self._try(proposal)
        while self.book.inflight:
            self.book.poll(cancel=self.stops.cancel)
            time.sleep(POLL_INTERVAL_S)

    # -- the whole campaign ------------------------------------------------------------------

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

    def _open(self) -> None:
        self.executor.prestart()  # e.g. import torch in the first worker while we set up
        self.store = TrajectoryStore(self.directory, self.settings.name, db_url=self.settings.store.db)
        self.log, self._sink = campaign_logger(
            self.settings.name, self.directory, self.console,
            console_output(self.log_format, colors=self.console.is_terminal))
        self.tracking = (CampaignTracking(self.settings, self.directory, self.log)
                         if self.settings.store.mlflow_uri else None)
        self.book = TrialBook(self.settings, self.directory, self.store, self.executor,
                              self.device, self.memory, self.log, on_change=self._show,
                              on_record=self._track)
        self.guarded = GuardedProposer(self.proposer, self.settings, self.baseline, self.space,
                                       self.priors.observations, self.log)
        self.failures = FailureStreak(self.settings, self.log)
        report = self.store.reconcile()
        for line in report.set_aside:
            self.log.warning("jsonl_line_set_aside", line=line, side_file=str(report.side_file))
        if report.rebuilt:
            self.log.warning("sqlite_rebuilt", reason="missing or corrupt; rebuilt from JSONL")
        for record in report.interrupted:
            self.log.warning("trial_interrupted", trial_id=record.trial_id, kind=record.kind)
        self._track(*self.ledger.records)  # trials ended before a resume, or never logged

    def _track(self, *records: TrialRecord) -> None:
        """Copy ended trials to MLflow when the campaign has ``--mlflow-uri``, and rewrite
        the live report."""
        if self.tracking is not None:
            self.tracking.record(records)
        if self.live_report is not None:
            self.live_report.trial_ended(self.ledger.records)

    def _report_context(self) -> ReportContext:
        return ReportContext(self.settings.name, self.target, self.settings.preset,
                             CloudRates.from_environment(),
                             tuple(self.priors.calibration.horizon_fits))

    def _ends(self) -> str:
        """When the night ends, for the live report."""
        window = self.settings.window
        if window.until is not None or window.hours is not None:
            at = self.deadline.at
            return f"the window closes at {at:%H:%M} UTC" if at is not None else "at the window's end"
        done = len(self.ledger.search_trials)
        return (f"after {window.iterations} proxy trials ({done} done), then the ladder"
                + (" and attribution" if self.settings.ladder.attribution else ""))

    def _close(self) -> None:
        if self.tracking is not None:
            self.tracking.close(stopped_early=self.stops.stop)
        self.guarded.close()
        self.executor.close()
        self.store.close()
        self._sink.close()

    def _show(self) -> None:
        best = self.ledger.best
        self.progress.update(len(self.ledger.search_trials), best.val_bpb if best else None,
                             self.book.running())

    def _run(self, stress_only: bool) -> CampaignSummary:
        self.deadline = Deadline(self.settings, self.settings.window.deadline(datetime.now(timezone.utc)),
                                 self.baseline.steps, self.log)
        self._consecutive_rejections = 0
        self.live_report = LiveReport(self.directory, self._report_context(), self.log,
                                      running=self.book.running, ends=self._ends)
        plan = self.deadline.initial_plan(self.ledger.proxies)
        self.log.info("campaign_started", target=self.target.name, preset=self.settings.preset,
                      corpus=self.settings.corpus.source, params=self.baseline.param_count(),
                      iterations=self.settings.window.iterations,
                      deadline=self.deadline.at.isoformat() if self.deadline.at else None,
                      window=plan.describe() if plan else None,
                      device=f"{self.device.kind}:{self.device.name}",
                      executor=self.executor.name, parallel=self.settings.executor.trials_in_flight,
                      precision=self.baseline.precision, db=self.store.index_name)
        for note in self.auto_notes:
            self.log.info("auto_resolved", what=note)
        log_priors(self.log, self.priors, self.baseline.precision)
        self.deadline.warn_if_obviously_short(self.ledger.proxies)
        self.deadline.update(self.ledger.proxies)
        if not stress_only:
            self._search()
        if not self.stops.stop and self.failures.failing is None:
            self.promote()
        summary = self.summary(stopped_early=self.stops.stop)
        counts = self.ledger.counts()
        self.log.info("campaign_finished", proxy_trials=summary.proxy_trials,
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
            write_report(self.directory, self.ledger.records, self._report_context())
        except Exception as error:
            self.log.warning("report_failed", error=f"{type(error).__name__}: {error}")
        return summary
