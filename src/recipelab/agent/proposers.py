"""Choosing the campaign's proposer from its settings.

Without an LLM the classical proposer does everything. With one configured (settings or
``RECIPELAB_LLM_BASE_URL``), the default is the hybrid: the classical proposer supplies most
trials and the LLM a share of them, seeing everything the classical one has learned.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from recipelab.agent.settings import CampaignSettings, SettingsError
from recipelab.proposer import ClassicalProposer, Observation, Proposer, SearchSpace
from recipelab.recipe import Recipe, Target

LLM_ENV = "RECIPELAB_LLM_BASE_URL"


def llm_configured(settings: CampaignSettings) -> bool:
    return bool(settings.llm_base_url or os.environ.get(LLM_ENV))


def proposer_name(settings: CampaignSettings) -> str:
    if settings.proposer is not None:
        return settings.proposer
    return "hybrid" if llm_configured(settings) else "classical"


def build_proposer(settings: CampaignSettings, baseline: Recipe, space: SearchSpace,
                   target: Target, calibration: str | None = None,
                   priors: Sequence[Observation] = ()) -> Proposer:
    """The campaign's proposer; ``priors`` (trials of earlier campaigns, val_bpb relative to
    their baseline) warm-start the classical sampler and ``calibration`` (their summary) goes
    into the LLM's prompt."""
    classical = ClassicalProposer(baseline, None, space, sampler=settings.sampler,
                                  seed=settings.seed, priors=priors)
    name = proposer_name(settings)
    if name == "classical":
        return classical
    if not llm_configured(settings):
        raise SettingsError(
            f"--proposer {name} needs an LLM endpoint: set {LLM_ENV} (for example "
            "http://localhost:8000/v1 for a NIM) or pass --llm-base-url")
    from recipelab.proposer.hybrid import HybridProposer
    from recipelab.proposer.llm import LLMConfig, LLMProposer

    overrides = {key: value for key, value in {
        "base_url": settings.llm_base_url, "model": settings.llm_model,
        "structured_output": settings.llm_structured_output}.items() if value is not None}
    llm = LLMProposer(LLMConfig.from_env(**overrides), baseline, None, space,
                      f"{target.name}: {target.description}", calibration)
    # "llm" is the hybrid with every turn the LLM's: when the endpoint fails, that iteration
    # still falls back to the classical proposer, so a failing LLM never stops a campaign.
    if name == "llm":
        return HybridProposer(classical, llm, llm_share=1.0, retry_after=0)
    return HybridProposer(classical, llm, llm_share=settings.llm_share)
