"""The attribution phase: after the winner is named, measure which groups of its edit carry
the gain, and record the minimal winning edit.

:func:`recipelab.trajectory.attribution.attribute` decides from measurements alone and says
which (variant, seed) runs it still needs; this phase runs them as trials of kind
``attribution`` (ids ``a0000``…, parent the winner's proxy trial, ``edit`` the variant's edit
from the baseline) and, once it can decide, writes one record of kind ``attribution-result``.
Everything it knows is read back from the records, so after a crash it runs only what is
missing: a run that was lost (``interrupted``) is launched again from its checkpoint folder,
a trained one never twice, and the result is written once per winner.

The variants train at the rung's steps and at its learning-rate factor (the horizon rule's,
:func:`rung_lr_factor`), as the runs that named the winner did; the baseline's and the
winner's runs the ladder already trained there are read, not trained again
(:func:`reused_runs`).

The variants are measured at the highest rung the window allows (:func:`attribution_rungs`,
then :func:`choose_rung`); when not even the proxy's fits, the campaign says it skipped
attribution (``attribution_skipped``, reason "out of time").
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from functools import partial

from recipelab.agent.campaign_context import POLL_INTERVAL_S, CampaignContext
from recipelab.agent.phases.attribution_cost import Rung, attribution_rungs, choose_rung, expected_runs
from recipelab.agent.setup.window import measured_times
from recipelab.agent.trials import TRIALS_DIR
from recipelab.guardrails import judge
from recipelab.recipe import Recipe
from recipelab.trajectory.attribution import (
    ATTRIBUTION_KIND,
    ATTRIBUTION_PROPOSER,
    RESULT_KIND,
    Abandoned,
    Attribution,
    GroupKey,
    Pending,
    attribute,
    group_edit,
    result_of,
    variant_edit,
    variant_key,
)
from recipelab.trajectory.record import TrialRecord, has_score, utc_now
from recipelab.trajectory.verdict import Winner

ATTEMPTS = 5
"""Interruptions after which a variant's run is given up (each resumes from its checkpoint)."""
CURVE_POINTS = 20
LADDER_KINDS = ("rung", "stress")
"""Kinds of the ladder's runs above the proxy, whose baseline and winner runs attribution
reuses."""


def winner_edit(winner: TrialRecord, baseline: Recipe) -> dict[str, object]:
    """The winner's whole edit from the baseline (its recipe against the baseline's)."""
    return Recipe.model_validate(winner.recipe).edit_from(baseline)


def measured_runs(records: Sequence[TrialRecord], winner_id: str,
                  steps: int) -> dict[GroupKey, dict[int, float | None]]:
    """Each variant's val_bpb by seed from the trained attribution runs of ``winner_id`` at
    ``steps``; None for a run that failed."""
    found: dict[GroupKey, dict[int, float | None]] = {}
    for r in records:
        if (r.kind == ATTRIBUTION_KIND and r.parent == winner_id and r.trained
                and r.budget_steps == steps):
            found.setdefault(variant_key(r.edit), {})[int(r.recipe.get("seed", 0))] = _value(r)
    return found


def rung_lr_factor(records: Sequence[TrialRecord], baseline: TrialRecord | None,
                   steps: int) -> float:
    """The factor on the learning rate the ladder trained ``steps`` at (the horizon rule's),
    read from the baseline's run there; 1.0 where the baseline has none (the proxy's steps).
    The variants train at it too, so they are measured as the runs that named the winner."""
    if baseline is None:
        return 1.0
    run = next((r for r in records if r.kind in LADDER_KINDS and r.parent == baseline.trial_id
                and r.budget_steps == steps and "lr_family" not in r.edit), None)
    if run is None:
        return 1.0
    return float(run.recipe["optimizer"]["lr"]) / float(baseline.recipe["optimizer"]["lr"])


def variant_recipe(baseline: Recipe, edit: dict[str, object], seed: int, steps: int,
                   lr_factor: float) -> Recipe:
    """The recipe a variant trains: the baseline with its edit, at the seed, the rung's
    tokens (``steps`` of the baseline's) and the rung's learning-rate factor."""
    recipe = baseline.apply({**edit, "seed": seed})
    return recipe.apply({"optimizer.lr": recipe.optimizer.lr * lr_factor}).at_tokens(
        steps * baseline.tokens_per_step)


def reused_runs(records: Sequence[TrialRecord], baseline: Recipe,
                groups: dict[str, dict[str, object]], seeds: Sequence[int], steps: int,
                lr_factor: float) -> dict[GroupKey, dict[int, float | None]]:
    """The baseline's and the winner's val_bpb by seed from the ladder's runs that trained
    the recipe an attribution run of them would, so that they are not trained twice."""
    wanted = [(variant_recipe(baseline, variant_edit(groups, key), seed, steps, lr_factor),
               key, seed) for key in ((), tuple(sorted(groups))) for seed in seeds]
    found: dict[GroupKey, dict[int, float | None]] = {}
    for r in records:
        if r.kind in LADDER_KINDS and r.trained and r.budget_steps == steps:
            for recipe, key, seed in wanted:
                if _same_training(Recipe.model_validate(r.recipe), recipe):
                    found.setdefault(key, {})[seed] = _value(r)
    return found


