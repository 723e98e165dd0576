"""The width rung: after the ladder, its recommendation trained at two sizes, so the
export's prediction carries a measured size term (:mod:`recipelab.transfer.width`).

Both runs are what ``recipelab export`` would recommend (the minimal winning edit, else the
winner; the baseline when the top rung named no winner beyond the noise), moved by the
export's own rules (:func:`~recipelab.transfer.export.recommended_export`: Step Law's rate and
batch, the target's context) onto the target's family at the proxy's width and at twice it,
for the top rung's tokens, at :data:`~recipelab.trajectory.width_check.WIDTH_SEEDS` seeds from
the campaign's. Beside a winner, the baseline is exported the same way at both sizes (the
control): at twice the width it checks whether the gain held one size up
(:class:`~recipelab.trajectory.width_check.WidthCheck`), which can make the campaign keep the
baseline, and its two sizes are the baseline's own size term for its prediction. At the
campaign's seed the recommendation also trains at the rate × ½ and × 2 at both sizes
(:data:`~recipelab.trajectory.width_check.WIDTH_RATES`): each size's rate family, whose best
rates give the export its size exponent (:mod:`recipelab.transfer.size_exponent`). They are
trials of kind ``width`` (ids ``w0000``…, parent the recommendation, the control's the
baseline). Everything is read back from the records: after a crash only a missing run trains,
and a lost one resumes from its checkpoint folder. A night whose search trained nothing but
the baseline's seeds skips the rung: its wide run would be most of such a night's cost, for a
hand-off nobody asked the night to choose.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from recipelab.agent.campaign_context import POLL_INTERVAL_S, CampaignContext
from recipelab.agent.phases.width_cost import cost, seconds
from recipelab.agent.setup.window import measured_times
from recipelab.agent.trials import TRIALS_DIR
from recipelab.recipe import BASELINE_PROPOSER, Recipe, non_embedding_params
from recipelab.targets import Target, preset_target
from recipelab.trajectory.record import TrialRecord
from recipelab.trajectory.width_check import (
    CONTROL_ARM,
    WIDTH_KIND,
    WIDTH_MULTIPLE,
    WIDTH_RATES,
    WIDTH_SEEDS,
    rate_multiple,
    seed_of,
    width_check,
)
from recipelab.transfer.export import ExportOptions, recommended_export
from recipelab.transfer.size_exponent import measured_exponent, next_rate, rate_families
from recipelab.transfer.width import SizeGap, measured_gap, width_targets
from recipelab.units import GIB

ATTEMPTS = 5
"""Interruptions after which a width run is given up (each resumes from its checkpoint)."""
CURVE_POINTS = 20
WIDTH_PROPOSER = "width-rung"
NO_CANDIDATE = ("no candidate beside the baseline was trained, so there is nothing to hand off "
                "(more --iterations give the search its candidates); the export predicts the "
                "baseline with the law's size term")


@dataclass(frozen=True)
class WidthJob:
    """One run of the rung: ``parent``'s export at ``multiple`` × the proxy's width, at its
    recipe's seed and rate (``lr_family`` × the export's)."""

    parent: str
    multiple: int
    control: bool  # the baseline's run, beside the recommendation's at the same size
    recipe: Recipe
    lr_family: float = 1.0

    def trains(self, record: TrialRecord) -> bool:
        """Whether ``record`` is a run (or a lost try) of this job."""
        return (record.parent == self.parent and record.edit == self.edit
                and seed_of(record) == self.recipe.seed)

    @property
    def folder(self) -> str:
        """Its checkpoint folder, one per job: a lost run resumes there, and only there."""
        rate = f"-lr{self.lr_family:g}" if self.lr_family != 1.0 else ""
        return f"width-{self.multiple}x-{self.parent}-s{self.recipe.seed}{rate}"

    @property
    def edit(self) -> dict[str, object]:
        return {"width_multiple": self.multiple, **(CONTROL_ARM if self.control else {}),
                **({"lr_family": self.lr_family} if self.lr_family != 1.0 else {})}


class WidthPhase:
    """Runs one campaign's width rung (see the module)."""

    def run(self, ctx: CampaignContext) -> None:
        if not ctx.settings.ladder.width_rung:
            ctx.log.info("width_skipped", reason="turned off (--no-width-rung)")
            return
        chosen = ctx.ledger.ladder_recommended  # the campaign's own ledger: its --promote, its rungs
        if chosen is None:
            ctx.log.info("width_skipped", reason=f"nothing to measure: {ctx.ledger.no_winner_reason}")
            return
        if not any(r.proposer != BASELINE_PROPOSER for r in ctx.ledger.proxies):
            ctx.log.info("width_skipped", reason=NO_CANDIDATE)
            return
        recommended = chosen[0]
        recommended_id = recommended.trial_id
        if self._done(ctx, recommended_id):
            return
        target = preset_target(ctx.settings.preset, ctx.settings.target)
        jobs = self._jobs(ctx, recommended_id, target)
        if jobs is None:
            return
        seconds = self._seconds(ctx, [job.recipe for job in jobs])
        if seconds is not None and not ctx.deadline.fits_seconds(seconds):
            ctx.log.warning("width_skipped", trial_id=recommended_id,
                            reason=f"out of time: its runs need ~{seconds / 60:.0f} min "
                            "(a longer --hours/--until leaves room; the export then predicts "
                            "with the law's size term)")
            return
        ctx.log.info("width_started", trial_id=recommended_id, tokens=jobs[0].recipe.tokens,
                     sizes=[non_embedding_params(job.recipe.shape) for job in jobs
                            if not job.control and job.recipe.seed == ctx.settings.seed
                            and job.lr_family == 1.0],
                     seeds=WIDTH_SEEDS, context=jobs[0].recipe.seq_len)
        self._measure(ctx, recommended, jobs)
        self._extend_families(ctx, recommended)
        gap = self._gap(ctx.ledger.records, recommended_id)
        if gap is not None:
            lowering = gap.lowering(gap.narrow_params, non_embedding_params(target.shape))
            check = width_check(ctx.ledger.records, recommended_id)
            exponent = measured_exponent(ctx.ledger.records)
            ctx.log.info("width_measured", trial_id=recommended_id, narrow=gap.narrow_val_bpb,
                         wide=gap.wide_val_bpb, slope=gap.slope,
                         target_lowering=lowering if gap.measured else None,
                         baseline_wide=None if check is None else check.baseline_val_bpb,
                         gain_at_twice_width=None if check is None else check.gain,
                         gain_floor=None if check is None else check.floor,
                         baseline_kept=None if check is None else check.lost,
                         lr_size_exponent=None if exponent is None else exponent.value,
                         lr_size_exponent_se=None if exponent is None else exponent.se,
                         seeds=gap.seeds)

    @staticmethod
    def _gap(records: Sequence[TrialRecord], recommended_id: str) -> SizeGap | None:
        return measured_gap(records, recommended_id)

    @staticmethod
    def _control_id(ctx: CampaignContext, recommended_id: str) -> str | None:
        """The baseline trained as the control beside the recommendation; None without one,
        or when the recommendation is the baseline itself."""
        baseline_id = ctx.ledger.baseline_id
        return baseline_id if baseline_id != recommended_id else None

    def _done(self, ctx: CampaignContext, recommended_id: str) -> bool:
        """Whether the records hold the gap and, when there is a baseline to train, the
        check, each at every seed, and the rate families (a campaign resumed after its rung
        has nothing to do)."""
        records = ctx.ledger.records
        control_id = self._control_id(ctx, recommended_id)
        gaps = [self._gap(records, trial) for trial in (recommended_id, control_id) if trial]
        check = width_check(records, recommended_id)
        families = {(r.edit.get("width_multiple"), rate_multiple(r))
                    for r in ctx.ledger.of_kind(WIDTH_KIND)
                    if r.parent == recommended_id and r.trained and rate_multiple(r) != 1.0}
        return all(gap is not None and gap.seeds >= WIDTH_SEEDS for gap in gaps) and (
            control_id is None or (check is not None and check.seeds >= WIDTH_SEEDS)) and (
            len(families) >= 2 * len(WIDTH_RATES)) and not self._beyond_edges(ctx, recommended_id)

    def _jobs(self, ctx: CampaignContext, recommended_id: str, target: Target
              ) -> list[WidthJob] | None:
        """The export's recommendation on each of
        :func:`~recipelab.transfer.width.width_targets`, and beside a winner the baseline's
        too, at the top rung's tokens and each seed, and the recommendation's rate families at
        the campaign's seed, last; None when either cannot be exported."""
        tokens = ctx.settings.ladder.stress_steps * ctx.baseline.tokens_per_step
        control_id = self._control_id(ctx, recommended_id)
        narrow, wide = width_targets(ctx.baseline.shape, target)
        arms: list[tuple[int, Target, str | None]] = [(1, narrow, None), (WIDTH_MULTIPLE, wide, None)]
        if control_id is not None:  # the baseline's own gap, for its prediction as well
            arms += [(1, narrow, control_id), (WIDTH_MULTIPLE, wide, control_id)]
        jobs = []
        for multiple, size, trial in arms:
            params = ctx.baseline.model_copy(update={"shape": size.shape,
                                                     "seq_len": size.context}).param_count()
            options = ExportOptions(tokens_per_param=tokens / params, gpus=1,
                                    eval_bytes=max(256, ctx.baseline.eval_bytes),
                                    gpu_memory_gib=ctx.device.memory_bytes / GIB,
                                    device=ctx.device.kind)
            found = recommended_export(ctx.ledger, size, options, trial=trial, ladder=True)
            if found is None:
                return None
            if found.exported.memory_problem is not None:
                ctx.log.warning("width_skipped", trial_id=found.winner.trial_id,
                                reason=f"{size.name} does not fit: {found.exported.memory_problem}")
                return None
            for seed in range(ctx.settings.seed, ctx.settings.seed + WIDTH_SEEDS):
                recipe = found.exported.recipe.apply({"seed": seed}).at_tokens(tokens)
                jobs.append(WidthJob(trial or recommended_id, multiple, trial is not None,
                                     recipe))  # at_tokens exactly: the law rounds
                if trial is None and seed == ctx.settings.seed:
                    lr = recipe.optimizer.lr
                    jobs += [WidthJob(recommended_id, multiple, False,
                                      recipe.apply({"optimizer.lr": lr * m}), m)
                             for m in WIDTH_RATES]
        # the campaign's seed first, the rate families after the check's runs
        jobs.sort(key=lambda job: (job.lr_family != 1.0, job.recipe.seed))
        return jobs

    @staticmethod
    def _beyond_edges(ctx: CampaignContext, recommended_id: str) -> list[WidthJob]:
        """For each width whose rate family places its best at its edge, the run one step
        beyond it (:func:`~recipelab.transfer.size_exponent.next_rate`), at the campaign's
        seed; none before the family's first rates trained."""
        jobs = []
        for runs in rate_families(ctx.ledger.records, recommended_id).values():
            base = next((r for r in runs if rate_multiple(r) == 1.0
                         and seed_of(r) == ctx.settings.seed), None)
            step = next_rate(runs)
            if base is None or step is None or all(rate_multiple(r) == 1.0 for r in runs):
                continue
            recipe = Recipe.model_validate(base.recipe)
            jobs.append(WidthJob(recommended_id, int(base.edit["width_multiple"]), False,
                                 recipe.apply({"optimizer.lr": recipe.optimizer.lr * step}), step))
        return jobs

    def _extend_families(self, ctx: CampaignContext, recommended: TrialRecord) -> None:
        """Train the runs beyond the families' edges until both place their best inside, reach
        the limit, or run out of time."""
        while not ctx.stops.stop and (jobs := self._beyond_edges(ctx, recommended.trial_id)):
            seconds = self._seconds(ctx, [job.recipe for job in jobs])
            if seconds is not None and not ctx.deadline.fits_seconds(seconds):
                ctx.log.warning("width_family_cut", trial_id=recommended.trial_id,
                                reason=f"out of time: the runs beyond the rate families' edge "
                                f"need ~{seconds / 60:.0f} min; the exponent is read from "
                                "the families as they are")
                return
            self._measure(ctx, recommended, jobs)
            runs = ctx.ledger.of_kind(WIDTH_KIND)
            if not all(any(job.trains(r) and r.trained for r in runs) for job in jobs):
                return  # stopped, or a run given up: the next campaign resumes it

    def _seconds(self, ctx: CampaignContext, recipes: Sequence[Recipe]) -> float | None:
        """The runs' expected seconds; None before a proxy was timed."""
        times = measured_times(ctx.ledger.proxies)
        return None if times is None else seconds(times, ctx.baseline, recipes)

    def _measure(self, ctx: CampaignContext, recommended: TrialRecord,
                 jobs: Sequence[WidthJob]) -> None:
        """Train each run not yet trained, one lost resumed from its folder, until all are."""
        running: set[str] = set()
        while True:
            for record in ctx.book.poll(cancel=ctx.stops.cancel):
                running.discard(record.trial_id)
            for job in jobs:
                if ctx.stops.stop or len(ctx.book.inflight) >= ctx.parallel:
                    break
                runs = [r for r in ctx.ledger.of_kind(WIDTH_KIND) if job.trains(r)]
                if any(r.trained for r in runs) or any(r.trial_id in running for r in runs):
                    continue
                lost = [r for r in runs if r.status == "interrupted"]
                if len(lost) >= ATTEMPTS:
                    ctx.log.warning("width_given_up", trial_id=job.parent, attempts=len(lost))
                    return
                running.add(self._launch(ctx, recommended, job, lost))
            if not ctx.book.inflight and (ctx.stops.stop or not running):
                return
            time.sleep(POLL_INTERVAL_S)

    @staticmethod
    def _launch(ctx: CampaignContext, recommended: TrialRecord, job: WidthJob,
                lost: Sequence[TrialRecord]) -> str:
        trial_id = ctx.ledger.next_id("w")
        recipe = job.recipe
        what = ("the baseline" if job.control else "the recommendation")
        why = (f"the control for {recommended.trial_id}'s gain one size up" if job.control
               else "the size term's measurement" if job.lr_family == 1.0
               else f"its rate family, at lr × {job.lr_family:g}, for the rate's size exponent")
        record = TrialRecord(
            campaign=ctx.settings.name, trial_id=trial_id, iteration=recommended.iteration,
            kind=WIDTH_KIND, status="queued", recipe=recipe.model_dump(mode="json"),
            fingerprint=recipe.fingerprint(), parent=job.parent,
            budget=ctx.settings.ladder.stress_steps, proposer=WIDTH_PROPOSER, edit=job.edit,
            hypothesis=(f"{what} at {job.multiple}× the proxy's width, by the export's rules at "
                        f"the top rung's tokens: {why}"),
            retry_of=lost[-1].trial_id if lost else None)
        ctx.book.launch(record, recipe, log_every=max(1, recipe.steps // CURVE_POINTS),
                        checkpoint_every=ctx.settings.ladder.stress_checkpoint_every, resume=True,
                        out_dir=ctx.directory / TRIALS_DIR / job.folder,
                        timeout_s=ctx.settings.window.trial_timeout_s
                        * max(1.0, cost(recipe, ctx.baseline)))
        return trial_id
