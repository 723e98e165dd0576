"""The width rung: after the winner is named, its recommendation trained at two sizes, so
the export's prediction carries a measured size term (:mod:`recipelab.report.width`).

Both runs are what ``recipelab export`` would recommend (the minimal winning edit, else the
winner), moved by the export's own rules (:func:`~recipelab.report.export.recommended_export`:
Step Law's rate and batch, the target's context) onto the target's family at the proxy's width
and at twice it, for the top rung's tokens, at the campaign's seed. They are trials of kind
``width`` (ids ``w0000``…, parent the winner). Everything is read back from the records: after
a crash only a missing run trains, and a lost one resumes from its checkpoint folder.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from recipelab.agent.campaign_context import POLL_INTERVAL_S, CampaignContext
from recipelab.agent.trials import TRIALS_DIR
from recipelab.agent.width_cost import cost, seconds
from recipelab.agent.window import measured_times
from recipelab.recipe import Recipe, Target, preset_target
from recipelab.report.export import ExportOptions, recommended_export
from recipelab.report.steplaw import non_embedding_params
from recipelab.report.width import (
    WIDTH_KIND,
    WIDTH_MULTIPLE,
    SizeGap,
    measured_gap,
    width_targets,
)
from recipelab.trajectory.record import TrialRecord
from recipelab.units import GIB

ATTEMPTS = 5
"""Interruptions after which a width run is given up (each resumes from its checkpoint)."""
CURVE_POINTS = 20
WIDTH_PROPOSER = "width-rung"


class WidthPhase:
    """Runs one campaign's width rung (see the module)."""

    def run(self, ctx: CampaignContext) -> None:
        if not ctx.settings.ladder.width_rung:
            ctx.log.info("width_skipped", reason="turned off (--no-width-rung)")
            return
        winner = ctx.ledger.winner
        if winner is None:
            ctx.log.info("width_skipped", reason="no winner to measure")
            return
        winner_id = winner.record.trial_id
        if self._gap(ctx.ledger.records, winner_id) is not None:
            return
        target = preset_target(ctx.settings.preset, ctx.settings.target)
        jobs = self._jobs(ctx, target)
        if jobs is None:
            return
        seconds = self._seconds(ctx, [recipe for _, recipe in jobs])
        if seconds is not None and not ctx.deadline.fits_seconds(seconds):
            ctx.log.warning("width_skipped", trial_id=winner_id,
                            reason=f"out of time: its two runs need ~{seconds / 60:.0f} min "
                            "(a longer --hours/--until leaves room; the export then predicts "
                            "with the law's size term)")
            return
        ctx.log.info("width_started", trial_id=winner_id, tokens=jobs[0][1].tokens,
                     sizes=[non_embedding_params(recipe.shape) for _, recipe in jobs],
                     context=jobs[0][1].seq_len)
        self._measure(ctx, winner.record, jobs)
        gap = self._gap(ctx.ledger.records, winner_id)
        if gap is not None:
            lowering = gap.lowering(gap.narrow_params, non_embedding_params(target.shape))
            ctx.log.info("width_measured", trial_id=winner_id, narrow=gap.narrow_val_bpb,
                         wide=gap.wide_val_bpb, slope=gap.slope,
                         target_lowering=lowering if gap.measured else None)

    @staticmethod
    def _gap(records: Sequence[TrialRecord], winner_id: str) -> SizeGap | None:
        return measured_gap([r for r in records if r.parent == winner_id])

    def _jobs(self, ctx: CampaignContext, target: Target) -> list[tuple[int, Recipe]] | None:
        """(width multiple, recipe) of each run: the export's recommendation on each of
        :func:`~recipelab.report.width.width_targets` at the top rung's tokens."""
        tokens = ctx.settings.ladder.stress_steps * ctx.baseline.tokens_per_step
        jobs = []
        for multiple, size in zip((1, WIDTH_MULTIPLE), width_targets(ctx.baseline.shape, target),
                                  strict=True):
            params = ctx.baseline.model_copy(update={"shape": size.shape,
                                                     "seq_len": size.context}).param_count()
            options = ExportOptions(tokens_per_param=tokens / params, gpus=1,
                                    eval_bytes=max(256, ctx.baseline.eval_bytes),
                                    gpu_memory_gib=ctx.device.memory_bytes / GIB,
                                    device=ctx.device.kind)
            found = recommended_export(ctx.ledger.records, size, options)
            if found is None:
                return None
            if found.exported.memory_problem is not None:
                ctx.log.warning("width_skipped", trial_id=found.winner.trial_id,
                                reason=f"{size.name} does not fit: {found.exported.memory_problem}")
                return None
            recipe = found.exported.recipe.apply({"seed": ctx.settings.seed})
            jobs.append((multiple, recipe.at_tokens(tokens)))  # exactly: the law rounds
        return jobs

    def _seconds(self, ctx: CampaignContext, recipes: Sequence[Recipe]) -> float | None:
        """The runs' expected seconds; None before a proxy was timed."""
        times = measured_times(ctx.ledger.proxies)
        return None if times is None else seconds(times, ctx.baseline, recipes)

    def _measure(self, ctx: CampaignContext, winner: TrialRecord,
                 jobs: Sequence[tuple[int, Recipe]]) -> None:
        """Train each run not yet trained, one lost resumed from its folder, until both are."""
        running: set[str] = set()
        while True:
            for record in ctx.book.poll(cancel=ctx.stops.cancel):
                running.discard(record.trial_id)
            for multiple, recipe in jobs:
                if ctx.stops.stop or len(ctx.book.inflight) >= ctx.trials_in_flight:
                    break
                runs = [r for r in ctx.ledger.of_kind(WIDTH_KIND) if r.parent == winner.trial_id
                        and r.edit.get("width_multiple") == multiple]
                if any(r.trained for r in runs) or any(r.trial_id in running for r in runs):
                    continue
                lost = [r for r in runs if r.status == "interrupted"]
                if len(lost) >= ATTEMPTS:
                    ctx.log.warning("width_given_up", trial_id=winner.trial_id,
                                    attempts=len(lost))
                    return
                running.add(self._launch(ctx, winner, multiple, recipe, lost))
            if not ctx.book.inflight and (ctx.stops.stop or not running):
                return
            time.sleep(POLL_INTERVAL_S)

    @staticmethod
    def _launch(ctx: CampaignContext, winner: TrialRecord, multiple: int, recipe: Recipe,
                lost: Sequence[TrialRecord]) -> str:
        trial_id = ctx.ledger.next_id("w")
        record = TrialRecord(
            campaign=ctx.settings.name, trial_id=trial_id, iteration=winner.iteration,
            kind=WIDTH_KIND, status="queued", recipe=recipe.model_dump(mode="json"),
            fingerprint=recipe.fingerprint(), parent=winner.trial_id,
            budget=ctx.settings.ladder.stress_steps, proposer=WIDTH_PROPOSER,
            edit={"width_multiple": multiple},
            hypothesis=(f"the recommendation at {multiple}× the proxy's width, by the export's "
                        "rules at the top rung's tokens: the size term's measurement"),
            retry_of=lost[-1].trial_id if lost else None)
        ctx.book.launch(record, recipe, log_every=max(1, recipe.steps // CURVE_POINTS),
                        checkpoint_every=ctx.settings.ladder.stress_checkpoint_every, resume=True,
                        out_dir=(ctx.directory / TRIALS_DIR
                                 / f"width-{multiple}x-{winner.trial_id}-s{recipe.seed}"),
                        timeout_s=ctx.settings.window.trial_timeout_s
                        * max(1.0, cost(recipe, ctx.baseline)))
        return trial_id
