"""Campaign settings: what ``recipelab run`` was asked to do, saved in the campaign directory.

Running the same command again resumes the campaign. Settings that define what the
trajectory *means* (target, corpus, proxy preset and budget, precision, searchable knobs, seed)
cannot change on resume, since trials before and after would not be comparable; the rest
(budget, timeout, proposer, promotion, trials in flight) may.

``parallel`` and ``precision`` default to ``auto``, which :mod:`recipelab.agent.setup.machine`
resolves for the machine the trials run on before the campaign starts; the saved settings
hold what ``auto`` became, so a resume on the same campaign trains the same way.

The identity (name, target, preset, budget, corpus, precision, searchable, seed) sits at the
top level; everything else in one component per concern (:mod:`.settings_components`):
``window``, ``ladder``, ``search``, ``proposer``, ``executor``, ``store``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import Field, ValidationError, model_validator

from recipelab.agent.setup.settings_components import (
    COMPONENTS,
    FLAT_KEYS,
    ExecutorSettings,
    LadderSettings,
    ProposerSettings,
    SearchSettings,
    SettingsError,
    StoreSettings,
    WindowSettings,
    nest,
)
from recipelab.fsutil import atomic_write_text
from recipelab.recipe import Recipe, StrictModel
from recipelab.redaction import REDACTED, redact_url
from recipelab.targets import (
    PROXY_PRESETS,
    TARGETS,
    Target,
    param_budget,
    preset_target,
    proxy_recipe,
    target_name,
)
from recipelab.trainer.spec import CorpusSpec, TrialSpec

__all__ = [
    "AUTO", "COMPONENTS", "FIXED_ON_RESUME", "FLAT_KEYS", "SETTINGS_FILE", "CampaignSettings",
    "ExecutorSettings", "LadderSettings", "ProposerSettings", "SearchSettings", "SettingsError",
    "StoreSettings", "WindowSettings", "check_mlflow_uri", "check_resume", "default_campaign_dir",
    "load", "save", "validate_name",
]

SETTINGS_FILE = "settings.json"
FIXED_ON_RESUME = ("target", "preset", "budget", "corpus", "precision", "searchable", "seed")
AUTO = "auto"
_Settings = TypeVar("_Settings", bound="CampaignSettings")


class CampaignSettings(StrictModel):
    """The campaign's identity at the top level (what its trials mean), the rest by component.

    Flat keys (``promote=1``, ``"proposer": "llm"``) are accepted wherever settings are built
    or copied, through the one mapping :func:`~recipelab.agent.setup.settings_components.nest`:
    settings files saved before the components existed still load, and a test or a caller
    may name the one field it changes."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    # None: the preset's default target, filled in on validation
    target: str | None = Field(default=None, description=(
        f"target: {', '.join(TARGETS)}, or a target file (config.json)"),
        json_schema_extra={"default_means": "the preset's"})
    preset: str = Field(default="cpu", description=f"proxy preset: {', '.join(PROXY_PRESETS)}")
    budget: int | None = Field(default=None, ge=1000, description="proxy parameter budget",
                               json_schema_extra={"default_means": "the preset's"})
    # the larger built-in corpus: the default top rung reads it once on every CPU preset
    corpus: CorpusSpec = CorpusSpec(source="python-source")
    # auto: resolved by recipelab.agent.setup.machine
    precision: Literal["auto", "fp32", "bf16", "fp8"] = Field(default="auto", description=(
        "every trial's precision, the baseline's included: auto, fp32, bf16 or fp8 "
        "(--searchable precision searches it instead)"), json_schema_extra={"default_means": (
            "bf16 where the device computes it natively, CUDA with bf16 or CPUs with AVX-512 "
            "BF16 or AMX; else fp32")})
    searchable: tuple[str, ...] = Field(default=(), description=(
        "shape knob allowed to leave the target's value, e.g. shape.qk_norm; or precision, to "
        "search it (repeatable)"))
    seed: int = Field(default=0, ge=0, description="campaign seed: the baseline's and the samplers'")
    window: WindowSettings = WindowSettings()
    ladder: LadderSettings = LadderSettings()
    search: SearchSettings = SearchSettings()
    proposer: ProposerSettings = ProposerSettings()
    executor: ExecutorSettings = ExecutorSettings()
    store: StoreSettings = StoreSettings()

    @model_validator(mode="before")
    @classmethod
    def _nest_and_resolve_target(cls, data: Any) -> Any:
        """Flat keys into their component; the preset's default target saved by name, so a
        later default cannot change it."""
        if not isinstance(data, dict):
            return data
        data = nest(data)
        preset = str(data.get("preset", "cpu"))
        if data.get("target") is None and preset in PROXY_PRESETS:
            data = {**data, "target": target_name(preset)}
        return data

    def model_copy(self: _Settings, *, update: Mapping[str, Any] | None = None,
                   deep: bool = False) -> _Settings:
        """A copy with ``update`` applied *and validated*: pydantic's own copy validates
        nothing, so a flat key (``{"promote": 0}``) would set an attribute nothing reads and
        a bad value would pass. A component given as a dict changes only the fields it
        names; given as a model, it replaces the component."""
        if not update:
            return super().model_copy(deep=deep)
        data = self.model_dump()
        for key, value in nest(dict(update)).items():
            data[key] = ({**data[key], **value} if key in COMPONENTS and isinstance(value, dict)
                         else value)
        return self.model_validate(data)

    def target_spec(self) -> Target:
        """The target this campaign's proxy stands for."""
        return preset_target(self.preset, self.target)

    @property
    def param_budget(self) -> int:
        """The proxy's parameter budget: ``budget``, else the preset's."""
        return param_budget(self.preset, self.budget)

    def baseline(self) -> Recipe:
        """The unedited proxy recipe: the campaign's first trial and every edit's reference,
        in the campaign's precision (the preset's while ``precision`` is still ``auto``)."""
        changes: dict[str, Any] = {"seed": self.seed}
        if self.precision != AUTO:
            changes["precision"] = self.precision
        return proxy_recipe(self.preset, self.target, self.budget).apply(changes)

    def trial_spec(self, trial_id: str, kind: str, recipe: Recipe, out_dir: Path, *,
                   log_every: int, checkpoint_every: int = 0, **extra: Any) -> TrialSpec:
        """The one way a campaign (its trials and its preflight) describes a trial: the
        campaign's corpus, device, threads and compile rule, whatever launches it.

        ``out_dir`` is made absolute: a Ray worker runs in a directory of its own, and finds
        the trial's folder in place only by its absolute path (else it trains in scratch)."""
        return TrialSpec(trial_id=trial_id, kind=kind, recipe=recipe, corpus=self.corpus,
                         out_dir=str(out_dir.absolute()), device=self.executor.device,
                         log_every=log_every,
                         checkpoint_every=checkpoint_every, threads=self.executor.trial_threads(),
                         compile=self.ladder.compiles(kind), **extra)


