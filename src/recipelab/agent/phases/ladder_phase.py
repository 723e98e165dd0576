"""The ladder of fidelities: seed re-runs settle close finalists, then successive halving
climbs from the proxy to the top rung.

Before the first middle rung, the candidates it chooses from train again at the proxy's
steps at a lower and a higher rate (*probes*,
:func:`~recipelab.trajectory.horizon.probe_multiples`), so a recipe whose rate suits the long
run is not culled for starting slowly, nor one whose rate is too hot already there; a climber
that ranked by a probe carries its multiple of the rule's rate up the ladder. Each middle rung
(:mod:`recipelab.trajectory.ladder`, by ``eta``) trains the best of the one below and the
baseline beside them, for ``steps`` of the baseline's tokens at the horizon
rule's learning rate; the top rung, at ``stress_steps``, trains the ``promote`` finalists
and the baseline, each with its learning-rate family, at ``top_seeds`` fresh seeds
(:func:`~recipelab.trajectory.ladder.top_rung_seeds`), so the winner, at its best rate, is
named only outside its paired interval over the tuned baseline
(:meth:`~recipelab.trajectory.ledger.Ledger.verdict`). A close call there (the best
finalist's mean gain positive, its interval including 0) buys it and the control
``close_call_seeds`` more seeds before the campaign keeps the baseline
(:func:`~recipelab.trajectory.verdict.close_call_target`: a pure function of the records, so a
resumed campaign buys the same runs). The baseline's learning-rate
family at each rung is the controlled evidence the horizon rule is fitted from. Every run is
checkpointed: one lost with its orchestrator resumes from its folder.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from recipelab.agent.campaign_context import POLL_INTERVAL_S, CampaignContext
from recipelab.agent.phases.proxy_trials import ProxyTrials
from recipelab.agent.phases.seeds import noise_marks, rerun_proposals
from recipelab.agent.trials import TRIALS_DIR
from recipelab.recipe import Recipe
from recipelab.trajectory.horizon import HorizonFit, HorizonRule, horizon_rule, probe_multiples
from recipelab.trajectory.ladder import LR_FAMILY, describe_ladder, probed, top_rung_seeds
from recipelab.trajectory.ledger import LR_FAMILY_PROPOSER
from recipelab.trajectory.record import TrialRecord
from recipelab.trajectory.verdict import close_call_target

STRESS_ATTEMPTS = 5
"""Interruptions after which a stress (or rung) run is given up. Each attempt resumes from the last
checkpoint, so a run killed with its orchestrator loses little; one that keeps being
interrupted may itself be what brings the orchestrator down."""
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


class LadderPhase:
    """Settles close finalists, then climbs the ladder (see the module)."""

    def __init__(self, proxies: ProxyTrials, horizon_fits: Sequence[HorizonFit] = ()) -> None:
        """``proxies`` launches the seed re-runs; ``horizon_fits`` are the calibration's
        controlled fits, which the horizon rule starts from."""
        self.proxies = proxies
        self.horizon_fits = tuple(horizon_fits)

    def run(self, ctx: CampaignContext) -> None:
        self._settle_close_finalists(ctx)
        self._ladder(ctx)

    def _settle_close_finalists(self, ctx: CampaignContext) -> None:
        """Re-run with more seeds the finalists whose lead is within the noise floor, so the
        winner is named by its mean over seeds (see :mod:`recipelab.agent.phases.seeds`)."""
        ledger = ctx.ledger
        for proposal in rerun_proposals(ledger.proxy_finalists, ledger.proxies, ledger.noise):
            while len(ctx.book.inflight) >= ctx.parallel:
                ctx.book.poll(cancel=ctx.stops.cancel)
                time.sleep(POLL_INTERVAL_S)
            if ctx.stops.stop or not ctx.deadline.fits(ctx.ledger.proxies):
                break
            self.proxies.try_(ctx, proposal)
        while ctx.book.inflight:
            ctx.book.poll(cancel=ctx.stops.cancel)
            time.sleep(POLL_INTERVAL_S)

    def _ladder(self, ctx: CampaignContext) -> None:
        """Successive halving from the proxy to the top rung (:mod:`recipelab.trajectory.ladder`):
        each middle rung trains the best of the one below and the baseline; the top rung
        trains the ``promote`` finalists and the baseline at ``top_seeds`` seeds."""
        if ctx.settings.ladder.promote == 0:
            return
        proxy_steps = ctx.baseline.steps
        steps = ctx.settings.ladder.ladder_steps(proxy_steps)
        reason = ctx.settings.ladder.rung_skip_reason(proxy_steps)
        if reason is None and len(ctx.ledger.contenders) <= ctx.settings.ladder.promote:
            reason = (f"only {len(ctx.ledger.contenders)} candidate(s), not more than --promote "
                      f"{ctx.settings.ladder.promote}: the middle rungs would have nothing to choose")
            steps = steps[-1:]
        if reason is not None:
            ctx.log.info("rung_skipped", reason=reason)
        # the baseline's family at the proxy's steps: the horizon rule's first point
        self._in_waves(ctx, self._family(ctx, proxy_steps, 1.0, self._rule(ctx)))
        if reason is None:
            self._in_waves(ctx, self._probes(ctx, proxy_steps))
        plan = ctx.settings.ladder.planned_ladder(proxy_steps, len(ctx.ledger.contenders))
        ctx.log.info("ladder_planned", eta=ctx.settings.ladder.eta, rungs=steps,
                     ladder=describe_ladder(plan, proxy_steps, len(ctx.ledger.contenders)))
        for rung in steps[:-1]:
            if ctx.stops.stop:
                return
            self._climb(ctx, rung, top=False)
        if not ctx.stops.stop:
            self._climb(ctx, steps[-1], top=True)
        if not ctx.stops.stop:
            self._settle_close_call(ctx, steps[-1])

    def _rule(self, ctx: CampaignContext) -> HorizonRule:
        """The horizon rule from every record so far (the rungs below included)."""
        return horizon_rule(ctx.ledger.records, self.horizon_fits)

    def _family(self, ctx: CampaignContext, steps: int, factor: float,
                rule: HorizonRule, seeds: Sequence[int] | None = None) -> list[RungJob]:
        """The baseline at ``factor`` × its rate × {½, 2} at a budget of ``steps``: with its
        run at ``factor``, a controlled family for the horizon rule. Below the top rung, at
        the campaign's seed, and nothing once the rule is tight or when it is off; at the top
        rung (``seeds`` given) always, at each seed: it is the tuned control the verdict's
        gains are measured against."""
        baseline = ctx.ledger.baseline
        if baseline is None:
            return []
        if seeds is None:
            if not ctx.settings.ladder.horizon_rule or rule.tight:
                return []
            seeds = [ctx.settings.seed]
        return [RungJob(baseline, steps, seed, factor * m, family=m)
                for seed in seeds for m in LR_FAMILY]

    def _probes(self, ctx: CampaignContext, proxy_steps: int) -> list[RungJob]:
        """The best :func:`~recipelab.trajectory.ladder.probed` contenders at each of
        :func:`~recipelab.trajectory.horizon.probe_multiples` × their rate, for the proxy's
        steps at their own seed; nothing when the horizon rule is off (every rung then trains
        the proxy's rate)."""
        ladder = ctx.settings.ladder
        if not ladder.horizon_rule:
            return []
        pool = ctx.ledger.contenders
        n = probed(len(pool), ladder.eta, ladder.promote, ladder.rung_size)
        multiples = probe_multiples(proxy_steps, ladder.stress_steps)
        if n:
            ctx.log.info("probes_started", steps=proxy_steps, lr_multiple=multiples[-1],
                         lr_multiples=list(multiples), candidates=[c.trial_id for c in pool[:n]])
        return [RungJob(c, proxy_steps, int(c.recipe.get("seed", ctx.settings.seed)), m,
                        family=m) for c in pool[:n] for m in multiples]

    def _climb(self, ctx: CampaignContext, steps: int, *, top: bool) -> None:
        """Train one rung: its climbers and the baseline at the rule's learning rate for
        ``steps`` of the baseline's tokens (a climber that ranked by its probe at the probe's
        multiple of it, :meth:`_carried`), and the baseline's learning-rate family."""
        ledger, baseline = ctx.ledger, ctx.ledger.baseline
        climbers = ledger.climbing_to(steps, top=top)
        rule = self._rule(ctx)
        factor = rule.factor(ctx.baseline.steps, steps) if ctx.settings.ladder.horizon_rule else 1.0
        seeds = self._top_seeds(ctx) if top else [ctx.settings.seed]
        kind = "stress" if top else "rung"
        family = self._family(ctx, steps, factor, rule, seeds if top else None)
        if top:  # each finalist competes at its best rate, as the control does
            family += [RungJob(c, steps, seed, factor * self._carried(ctx, c) * m, family=m)
                       for c in climbers for seed in seeds for m in LR_FAMILY]
        ctx.log.info("rung_started", steps=steps, tokens=steps * ctx.baseline.tokens_per_step,
                     top=top, seeds=seeds, climbers=[c.trial_id for c in climbers],
                     lr_factor=factor, rule=rule.describe(), rule_source=rule.source,
                     lr_family=bool(family),
                     carried={c.trial_id: m for c in climbers if (m := self._carried(ctx, c)) != 1})
        controls = [baseline] if baseline is not None else []
        jobs = [RungJob(c, steps, seed, factor * self._carried(ctx, c), kind=kind)
                for c in [*controls, *climbers] for seed in seeds]
        if top:
            taken = {c.trial_id for c in climbers}
            jobs += [RungJob(c, steps, ctx.settings.seed, factor * self._carried(ctx, c),
                             kind=kind)
                     for c in ledger.top_rung_climbers[len(climbers):] if c.trial_id not in taken]
        self._in_waves(ctx, [*jobs, *family])
        if top and family:
            self._follow_best_rates(ctx, steps, factor, seeds, [*controls, *climbers])

    @staticmethod
    def _carried(ctx: CampaignContext, candidate: TrialRecord) -> float:
        """The multiple of the rule's rate ``candidate`` climbs at: its probe's (one of
        :func:`~recipelab.trajectory.horizon.probe_multiples`) when a probe ranked it (its
        best at the proxy's steps was there, so that is the rate the rule carries), else 1.
        The baseline, the control, always trains at the rule's rate (its family tunes it)."""
        baseline = ctx.ledger.baseline
        if baseline is not None and candidate.trial_id == baseline.trial_id:
            return 1.0
        return ctx.ledger.at_proxy_steps(candidate)[1]

    def _follow_best_rates(self, ctx: CampaignContext, steps: int, factor: float,
                           seeds: Sequence[int], recipes: Sequence[TrialRecord]) -> None:
        """Each recipe whose top-rung family is best at its lowest or highest rate trains the
        next rate beyond it (:meth:`~recipelab.trajectory.verdict.Control.next_rate`) at
        the top seeds, until every best lies inside its family or at its reach: a control
        tuned only as far as its family reaches is not tuned. Each rate is asked for once."""
        asked: set[tuple[str, float]] = set()
        while not ctx.stops.stop:
            wanted = [(r, m) for r in recipes
                      if (m := ctx.ledger.tuned(r, steps).next_rate()) is not None
                      and (r.trial_id, m) not in asked]
            if not wanted:
                return
            asked.update((r.trial_id, m) for r, m in wanted)
            ctx.log.info("lr_family_extended", steps=steps,
                         rates={r.trial_id: m for r, m in wanted})
            self._in_waves(ctx, [RungJob(r, steps, seed, factor * self._carried(ctx, r) * m,
                                         family=m)
                                 for r, m in wanted for seed in seeds])

    def _settle_close_call(self, ctx: CampaignContext, steps: int) -> None:
        """While :func:`~recipelab.trajectory.verdict.close_call_target` names a finalist,
        train it and the control at ``close_call_seeds`` more seeds there, each at the best
        rate of its own top-rung family (so every seed of a pair trains alike)."""
        extra = ctx.settings.ladder.close_call_seeds
        bought: set[str] = set()
        while not ctx.stops.stop:
            target = close_call_target(ctx.ledger, bought, extra)
            baseline = ctx.ledger.baseline
            if target is None or baseline is None:
                return
            best, multiple, control = target
            bought.add(best.trial_id)
            seeds = self._top_seeds(ctx, ctx.settings.ladder.top_seeds + extra)
            seeds = seeds[ctx.settings.ladder.top_seeds:]
            verdict = ctx.ledger.verdict()
            assert verdict is not None and verdict.gain is not None
            ctx.log.info("close_call", trial_id=best.trial_id, steps=steps, seeds=seeds,
                         lr_factor=multiple, control_lr_factor=control,
                         gain=round(verdict.gain.value, 6), gain_low=round(verdict.gain.low, 6),
                         gain_high=round(verdict.gain.high, 6))
            self._in_waves(ctx, [self._at_best_rate(ctx, who, steps, seed, m)
                                 for who, m in ((best, multiple), (baseline, control))
                                 for seed in seeds])

    def _at_best_rate(self, ctx: CampaignContext, candidate: TrialRecord, steps: int, seed: int,
                      multiple: float) -> RungJob:
        """``candidate``'s run at ``seed`` at ``multiple`` × the rate of its top-rung runs: a
        family run, or its own rate's."""
        factor = self._top_factor(ctx, candidate, steps) * multiple
        if multiple == 1.0:
            return RungJob(candidate, steps, seed, factor, kind="stress")
        return RungJob(candidate, steps, seed, factor, family=multiple)

    @staticmethod
    def _top_factor(ctx: CampaignContext, candidate: TrialRecord, steps: int) -> float:
        """The multiple of its proxy rate ``candidate`` trained at on the top rung."""
        run = ctx.ledger.runs_at(candidate.trial_id, steps)[0]
        return float(run.recipe["optimizer"]["lr"]) / float(candidate.recipe["optimizer"]["lr"])

    def _top_seeds(self, ctx: CampaignContext, count: int | None = None) -> list[int]:
        """The top rung's seeds (:func:`~recipelab.trajectory.ladder.top_rung_seeds`):
        ``count`` fresh ones (``top_seeds`` by default), none a proxy trial trained at."""
        count = ctx.settings.ladder.top_seeds if count is None else count
        used = {int(r.recipe.get("seed", ctx.settings.seed)) for r in ctx.ledger.proxies}
        return top_rung_seeds(ctx.settings.seed, used, count)

    def _in_waves(self, ctx: CampaignContext, jobs: Sequence[RungJob]) -> None:
        """Start each job, up to ``parallel`` at a time; one lost while running is started
        again (it resumes from its checkpoint)."""
        queue = list(jobs)
        while True:
            for record in ctx.book.poll(cancel=ctx.stops.cancel):
                if record.status == "interrupted" and not ctx.stops.cancel:
                    queue += [j for j in jobs if j.made(record)]
            in_flight = ctx.parallel
            while queue and not ctx.stops.stop and len(ctx.book.inflight) < in_flight:
                self._run_job(ctx, queue.pop(0))
            if not ctx.book.inflight and (not queue or ctx.stops.stop):
                return
            time.sleep(POLL_INTERVAL_S)

    def _run_job(self, ctx: CampaignContext, job: RungJob) -> None:
        kind = job.kind
        runs = [r for r in ctx.ledger.of_kind(kind) if job.made(r)]
        interrupted = self._longer_run_due(ctx, job.candidate, runs, kind, job.steps)
        if interrupted is None:
            return
        trial_id = ctx.ledger.next_id("s" if kind == "stress" else "r")
        lr = float(job.candidate.recipe["optimizer"]["lr"])
        # a resumed attempt keeps the rate its checkpoint was trained at
        lr_factor = (float(interrupted[0].recipe["optimizer"]["lr"]) / lr if interrupted
                     else job.lr_factor)
        ctx.log.info("promoted" if kind == "stress" else "rung_run", trial_id=trial_id,
                     parent=job.candidate.trial_id, steps=job.steps, seed=job.seed,
                     lr=lr * lr_factor, lr_factor=lr_factor, lr_family=job.family,
                     **noise_marks(job.candidate.val_bpb, ctx.ledger.noise,
                                   job.candidate.recipe.get("seed")))
        self._launch_longer(ctx, job, trial_id, interrupted, lr_factor=lr_factor,
                            log_every=min(ctx.settings.ladder.stress_log_every,
                                          max(1, job.steps // STRESS_CURVE_POINTS)))

    def _longer_run_due(self, ctx: CampaignContext, candidate: TrialRecord,
                        runs: Sequence[TrialRecord], kind: str, steps: int
                        ) -> list[TrialRecord] | None:
        """The candidate's interrupted runs of ``kind`` when another is due; None (with an
        event when it is news) when one already trained, the attempts are spent, or it cannot
        finish before the deadline."""
        if any(r.trained for r in runs):
            return None
        interrupted = [r for r in runs if r.status == "interrupted"]
        if len(interrupted) >= STRESS_ATTEMPTS:
            ctx.log.warning(f"{kind}_given_up", trial_id=candidate.trial_id,
                            attempts=len(interrupted))
            return None
        if not ctx.deadline.fits(ctx.ledger.proxies, steps):
            ctx.log.info(f"{kind}_skipped", trial_id=candidate.trial_id,
                         reason="cannot finish before the campaign's deadline")
            return None
        return interrupted

    def _launch_longer(self, ctx: CampaignContext, job: RungJob, trial_id: str,
                       interrupted: Sequence[TrialRecord], *, log_every: int,
                       lr_factor: float) -> None:
        """Launch ``job``'s recipe for its budget's tokens and its seed, at ``lr_factor``
        times its learning rate, as a checkpointed run of its kind that resumes an interrupted
        one from its folder (``trials/<kind>-<steps>-<candidate id>-s<seed>[-lr<m>]``)."""
        candidate, kind = job.candidate, job.kind
        recipe = Recipe.model_validate(candidate.recipe)
        recipe = recipe.apply({"seed": job.seed, "optimizer.lr": recipe.optimizer.lr * lr_factor}
                              ).at_tokens(job.steps * ctx.baseline.tokens_per_step)
        edit = {**candidate.edit, **({"lr_family": job.family} if job.family else {})}
        record = TrialRecord(
            campaign=ctx.settings.name, trial_id=trial_id, iteration=candidate.iteration,
            kind=kind, status="queued", recipe=recipe.model_dump(mode="json"),
            fingerprint=recipe.fingerprint(), parent=candidate.trial_id, budget=job.steps,
            proposer=LR_FAMILY_PROPOSER if job.family else candidate.proposer,
            hypothesis=candidate.hypothesis, edit=edit,
            retry_of=interrupted[0].trial_id if interrupted else None)
        ctx.book.launch(
            record, recipe, log_every=log_every,
            checkpoint_every=ctx.settings.ladder.stress_checkpoint_every, resume=True,
            out_dir=ctx.directory / TRIALS_DIR / job.folder,
            timeout_s=ctx.settings.window.trial_timeout_s * max(1.0, job.steps / ctx.baseline.steps))
