"""A proposal becomes a proxy trial: judged by the guardrails, then recorded as rejected (with
its reasons) or launched for the baseline's tokens.

The search launches the proposer's proposals this way, and the ladder the seed re-runs of
close finalists, so both count rejections, keep the LLM's artifacts and note its seat alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from recipelab.agent.campaign_context import CampaignContext
from recipelab.agent.records import proposal_fields
from recipelab.agent.trials import TRIALS_DIR
from recipelab.guardrails import judge
from recipelab.guardrails.schema import parse_candidate
from recipelab.proposer import Proposal
from recipelab.recipe import LLM_PROPOSER_PREFIX, Recipe
from recipelab.trajectory.record import TrialRecord, utc_now

PROXY_LOG_EVERY = 10


class ProxyTrials:
    """Judges and launches proxy trials (without waiting for them); counts the rejections in
    a row and follows the LLM's seat (``llm_down`` / ``llm_up``)."""

    def __init__(self, after_launch: Callable[[CampaignContext], None] = lambda ctx: None) -> None:
        """``after_launch`` runs once a trial is launched (the proposer prefetches there)."""
        self.after_launch = after_launch
        self.consecutive_rejections = 0
        self._llm_down = False  # since the LLM's last fallback, until its next valid reply

    def started(self, ctx: CampaignContext) -> int:
        """Proxy trials spent from ``--iterations``: trained, and in flight."""
        return len(ctx.ledger.search_trials) + ctx.book.proxies_in_flight()

    def try_(self, ctx: CampaignContext, proposal: Proposal, *,
             retry_of: TrialRecord | None = None) -> None:
        """Judge ``proposal``; record its rejection, or launch it."""
        iteration = self.started(ctx)
        trial_id = ctx.ledger.next_id("p")
        ctx.log.info("proposal", trial_id=trial_id, proposer=proposal.proposer,
                     edit=proposal.edit, hypothesis=proposal.hypothesis,
                     retry_of=retry_of.trial_id if retry_of else None)
        verdict = judge(at_proxy_budget(proposal.candidate, ctx.baseline),
                        ctx.guard_context(exclude=retry_of.fingerprint if retry_of else None),
                        checks=ctx.checks)
        artifacts = self._save_artifacts(ctx, trial_id, proposal)
        record = TrialRecord(
            campaign=ctx.settings.name, trial_id=trial_id, iteration=iteration, kind="proxy",
            status="queued", retry_of=retry_of.trial_id if retry_of else None,
            recipe=verdict.recipe.model_dump(mode="json") if verdict.recipe else proposal.candidate,
            fingerprint=verdict.recipe.fingerprint() if verdict.recipe else None,
            budget=ctx.baseline.steps,
            artifacts=artifacts, **proposal_fields(proposal))
        if not verdict.accepted or verdict.recipe is None:
            self.consecutive_rejections += 1
            ctx.book.write(record.model_copy(update={
                "status": "rejected", "reasons": list(verdict.reasons), "finished_at": utc_now()}),
                say=partial(ctx.log.warning, "rejected", trial_id=trial_id,
                            proposer=proposal.proposer, edit=proposal.edit,
                            reasons=list(verdict.reasons)))
            return
        self.consecutive_rejections = 0
        ctx.book.launch(record, verdict.recipe, log_every=PROXY_LOG_EVERY,
                        timeout_s=ctx.settings.window.trial_timeout_s)
        self.after_launch(ctx)

    def _save_artifacts(self, ctx: CampaignContext, trial_id: str,
                        proposal: Proposal) -> dict[str, str]:
        """Write what the proposer kept (e.g. the exact LLM prompt and reply) into the trial's
        folder; the record references the files."""
        saved = {}
        for name, text in proposal.artifacts.items():
            if Path(name).name != name or name.startswith("."):
                continue  # artifact names come from our proposers; anything else is ignored
            path = ctx.directory / TRIALS_DIR / trial_id / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            saved[name] = str(path.relative_to(ctx.directory))
        self._note_llm_state(ctx, trial_id, proposal)
        return saved

    def _note_llm_state(self, ctx: CampaignContext, trial_id: str, proposal: Proposal) -> None:
        """Log each fallback, and each change of the LLM's seat: ``llm_down`` at the first
        fallback after a valid reply, ``llm_up`` at its first valid reply after one."""
        if proposal.fallback is not None:
            ctx.log.warning("llm_fallback", trial_id=trial_id, cause=proposal.fallback,
                            proposer=proposal.proposer)
            if not self._llm_down:
                ctx.log.warning("llm_down", trial_id=trial_id, cause=proposal.fallback,
                                hint="the sampler proposes; the LLM's turns keep asking it")
            self._llm_down = True
        elif proposal.proposer.startswith(LLM_PROPOSER_PREFIX) and self._llm_down:
            ctx.log.info("llm_up", trial_id=trial_id, proposer=proposal.proposer)
            self._llm_down = False


def at_proxy_budget(candidate: Mapping[str, Any], baseline: Recipe) -> Mapping[str, Any] | Recipe:
    """The candidate trained for the baseline's tokens, in as many of its own steps as its
    batch allows; as given when it is no recipe (the schema check then says why)."""
    recipe, _ = parse_candidate(candidate)
    return candidate if recipe is None else recipe.at_tokens(baseline.tokens)