def default_campaign_dir(name: str) -> Path:
    return Path("campaigns") / name


def save(settings: CampaignSettings, directory: Path) -> None:
    """Write ``settings.json``, with any password in the LLM base URL or the MLflow URI
    redacted: the file is shared with the trajectory, and a resume that needs the password is
    given it again (``--llm-base-url``, or better ``RECIPELAB_LLM_BASE_URL`` / the API key
    variables; ``--mlflow-uri``, or MLflow's ``MLFLOW_TRACKING_USERNAME`` / ``_PASSWORD``)."""
    shown = settings
    if settings.proposer.llm_base_url is not None:
        shown = shown.model_copy(update={"llm_base_url": redact_url(settings.proposer.llm_base_url)})
    if settings.store.mlflow_uri is not None:
        shown = shown.model_copy(update={"mlflow_uri": redact_url(settings.store.mlflow_uri)})
    atomic_write_text(directory / SETTINGS_FILE, shown.model_dump_json(indent=2))


def load(directory: Path) -> CampaignSettings | None:
    """The settings saved in ``directory``, or None when it holds none. Files written before
    the settings had components (every field at the top level) load through the same flat
    mapping as keyword construction, and are saved nested on the next resume."""
    path = directory / SETTINGS_FILE
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "precision" not in data:
            # saved before campaigns had one precision: their baseline trained in the preset's
            preset = PROXY_PRESETS.get(data.get("preset", "cpu"))
            data["precision"] = preset.precision if preset is not None else "fp32"
        return CampaignSettings.model_validate(data)
    except json.JSONDecodeError as error:
        raise SettingsError(f"{path} is not valid campaign settings: not JSON ({error}); "
                            "restore it, or start a new campaign with another --name") from None
    except ValidationError as error:
        raise SettingsError(f"{path} is not valid campaign settings: {error}") from None


def check_resume(saved: CampaignSettings, requested: CampaignSettings) -> None:
    """Refuse a resume that would change what the trajectory's numbers mean."""
    changed = [key for key in FIXED_ON_RESUME
               if getattr(saved, key) != getattr(requested, key)]
    if changed:
        details = "; ".join(f"{key}: saved {getattr(saved, key)!r}, asked {getattr(requested, key)!r}"
                            for key in changed)
        raise SettingsError(
            f"campaign {saved.name!r} was started with different {', '.join(changed)} ({details}). "
            "Trials before and after would not be comparable: run again with the saved values, "
            "or start a new campaign with another --name.")


def check_mlflow_uri(uri: str) -> None:
    """Refuse an MLflow URI whose credentials were redacted when the settings were saved."""
    if REDACTED in uri:
        raise SettingsError(
            f"the campaign's saved --mlflow-uri {uri!r} had credentials, which are not saved: "
            "give --mlflow-uri again with them, or put them in MLFLOW_TRACKING_USERNAME and "
            "MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) and give the URI without them")


def validate_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
        raise SettingsError(
            f"campaign name {name!r} may only use letters, digits, '.', '_' and '-' (1-64 chars)")
    return name
