"""Choosing the campaign's proposer from its settings.

Without an LLM the classical proposer does everything. With one configured (settings or
``RECIPELAB_LLM_BASE_URL``), the default is the hybrid: the classical proposer supplies most
trials and the LLM a share of them, seeing everything the classical one has learned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from recipelab import environment
from recipelab.agent.setup.settings import CampaignSettings, SettingsError
from recipelab.proposer import ClassicalProposer, Observation, Proposal, Proposer, SearchSpace
from recipelab.recipe import Recipe
from recipelab.redaction import redact
from recipelab.targets import Target

LLM_ENV = environment.LLM_BASE_URL


def llm_configured(settings: CampaignSettings) -> bool:
    return settings.proposer.llm_configured()


def proposer_name(settings: CampaignSettings) -> str:
    return settings.proposer.name()


def classical_proposer(settings: CampaignSettings, baseline: Recipe, space: SearchSpace,
                       priors: Sequence[Observation] = ()) -> ClassicalProposer:
    return ClassicalProposer(baseline, None, space, sampler=settings.proposer.sampler, seed=settings.seed,
                             priors=priors)


def _classical_only(settings: CampaignSettings, classical: ClassicalProposer,
                    llm: Callable[[], Proposer]) -> Proposer:
    return classical


def _hybrid(settings: CampaignSettings, classical: ClassicalProposer,
            llm: Callable[[], Proposer]) -> Proposer:
    from recipelab.proposer.hybrid import HybridProposer

    return HybridProposer(classical, llm(), llm_share=settings.proposer.llm_share)


def _llm_only(settings: CampaignSettings, classical: ClassicalProposer,
              llm: Callable[[], Proposer]) -> Proposer:
    """The hybrid with every turn the LLM's: when the endpoint fails, that iteration still
    falls back to the classical proposer, so a failing LLM never stops a campaign."""
    from recipelab.proposer.hybrid import HybridProposer

    return HybridProposer(classical, llm(), llm_share=1.0, retry_after=0)


PROPOSER_BUILDERS: dict[str, Callable[[CampaignSettings, ClassicalProposer,
                                       Callable[[], Proposer]], Proposer]] = {
    "classical": _classical_only, "hybrid": _hybrid, "llm": _llm_only}
"""``--proposer`` names and how the campaign builds each from the classical sampler and the
LLM (made only when asked for): the one place a new proposer is added."""


def build_proposer(settings: CampaignSettings, baseline: Recipe, space: SearchSpace,
                   target: Target, calibration: str | None = None,
                   priors: Sequence[Observation] = ()) -> Proposer:
    """The campaign's proposer; ``priors`` (trials of earlier campaigns, val_bpb relative to
    their baseline) warm-start the classical sampler and ``calibration`` (their summary) goes
    into the LLM's prompt."""
    classical = classical_proposer(settings, baseline, space, priors)
    name = proposer_name(settings)

    def llm() -> Proposer:
        if not llm_configured(settings):
            raise SettingsError(
                f"--proposer {name} needs an LLM endpoint: set {LLM_ENV} (for example "
                "http://localhost:8000/v1 for a NIM) or pass --llm-base-url")
        return llm_proposer(settings, baseline, space, target, classical, calibration)

    return PROPOSER_BUILDERS[name](settings, classical, llm)


def llm_proposer(settings: CampaignSettings, baseline: Recipe, space: SearchSpace,
                 target: Target, sampler: ClassicalProposer, calibration: str | None = None,
                 **config: Any) -> Proposer:
    """The LLM proposer as the campaign asks it, steering ``sampler`` (it picks among the
    sampler's candidates and adjusts one); ``config`` overrides :class:`LLMConfig` fields
    (the preflight's shorter timeouts). The preflight's probe is built here too, so it is one
    ordinary turn."""
    from recipelab.proposer.llm import LLMProposer
    from recipelab.proposer.llm_endpoint import LLMConfig

    overrides = {key: value for key, value in {
        "base_url": settings.proposer.llm_base_url, "model": settings.proposer.llm_model,
        "structured_output": settings.proposer.llm_structured_output,
        "readiness_timeout_s": settings.proposer.llm_ready_timeout_s}.items() if value is not None}
    return LLMProposer(LLMConfig.from_env(**{**overrides, **config}), baseline, None, space,
                       f"{target.name}: {target.description}", calibration, sampler=sampler)


ERROR_TEXT_LIMIT = 500


class GuardedProposer:
    """The campaign's proposer, made safe to call: a proposer's fault is never the
    campaign's end. When ``propose`` raises, the classical proposer takes the turn; when
    ``prefetch`` or ``close`` raise, nothing is lost. Each fault is logged as
    ``proposer_failed`` (type and message, secrets redacted, cut short)."""

    def __init__(self, proposer: Proposer, settings: CampaignSettings, baseline: Recipe,
                 space: SearchSpace, priors: Sequence[Observation], log: Any) -> None:
        self.proposer = proposer
        self.log = log
        self._fallback_inputs = (settings, baseline, space, priors)
        self._fallback: Proposer | None = None

    def propose(self, history: list[Observation], n: int) -> list[Proposal]:
        try:
            return self.proposer.propose(history, n)
        except Exception as error:
            self._failed("propose", error)
        if self._fallback is None:
            self._fallback = classical_proposer(*self._fallback_inputs)
        try:
            return self._fallback.propose(history, n)
        except Exception as error:
            self._failed("fallback", error)
            return []

    def prefetch(self, history: list[Observation]) -> None:
        try:
            self.proposer.prefetch(history)
        except Exception as error:
            self._failed("prefetch", error)

    def close(self) -> None:
        try:  # e.g. an LLM proposer's HTTP client and prefetch thread
            self.proposer.close()
        except Exception as error:
            self._failed("close", error)

    def _failed(self, call: str, error: Exception) -> None:
        text = f"{type(error).__name__}: {error}"[:ERROR_TEXT_LIMIT]
        self.log.warning("proposer_failed", proposer=self.proposer.name, call=call,
                         error_type=type(error).__name__, error=redact(text, []),
                         fallback="classical" if call == "propose" else None)
