"""Campaign settings: what ``recipelab run`` was asked to do, saved in the campaign directory.

Running the same command again resumes the campaign. Settings that define what the
trajectory *means* (target, corpus, proxy preset and budget, precision, searchable knobs)
cannot change on resume, since trials before and after would not be comparable; the rest
(budget, timeout, proposer, promotion, trials in flight) may.

``parallel`` and ``precision`` default to ``auto``, which :mod:`recipelab.agent.machine`
resolves for the machine the trials run on before the campaign starts; the saved settings
hold what ``auto`` became, so a resume on the same campaign trains the same way.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, time, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator

from recipelab.errors import RecipelabError
from recipelab.fsutil import atomic_write_text
from recipelab.recipe import PROXY_PRESETS, Recipe, StrictModel, proxy_recipe
from recipelab.redaction import REDACTED, redact_url
from recipelab.trainer.spec import CorpusSpec, TrialSpec
from recipelab.trajectory.ladder import RungPlan, plan_ladder, rung_steps

SETTINGS_FILE = "settings.json"
FIXED_ON_RESUME = ("target", "preset", "budget", "corpus", "precision", "searchable")
AUTO = "auto"


class SettingsError(RecipelabError, ValueError):
    """Settings that cannot be used; the message says what to change."""


class CampaignSettings(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    target: str | None = None  # None: the preset's default target, filled in on validation
    preset: str = "cpu"
    budget: int | None = Field(default=None, ge=1000)
    corpus: CorpusSpec = CorpusSpec()
    iterations: int | None = Field(default=None, ge=0)
    hours: float | None = Field(default=None, gt=0)
    until: str | None = Field(default=None, pattern=r"^\d{1,2}:\d{2}$")
    trial_timeout_s: float = Field(default=600.0, gt=0)
    promote: int = Field(default=3, ge=0)
    stress_steps: int = Field(default=1000, ge=1)
    stress_log_every: int = Field(default=50, ge=1)
    stress_checkpoint_every: int = Field(default=50, ge=1)
    fidelity: int = Field(default=0, ge=0)  # mid-ranked trials stress-run besides the finalists
    # the ladder (successive halving, trajectory.ladder): each rung keeps the best 1/eta
    eta: int = Field(default=3, ge=2)
    rung_size: int = Field(default=10, ge=0)  # at most this many climb to the first rung; 0: none
    rung_steps: int | None = Field(default=None, ge=1)  # the first rung's steps; None: proxy x eta
    # every rung trains at the learning rate the horizon rule gives (trajectory.horizon)
    horizon_rule: bool = True
    # after the winner is named, measure which groups of its edit carry the gain (attribution)
    attribution: bool = True
    proposer: Literal["classical", "llm", "hybrid"] | None = None  # None: hybrid with an LLM
    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_share: float = Field(default=0.3, ge=0.0, le=1.0)
    llm_structured_output: Literal["auto", "json_schema", "json_object", "guided_json", "nvext",
                                   "prompt"] | None = None
    sampler: Literal["tpe", "cmaes", "random"] = "tpe"
    seed: int = Field(default=0, ge=0)
    searchable: tuple[str, ...] = ()
    skip_checks: tuple[str, ...] = ()
    memory_reserve_gib: float = Field(default=0.0, ge=0)
    max_consecutive_rejections: int = Field(default=25, ge=1)
    # proxy trials in a row failing with the same reason after which launching stops
    max_consecutive_failures: int = Field(default=5, ge=1)
    # trajectory.jsonl files or campaign directories whose trials warm-start the proposers
    calibrate_from: tuple[str, ...] = ()
    # baseline seeds measuring the noise floor (1 disables it); they count toward iterations
    noise_seeds: int = Field(default=3, ge=1, le=20)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # trials in flight at once; auto: what pays on this machine (recipelab.agent.machine)
    parallel: Annotated[int, Field(ge=1, le=1024)] | Literal["auto"] = "auto"
    # every trial's precision (the baseline's too) unless "precision" is searchable; auto:
    # bf16 where the device computes it natively, else fp32 (recipelab.agent.machine)
    precision: Literal["auto", "fp32", "bf16", "fp8"] = "auto"
    # CPU threads per trial; None: the cores shared out among the trials in flight
    threads: int | None = Field(default=None, ge=1, le=1024)
    # torch.compile stress runs: they run long enough to win back the compile time
    compile_stress: bool = False
    executor: Literal["local", "ray"] = "local"
    ray_address: str | None = None  # None: a local Ray instance; "auto": the running cluster
    db: str | None = None  # None: SQLite in the campaign directory; else a SQLAlchemy URL
    mlflow_uri: str | None = None  # each trial a child run of the campaign's run (tracking.py)

    @model_validator(mode="before")
    @classmethod
    def _resolve_target(cls, data: Any) -> Any:
        """Save the preset's default target by name, so a later default cannot change it."""
        if isinstance(data, dict) and data.get("target") is None:
            preset = PROXY_PRESETS.get(data.get("preset", "cpu"))
            if preset is not None:
                data = {**data, "target": preset.default_target}
        return data

    def baseline(self) -> Recipe:
        """The unedited proxy recipe: the campaign's first trial and every edit's reference,
        in the campaign's precision (the preset's while ``precision`` is still ``auto``)."""
        changes: dict[str, Any] = {"seed": self.seed}
        if self.precision != AUTO:
            changes["precision"] = self.precision
        return proxy_recipe(self.preset, self.target, self.budget).apply(changes)

    @property
    def trials_in_flight(self) -> int:
        """``parallel`` once resolved. Raises SettingsError while it is still ``auto``."""
        if isinstance(self.parallel, str):
            raise SettingsError(
                "--parallel auto has not been resolved for this machine yet: pass the settings "
                "through recipelab.agent.machine.resolve_auto (recipelab run does) or give "
                "--parallel a number")
        return self.parallel

    def trial_threads(self, cores: int | None = None) -> int | None:
        """Threads each trial gets: ``threads`` if set; for local trials, this machine's
        cores shared out among the ``parallel`` trials in flight (at least one each), since
        trials that all use every core spin against each other; for Ray, the task's own."""
        if self.threads is not None or self.executor == "ray":
            return self.threads
        return max(1, (cores or os.cpu_count() or 1) // self.trials_in_flight)

    def trial_compile(self, kind: str) -> bool:
        """Whether a trial of ``kind`` is compiled: stress runs when ``compile_stress`` is
        set; never a 60-step proxy, which ends before compiling pays for itself."""
        return self.compile_stress and kind == "stress"

    def trial_spec(self, trial_id: str, kind: str, recipe: Recipe, out_dir: Path, *,
                   log_every: int, checkpoint_every: int = 0, **extra: Any) -> TrialSpec:
        """The one way a campaign (its trials and its preflight) describes a trial: the
        campaign's corpus, device, threads and compile rule, whatever launches it."""
        return TrialSpec(trial_id=trial_id, kind=kind, recipe=recipe, corpus=self.corpus,
                         out_dir=str(out_dir), device=self.device, log_every=log_every,
                         checkpoint_every=checkpoint_every, threads=self.trial_threads(),
                         compile=self.trial_compile(kind), **extra)

    def ladder_steps(self, proxy_steps: int) -> list[int]:
        """The steps of the ladder's rungs above the proxy, the top rung (``stress_steps``)
        last; only the top rung when :meth:`rung_skip_reason` says the middle rungs are off."""
        if self.rung_skip_reason(proxy_steps) is not None:
            return [self.stress_steps]
        return rung_steps(proxy_steps, self.stress_steps, self.eta, self.rung_steps)

    def planned_ladder(self, proxy_steps: int, candidates: int) -> list[RungPlan]:
        """The ladder for ``candidates`` proxy candidates (the baseline not counted): what
        the window planner and the disk estimate price."""
        steps = self.ladder_steps(proxy_steps)
        first = steps[0] if len(steps) > 1 else self.stress_steps * self.eta  # none in between
        return plan_ladder(candidates, proxy_steps=proxy_steps, stress_steps=self.stress_steps,
                           eta=self.eta, promote=self.promote, first_size=self.rung_size,
                           first_steps=first)

    def rung_skip_reason(self, proxy_steps: int) -> str | None:
        """Why this campaign climbs no rung between the proxy and the top rung, or None."""
        if self.rung_size == 0:
            return "--rung-size is 0"
        if self.promote == 0:
            return "--promote is 0: there is no top rung for the ladder to climb to"
        if self.rung_steps is not None and not proxy_steps < self.rung_steps < self.stress_steps:
            return (f"--rung-steps {self.rung_steps} is not between the proxy's {proxy_steps} "
                    f"and --stress-steps {self.stress_steps}: give it a value between them")
        if len(rung_steps(proxy_steps, self.stress_steps, self.eta, self.rung_steps)) < 2:
            return (f"no rung fits between the proxy's {proxy_steps} steps and --stress-steps "
                    f"{self.stress_steps} at --eta {self.eta} (a middle rung needs at most "
                    "stress-steps / sqrt(eta) steps): lower --eta or --rung-steps, or raise "
                    "--stress-steps")
        return None

    def deadline(self, started: datetime) -> datetime | None:
        """When launching must stop: ``--hours`` after start, or the next ``--until`` time."""
        ends = []
        if self.hours is not None:
            ends.append(started + timedelta(hours=self.hours))
        if self.until is not None:
            hour, minute = (int(part) for part in self.until.split(":"))
            end = datetime.combine(started.date(), time(hour, minute), started.tzinfo)
            ends.append(end if end > started else end + timedelta(days=1))
        return min(ends) if ends else None


def default_campaign_dir(name: str) -> Path:
    return Path("campaigns") / name


def save(settings: CampaignSettings, directory: Path) -> None:
    """Write ``settings.json``, with any password in the LLM base URL or the MLflow URI
    redacted: the file is shared with the trajectory, and a resume that needs the password is
    given it again (``--llm-base-url``, or better ``RECIPELAB_LLM_BASE_URL`` / the API key
    variables; ``--mlflow-uri``, or MLflow's ``MLFLOW_TRACKING_USERNAME`` / ``_PASSWORD``)."""
    shown = settings
    if settings.llm_base_url is not None:
        shown = shown.model_copy(update={"llm_base_url": redact_url(settings.llm_base_url)})
    if settings.mlflow_uri is not None:
        shown = shown.model_copy(update={"mlflow_uri": redact_url(settings.mlflow_uri)})
    atomic_write_text(directory / SETTINGS_FILE, shown.model_dump_json(indent=2))


def load(directory: Path) -> CampaignSettings | None:
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
