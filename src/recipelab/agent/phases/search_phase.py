"""The search: proxy trials, up to ``parallel`` in flight, until ``--iterations`` or the window's
search share is spent.

What comes next is, in order: a lost trial's one re-run, the baseline's noise seeds, a
person's ``--edit`` edits, then the proposer's proposals. Each is judged and launched by
:class:`~recipelab.agent.phases.proxy_trials.ProxyTrials`.
"""

from __future__ import annotations

import dataclasses
import time

from recipelab.agent.campaign_context import POLL_INTERVAL_S, CampaignContext
from recipelab.agent.phases.person_edits import person_proposals
from recipelab.agent.phases.proxy_trials import ProxyTrials
from recipelab.agent.phases.seeds import baseline_proposals
from recipelab.agent.records import as_observation, as_proposal
from recipelab.agent.setup.proposer_choice import GuardedProposer
from recipelab.proposer import Observation, Proposal


class SearchPhase:
    """Keeps proxy trials in flight until the search budget is spent (see the module)."""

    def __init__(self, proposer: GuardedProposer, proxies: ProxyTrials) -> None:
        self.proposer = proposer
        self.proxies = proxies

    def run(self, ctx: CampaignContext) -> None:
        """Launch while the budget lasts, then wait for the last trials. A stop signal ends
        launching; a second cancels what is in flight."""
        launching = True
        while True:
            for record in ctx.book.poll(cancel=ctx.stops.cancel):
                ctx.failures.note(record)
            if (launching and not ctx.stops.stop
                    and len(ctx.book.inflight) < ctx.parallel
                    and self._budget_left(ctx)):
                launching = self._launch_next(ctx)
                continue
            if not ctx.book.inflight:
                break
            time.sleep(POLL_INTERVAL_S)
        if ctx.stops.stop:
            ctx.log.info("stopped", reason="stop signal: the trials in flight were finished")

    def _budget_left(self, ctx: CampaignContext) -> bool:
        """Whether another proxy trial may start (trials in flight count as spent)."""
        iterations = ctx.settings.window.iterations
        if iterations is not None and self.proxies.started(ctx) >= iterations:
            return False
        if (iterations is None and ctx.deadline.at is None) or ctx.failures.failing is not None:
            return False
        return ctx.deadline.search_may_launch(ctx.ledger.proxies)

    def _launchable(self, ctx: CampaignContext) -> int:
        """How many more proxy trials may start now: free slots, within ``iterations``."""
        free = ctx.parallel - len(ctx.book.inflight)
        iterations = ctx.settings.window.iterations
        if iterations is None:
            return free
        return min(free, iterations - self.proxies.started(ctx))

    def _launch_next(self, ctx: CampaignContext) -> bool:
        """Start what comes next: a lost trial's one re-run, else fresh proposals for the free
        slots. False when the proposer has nothing more worth launching."""
        retries = ctx.ledger.pending_retries("proxy")
        if retries:
            ctx.log.info("requeued", trial_id=retries[0].trial_id)
            self.proxies.try_(ctx, as_proposal(retries[0]), retry_of=retries[0])
            return True
        rejections = self.proxies.consecutive_rejections
        if rejections >= ctx.settings.window.max_consecutive_rejections:
            ctx.log.error("too_many_rejections", count=rejections,
                          hint="the proposer keeps proposing what the guardrails reject")
            return False
        proposals = self._propose(ctx, max(1, self._launchable(ctx)))
        if not proposals:
            ctx.log.warning("no_proposal", proposer=self.proposer.proposer.name)
            return False
        for proposal in proposals:
            if ctx.stops.stop:
                break
            self.proxies.try_(ctx, proposal)
        return True

    def _propose(self, ctx: CampaignContext, n: int) -> list[Proposal]:
        """The baseline's seeds first, then a person's ``--edit`` edits, then the proposer's
        proposals (parented on the baseline when they name no parent)."""
        search, ledger = ctx.settings.search, ctx.ledger
        seeds = baseline_proposals(ctx.baseline, ledger.proxies, search.noise_seeds, n)
        if seeds:
            return seeds
        baseline_id = ledger.baseline_id
        edits = person_proposals(ctx.baseline, baseline_id, ledger.proxies, search.edits, n)
        if edits:
            return edits
        return [dataclasses.replace(p, parent_id=baseline_id)
                if p.parent_id is None and baseline_id is not None else p
                for p in self.proposer.propose(history(ctx), n)[:n]]


def history(ctx: CampaignContext) -> list[Observation]:
    """The proxy trials so far, as the proposer reads them."""
    return [as_observation(r) for r in ctx.ledger.proxies]