def _same_training(a: Recipe, b: Recipe) -> bool:
    """Whether two recipes train the same run: every knob equal, the learning rate to
    rounding (a rung's rate is the proxy's times a factor, computed in another order)."""
    lr_a, lr_b = a.optimizer.lr, b.optimizer.lr
    return math.isclose(lr_a, lr_b, rel_tol=1e-9) and a.apply({"optimizer.lr": lr_b}) == b


def _value(record: TrialRecord) -> float | None:
    """A trained run's val_bpb, None when it failed (diverged, crashed)."""
    return record.val_bpb if has_score(record) else None


def describe_variant(key: GroupKey, all_groups: Sequence[str]) -> str:
    """The variant in words, for its record's hypothesis."""
    if not key:
        return "the baseline (no group of the winner's edit)"
    if set(key) == set(all_groups):
        return "the winner's whole edit"
    left_out = [g for g in all_groups if g not in key]
    return f"the winner's edit without {', '.join(left_out)}"


class AttributionPhase:
    """Runs one campaign's attribution (see the module)."""

    def run(self, ctx: CampaignContext) -> None:
        if not ctx.settings.ladder.attribution:
            ctx.log.info("attribution_skipped", reason="turned off (--no-attribution)")
            return
        winner = ctx.ledger.winner
        if winner is None:
            ctx.log.info("attribution_skipped", reason="no winner to attribute")
            return
        if result_of(ctx.ledger.records, winner.record.trial_id) is not None:
            return
        groups = group_edit(winner_edit(winner.record, ctx.baseline))
        if not groups:
            ctx.log.info("attribution_skipped", trial_id=winner.record.trial_id,
                         reason="the winner's recipe is the baseline's")
            return
        seeds = self._seeds(ctx, winner)
        rung = self._rung(ctx, len(groups), len(seeds))
        if rung is None:
            ctx.log.warning("attribution_skipped", trial_id=winner.record.trial_id,
                            reason="out of time: not even the proxy's steps fit the window's end "
                            "(a longer --hours/--until, or fewer --stress-steps, leaves room)")
            return
        ctx.log.info("attribution_started", trial_id=winner.record.trial_id, rung=rung[0],
                     steps=rung[1], seeds=list(seeds), groups={g: list(k) for g, k in groups.items()})
        self._measure(ctx, winner, groups, seeds, rung)

    def _seeds(self, ctx: CampaignContext, winner: Winner) -> tuple[int, ...]:
        """The top rung's first ``top_seeds`` seeds where the winner and the baseline both
        trained (their runs there are the whole edit and the baseline, read, not trained
        again); else the baseline's noise-floor seeds, else the winner's own."""
        if winner.top is not None and (base := ctx.ledger.baseline) is not None:
            steps = winner.top.steps
            shared = sorted(set(ctx.ledger.scores_at(winner.record.trial_id, steps))
                            & set(ctx.ledger.scores_at(base.trial_id, steps)))
            if shared:
                return tuple(shared[:ctx.settings.ladder.top_seeds])
        noise = ctx.ledger.noise
        if noise is not None and noise.seeds:
            return tuple(noise.seeds)
        return (int(winner.record.recipe.get("seed", 0)),)

    def _rung(self, ctx: CampaignContext, groups: int, seeds: int) -> Rung | None:
        times = measured_times(ctx.ledger.proxies) if ctx.deadline.at is not None else None
        return choose_rung(attribution_rungs(ctx.settings, ctx.baseline.steps),
                           expected_runs(groups, seeds), ctx.parallel,
                           lambda seconds: ctx.deadline.fits_seconds(seconds), times)

    def _measure(self, ctx: CampaignContext, winner: Winner, groups: dict[str, dict[str, object]],
                 seeds: tuple[int, ...], rung: Rung) -> None:
        winner_id, steps = winner.record.trial_id, rung[1]
        running: dict[str, tuple[GroupKey, int]] = {}
        lr_factor = rung_lr_factor(ctx.ledger.records, ctx.ledger.baseline, steps)
        while True:
            for record in ctx.book.poll(cancel=ctx.stops.cancel):
                running.pop(record.trial_id, None)
            records = ctx.ledger.records
            measured = reused_runs(records, ctx.baseline, groups, seeds, steps, lr_factor)
            for key, by_seed in measured_runs(records, winner_id, steps).items():
                measured.setdefault(key, {}).update(by_seed)
            decision = attribute(groups, measured, seeds, ctx.ledger.noise)
            if isinstance(decision, Attribution):
                self._write(ctx, winner, decision, rung, lr_factor)
                return
            if isinstance(decision, Abandoned):
                ctx.log.warning("attribution_abandoned", trial_id=winner_id, reason=decision.reason)
                return
            assert isinstance(decision, Pending)
            stopping = ctx.stops.stop
            for key, seed in decision.runs:
                if stopping or len(ctx.book.inflight) >= ctx.parallel:
                    break
                if (key, seed) in running.values():
                    continue
                lost = self._lost(records, winner_id, steps, key, seed)
                if len(lost) >= ATTEMPTS:
                    ctx.log.warning("attribution_abandoned", trial_id=winner_id,
                                    reason=f"a run of {describe_variant(key, list(groups))} was "
                                    f"interrupted {len(lost)} times")
                    stopping = True
                    break
                if not ctx.deadline.fits(ctx.ledger.proxies, steps):
                    ctx.log.warning("attribution_skipped", trial_id=winner_id,
                                    reason="out of time: the runs it still needs cannot finish "
                                    "before the campaign's deadline")
                    stopping = True
                    break
                trial_id = self._launch(ctx, winner, groups, key, seed, steps, lr_factor, lost)
                if trial_id is None:
                    stopping = True
                    break
                running[trial_id] = (key, seed)
            if not ctx.book.inflight and (stopping or not running):
                return
            time.sleep(POLL_INTERVAL_S)

    @staticmethod
    def _lost(records: Sequence[TrialRecord], winner_id: str, steps: int, key: GroupKey,
              seed: int) -> list[TrialRecord]:
        return [r for r in records if r.kind == ATTRIBUTION_KIND and r.parent == winner_id
                and r.status == "interrupted" and r.budget_steps == steps
                and variant_key(r.edit) == key and int(r.recipe.get("seed", 0)) == seed]

    def _launch(self, ctx: CampaignContext, winner: Winner, groups: dict[str, dict[str, object]],
                key: GroupKey, seed: int, steps: int, lr_factor: float,
                lost: Sequence[TrialRecord]) -> str | None:
        """Judge and launch one variant's run; None (logged) when the guardrails reject it."""
        edit = variant_edit(groups, key)
        # judged as the proxy candidate it is (the guardrails hold a candidate to the
        # proxy's steps), then trained at the rung's steps and rate, as a stress run is
        context = dataclasses.replace(ctx.guard_context(), seen=frozenset())
        verdict = judge(ctx.baseline.apply({**edit, "seed": seed}).at_tokens(ctx.baseline.tokens),
                        context, checks=ctx.checks)
        if not verdict.accepted or verdict.recipe is None:
            ctx.log.warning("attribution_abandoned", trial_id=winner.record.trial_id,
                            reason=f"the guardrails reject {describe_variant(key, list(groups))}: "
                            + "; ".join(verdict.reasons))
            return None
        recipe = variant_recipe(ctx.baseline, edit, seed, steps, lr_factor)
        trial_id = ctx.ledger.next_id("a")
        record = TrialRecord(
            campaign=ctx.settings.name, trial_id=trial_id, iteration=winner.record.iteration,
            kind=ATTRIBUTION_KIND, status="queued", recipe=recipe.model_dump(mode="json"),
            fingerprint=recipe.fingerprint(), parent=winner.record.trial_id, budget=steps,
            proposer=ATTRIBUTION_PROPOSER, edit=edit,
            hypothesis=describe_variant(key, list(groups)),
            retry_of=lost[-1].trial_id if lost else None)
        ctx.book.launch(record, recipe, log_every=max(1, steps // CURVE_POINTS),
                        checkpoint_every=ctx.settings.ladder.stress_checkpoint_every, resume=True,
                        out_dir=ctx.directory / TRIALS_DIR / f"attribution-{recipe.fingerprint()}",
                        timeout_s=ctx.settings.window.trial_timeout_s * max(1.0, steps / ctx.baseline.steps))
        return trial_id

    def _write(self, ctx: CampaignContext, winner: Winner, decision: Attribution, rung: Rung,
               lr_factor: float) -> None:
        """The result record. Its recipe is the minimal edit as its variant trained (the rung's
        tokens and learning rate), the measurement the export anchors its law at."""
        recipe = variant_recipe(ctx.baseline, decision.minimal_edit,
                                int(winner.record.recipe.get("seed", 0)), rung[1], lr_factor)
        data = {**decision.to_json(), "rung": rung[0], "steps": rung[1],
                "winner": winner.record.trial_id, "full_edit": winner_edit(winner.record, ctx.baseline)}
        record = TrialRecord(
            campaign=ctx.settings.name, trial_id=ctx.ledger.next_id("m"),
            iteration=winner.record.iteration, kind=RESULT_KIND, status="complete",
            recipe=recipe.model_dump(mode="json"), fingerprint=recipe.fingerprint(),
            parent=winner.record.trial_id, proposer=ATTRIBUTION_PROPOSER,
            edit=decision.minimal_edit, val_bpb=decision.values.get("minimal"),
            hypothesis="the minimal winning edit: the baseline plus the groups that carry the gain",
            metrics={"attribution": data}, finished_at=utc_now())
        ctx.book.write(record, say=partial(
            ctx.log.info, "attribution_finished", trial_id=record.trial_id,
            winner=winner.record.trial_id, method=decision.method, rung=rung[0], steps=rung[1],
            kept=[g.group for g in decision.kept], dropped=[g.group for g in decision.dropped],
            keeps_gain=decision.keeps_gain, minimal_edit=decision.minimal_edit))
