"""The one step from what a person asked for to the settings a campaign runs on.

``build`` owns every decision between the command line and the campaign: the saved settings
merged with the options given, a resume refused when it would change what the trajectory's
numbers mean, the budget rule, a new campaign's defaults, and every ``auto`` resolved for
where the trials run (:mod:`recipelab.agent.setup.machine`). The command line parses and calls it;
it prints nothing and raises :class:`~recipelab.errors.RecipelabError` with the fix.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from recipelab.agent.setup import settings as settings_store
from recipelab.agent.setup.machine import Resolved, resolve
from recipelab.agent.setup.settings import AUTO, CampaignSettings, SettingsError
from recipelab.agent.setup.settings_components import nest
from recipelab.errors import one_line

CHECK_ITERATIONS = 20
"""What ``check`` without a budget checks: a short night's proxy trials."""


@dataclasses.dataclass(frozen=True)
class Built:
    """The settings resolved for where trials run, whether the campaign is new, and what
    was decided for the person (one line each, ``resolved.notes`` included)."""

    resolved: Resolved
    new: bool

    @property
    def notes(self) -> tuple[str, ...]:
        return self.resolved.notes


def build(directory: Path, name: str, given: Mapping[str, Any], *,
          check_only: bool = False) -> Built:
    """The campaign at ``directory`` with ``given`` (settings by path, nested or flat) over
    its saved settings, or a new one named ``name``. ``check_only``: a campaign without a
    budget is checked at :data:`CHECK_ITERATIONS` rather than refused. The Ray connection
    a ``--executor ray`` campaign needs is opened here and is the caller's to close."""
    given = nest(dict(given))
    notes: list[str] = []
    settings, saved = merged(directory, name, given)
    if saved is not None:  # before the baseline is built: a new target's proxy may not be
        settings_store.check_resume(saved, settings if settings.precision != AUTO else
                                    settings.model_copy(update={"precision": saved.precision}))
    window = settings.window
    if window.iterations is None and window.hours is None and window.until is None:
        if not check_only:
            raise SettingsError("give the campaign a budget: --window.iterations N, "
                                "--window.hours H or --window.until HH:MM")
        notes.append(f"no budget given: checking a campaign of --window.iterations {CHECK_ITERATIONS}")
        settings = settings.model_copy(update={"window": {"iterations": CHECK_ITERATIONS}})
    try:
        settings.baseline()
    except (ValueError, ValidationError) as error:
        raise SettingsError(str(error).splitlines()[0]) from None
    if settings.store.mlflow_uri is not None:
        settings = settings.model_copy(
            update={"store": {"mlflow_uri": tracking_uri(settings.store.mlflow_uri)}})
    if saved is None:
        settings = new_campaign_defaults(settings, given)
    resolved = where_trials_run(settings)
    if saved is not None:
        try:
            settings_store.check_resume(saved, resolved.settings)
        except SettingsError:
            if resolved.executor is not None:
                resolved.executor.close()
            raise
    return Built(dataclasses.replace(resolved, notes=(*notes, *resolved.notes)), saved is None)


def merged(directory: Path, name: str, given: dict[str, Any]
           ) -> tuple[CampaignSettings, CampaignSettings | None]:
    """The saved settings (None for a new campaign) and the given options over them."""
    try:
        saved = settings_store.load(directory)
        if saved is None:
            return CampaignSettings.model_validate({"name": name, **given}), None
        if isinstance(given.get("corpus"), dict):  # options not given keep their saved values
            corpus = {**saved.corpus.model_dump(), **given["corpus"]}
            if Path(corpus["source"]).resolve() == Path(saved.corpus.source).resolve():
                corpus["source"] = saved.corpus.source  # the same files, however spelt
            given = {**given, "corpus": corpus}
        return saved.model_copy(update=given), saved
    except ValidationError as error:
        raise SettingsError(f"invalid campaign settings: {one_line(error)}") from None


def tracking_uri(uri: str) -> str:
    """The MLflow URI as the campaign uses it (a path made absolute); raises when MLflow is
    missing, the scheme is not one it serves, or a resume lacks its credentials."""
    from recipelab.tracking import check_tracking_uri

    settings_store.check_mlflow_uri(uri)
    return check_tracking_uri(uri)


def new_campaign_defaults(settings: CampaignSettings, given: Mapping[str, Any]) -> CampaignSettings:
    """Defaults a new campaign decides from its plan and this machine: the corpus read only as
    far as its longest run needs, and memory kept free for an LLM server on unified memory."""
    from recipelab.agent.setup.preflight import (
        absolute_corpus,
        corpus_bytes_needed,
        default_memory_reserve_gib,
    )

    settings = absolute_corpus(settings, cap=corpus_bytes_needed(settings))
    executor = given.get("executor")
    if not (isinstance(executor, dict) and "memory_reserve_gib" in executor):
        from recipelab.guardrails import detect_device

        reserve = default_memory_reserve_gib(detect_device())
        if reserve:
            settings = settings.model_copy(update={"executor": {"memory_reserve_gib": reserve}})
    return settings


def where_trials_run(settings: CampaignSettings) -> Resolved:
    """``--parallel auto``, ``--precision auto`` and the device resolved for this machine, or
    for a Ray cluster's workers (connected here; the preflight and the campaign use that
    connection)."""
    from recipelab.runner import build_executor
    from recipelab.runner.ray import RayUnavailable

    executor = None
    try:
        if settings.executor.kind == "ray":
            executor = build_executor("ray", ray_address=settings.executor.ray_address)
        return resolve(settings, executor)
    except RayUnavailable as error:
        error.fix = error.fix or "use --executor local to train on this machine instead"
        raise
    except SettingsError:
        if executor is not None:
            executor.close()
        raise
