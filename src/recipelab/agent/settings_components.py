"""The components of a campaign's settings, one small model per concern.

Each component validates itself and owns the rules that read only its own fields (the
window its deadline, the ladder its rungs, the executor its threads), so a reader asks
``settings.ladder.promote`` and a rule about the ladder lives beside the ladder's fields.
:data:`COMPONENTS` names them as :class:`~recipelab.agent.settings.CampaignSettings` holds
them; :data:`FLAT_KEYS` is the flat spelling of every component field (a field called
``kind`` is spelt as its component, ``proposer`` and ``executor``), which the settings saved
before the components existed, keyword construction and the ``run`` options all use.
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Sequence
from datetime import datetime, time, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator

from recipelab import environment
from recipelab.cores import usable_cores
from recipelab.errors import RecipelabError
from recipelab.recipe import StrictModel, proxy_recipe
from recipelab.trajectory.ladder import (
    CLOSE_CALL_SEEDS,
    PROMOTE,
    TOP_SEEDS,
    RungPlan,
    plan_ladder,
    rung_steps,
)
from recipelab.trajectory.ledger import Ledger
from recipelab.trajectory.record import TrialRecord


class SettingsError(RecipelabError, ValueError):
    """Settings that cannot be used; the message says what to change."""


def until_problem(until: str) -> str | None:
    """Why ``until`` is not a time of day (HH:MM), or None when it is."""
    hour, _, minute = until.partition(":")
    if (hour.isdigit() and minute.isdigit() and len(minute) == 2 and len(hour) <= 2
            and int(hour) < 24 and int(minute) < 60):
        return None
    return f"--until {until!r} is not a time of day: give HH:MM with HH 00-23 and MM 00-59, e.g. 07:30"


class WindowSettings(StrictModel):
    """When launching stops: a trial count, a duration, a clock time, or a run of failures."""

    iterations: int | None = Field(default=None, ge=0)
    hours: float | None = Field(default=None, gt=0)
    until: str | None = None
    trial_timeout_s: float = Field(default=600.0, gt=0)
    # proxy trials in a row failing with the same reason after which launching stops
    max_consecutive_failures: int = Field(default=5, ge=1)
    max_consecutive_rejections: int = Field(default=25, ge=1)

    @field_validator("until")
    @classmethod
    def _a_time_of_day(cls, until: str | None) -> str | None:
        """Refused here rather than when :meth:`deadline` is first asked, hours later."""
        if until is not None and (problem := until_problem(until)):
            raise ValueError(problem)
        return until

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


class LadderSettings(StrictModel):
    """The climb from the proxy to the stress horizon: successive halving (each rung keeps the
    best 1/eta at eta times the steps), its finalists, and what is measured once it ends."""

    promote: int = Field(default=PROMOTE, ge=0)
    stress_steps: int = Field(default=1000, ge=1)
    stress_log_every: int = Field(default=50, ge=1)
    stress_checkpoint_every: int = Field(default=50, ge=1)
    fidelity: int = Field(default=0, ge=0)  # mid-ranked trials stress-run besides the finalists
    # seeds of every finalist and the baseline at the top rung, where the winner is named;
    # fresh seeds (trajectory.ladder.top_rung_seeds), never those the lower rungs ranked on
    top_seeds: int = Field(default=TOP_SEEDS, ge=2, le=20)
    # a close call there (the best finalist's mean gain positive, its interval including 0)
    # buys it and the baseline this many more seeds before the campaign keeps the baseline
    close_call_seeds: int = Field(default=CLOSE_CALL_SEEDS, ge=0, le=20)
    eta: int = Field(default=3, ge=2)
    rung_size: int = Field(default=10, ge=0)  # at most this many climb to the first rung; 0: none
    rung_steps: int | None = Field(default=None, ge=1)  # the first rung's steps; None: proxy x eta
    # every rung trains at the learning rate the horizon rule gives (trajectory.horizon)
    horizon_rule: bool = True
    # after the winner is named, measure which groups of its edit carry the gain (attribution)
    attribution: bool = True
    # then train its recommendation at the proxy's width and twice it (agent.width_phase), so
    # the export's prediction for a larger target has a measured size term
    width_rung: bool = True
    # torch.compile stress runs: they run long enough to win back the compile time
    compile_stress: bool = False
    # let the longest run read its training text more than once (the preflight refuses it
    # otherwise: a ranking on repeated text ranks regularization, not what a cloud run reads)
    repeat_text: bool = False

    def ledger(self, records: Sequence[TrialRecord]) -> Ledger:
        """``records`` read under this ladder's rules: the one place a campaign's ladder
        becomes a :class:`Ledger`, so the loop, ``status``, the report and the hand-off name
        the same winner (a ledger built on the defaults names another in a campaign run with
        another ``--promote``)."""
        return Ledger(records, promote=self.promote, fidelity=self.fidelity,
                      rung_size=self.rung_size, eta=self.eta,
                      looks=2 if self.close_call_seeds else 1)

    def compiles(self, kind: str) -> bool:
        """Whether a trial of ``kind`` is compiled: stress runs when ``compile_stress`` is
        set; never a 60-step proxy, which ends before compiling pays for itself."""
        return self.compile_stress and kind == "stress"

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
                           first_steps=first, top_seeds=self.top_seeds,
                           family=self.horizon_rule)

    def rung_skip_reason(self, proxy_steps: int) -> str | None:
        """Why this campaign climbs no rung between the proxy and the top rung, or None.
        A reason, not a validation error: the proxy's steps are the preset's, not the
        ladder's, and a campaign without middle rungs still runs."""
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


@functools.cache
def recipe_knobs() -> tuple[str, ...]:
    """Every knob a recipe has, by its dotted name (the same for every preset)."""
    return tuple(proxy_recipe("tiny").knobs())


def parse_edit(text: str) -> dict[str, Any]:
    """A person's ``--edit``: a JSON object of dotted recipe knobs, e.g.
    ``{"optimizer.lr": 0.005}``. Its values are the guardrails' to judge, like any proposal's;
    only its form and its knob names are checked here, before anything is written."""
    try:
        edit = json.loads(text)
    except json.JSONDecodeError as error:
        raise SettingsError(f"--edit {text!r} is not JSON ({error.msg}): give an object of "
                            """recipe knobs, e.g. --edit '{"optimizer.lr": 0.005}'""") from None
    if not isinstance(edit, dict) or not edit:
        raise SettingsError(f"--edit {text!r} is not a JSON object with at least one knob: "
                            """give e.g. --edit '{"optimizer.lr": 0.005}'""")
    return edit


class SearchSettings(StrictModel):
    """What the search measures and learns from besides the proposals: the noise floor, a
    person's own edits, the trajectories that calibrate it, and the guardrail checks it skips."""

    # baseline seeds measuring the noise floor (1 disables it); they count toward iterations
    noise_seeds: int = Field(default=3, ge=1, le=20)
    # a person's edits of the baseline, tried in order after the noise floor and before the
    # proposer's; judged by the guardrails like any proposal, counted in the iterations
    edits: tuple[dict[str, Any], ...] = ()
    # trajectory.jsonl files or campaign directories whose trials warm-start the proposers
    calibrate_from: tuple[str, ...] = ()
    skip_checks: tuple[str, ...] = ()

    @field_validator("edits")
    @classmethod
    def _known_knobs(cls, edits: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        """An unknown knob is a typo: refused before the night, not rejected at 2 a.m."""
        knobs = recipe_knobs()
        for edit in edits:
            for name in sorted(set(edit) - set(knobs)):
                close = difflib.get_close_matches(name, knobs, n=1)
                hint = f"did you mean {close[0]}? " if close else ""
                raise ValueError(f"--edit names no recipe knob {name!r}; {hint}'recipelab "
                                 "space' lists the searched knobs")
        return edits


class ProposerSettings(StrictModel):
    """Who proposes the candidates: the kind, the LLM's endpoint and share, the classical
    proposer's sampler (only the proposer factory reads it, so it lives here)."""

    kind: Literal["classical", "llm", "hybrid"] | None = None  # None: hybrid with an LLM
    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_share: float = Field(default=0.3, ge=0.0, le=1.0)
    llm_structured_output: Literal["auto", "json_schema", "json_object", "guided_json", "nvext",
                                   "prompt"] | None = None
    sampler: Literal["tpe", "cmaes", "random"] = "tpe"
    # how long the LLM's first turn waits for a server still loading its model; later turns
    # look once, and the hybrid's circuit breaker spaces them
    llm_ready_timeout_s: float = Field(default=120.0, ge=0.0)

    def llm_configured(self) -> bool:
        """An LLM endpoint is set here or in ``RECIPELAB_LLM_BASE_URL``."""
        return bool(self.llm_base_url or environment.read(environment.LLM_BASE_URL))

    def name(self) -> str:
        """The proposer the campaign builds: ``kind``, else the hybrid with an LLM."""
        if self.kind is not None:
            return self.kind
        return "hybrid" if self.llm_configured() else "classical"


UNIFIED_MEMORY_RESERVE_GIB = 24.0
"""Memory kept free on a unified-memory device (GB10) for the LLM server beside the trials.

An 8B model served in bf16 (Llama-3.1-8B-Instruct, the NIM most users run on a Spark) holds
8.0e9 x 2 B = 15 GiB of weights; its KV cache is 2 x 32 layers x 8 KV heads x 128 x 2 B =
128 KiB per token, so 32k tokens of context in flight take 4 GiB; the CUDA context,
activations and the server's own process add 2-3 GiB. That is about 22 GiB; 24 GiB leaves a
little slack. A server told to take a share of the memory (vLLM's
``gpu_memory_utilization``) needs ``--memory-reserve-gib`` set to that share instead.
"""


class ExecutorSettings(StrictModel):
    """Where and on what trials run: local subprocesses or Ray tasks, how many at once, with
    how many threads, on which device, with how much device memory kept free."""

    kind: Literal["local", "ray"] = "local"
    ray_address: str | None = None  # None: a local Ray instance; "auto": the running cluster
    # trials in flight at once; auto: what pays on this machine (recipelab.agent.machine)
    parallel: Annotated[int, Field(ge=1, le=1024)] | Literal["auto"] = "auto"
    # CPU threads per trial; None: the cores shared out among the trials in flight
    threads: int | None = Field(default=None, ge=1, le=1024)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # device memory kept free for an LLM server; a new campaign on unified memory starts
    # with UNIFIED_MEMORY_RESERVE_GIB instead (recipelab.agent.preflight)
    memory_reserve_gib: float = Field(default=0.0, ge=0)

    @property
    def trials_sharing_memory(self) -> int:
        """Trials sharing one device's memory at once: ``parallel`` for local trials (1 while
        it is still ``auto``), 1 for Ray tasks, which each have a device of their own."""
        if self.kind == "ray" or isinstance(self.parallel, str):
            return 1
        return self.parallel

    @property
    def trials_in_flight(self) -> int:
        """``parallel`` once resolved. Raises SettingsError while it is still ``auto``."""
        if isinstance(self.parallel, str):
            raise SettingsError(
                "--parallel auto has not been resolved for this machine yet: pass the settings "
                "through recipelab.agent.machine.resolve (recipelab run does) or give "
                "--parallel a number")
        return self.parallel

    def trial_threads(self, cores: int | None = None) -> int | None:
        """Threads each trial gets: ``threads`` if set; for local trials, this machine's
        cores shared out among the ``parallel`` trials in flight (at least one each), since
        trials that all use every core spin against each other; for Ray, the task's own."""
        if self.threads is not None or self.kind == "ray":
            return self.threads
        return max(1, (cores or usable_cores()) // self.trials_in_flight)


class StoreSettings(StrictModel):
    """Where the records go besides ``trajectory.jsonl``."""

    db: str | None = None  # None: SQLite in the campaign directory; else a SQLAlchemy URL
    mlflow_uri: str | None = None  # each trial a child run of the campaign's run (tracking.py)


COMPONENTS: dict[str, type[StrictModel]] = {
    "window": WindowSettings, "ladder": LadderSettings, "search": SearchSettings,
    "proposer": ProposerSettings, "executor": ExecutorSettings, "store": StoreSettings,
}
"""Each component by the name :class:`~recipelab.agent.settings.CampaignSettings` holds it."""


def flat_key(component: str, field: str) -> str:
    """A component field's flat spelling: its own name, or the component's for ``kind``."""
    return component if field == "kind" else field


FLAT_KEYS: dict[str, tuple[str, str]] = {
    flat_key(component, field): (component, field)
    for component, model in COMPONENTS.items() for field in model.model_fields}
"""Flat key -> (component, field), derived from the components' fields."""

if len(FLAT_KEYS) != sum(len(model.model_fields) for model in COMPONENTS.values()):
    raise TypeError("two settings components spell a field the same flat way: rename one, since "
                    "flat settings (old settings.json files, run's options) could not tell them apart")


def nest(data: dict[str, object]) -> dict[str, object]:
    """``data`` with every flat component key moved into its component: a component given as
    a dict or a model keeps its values, the flat keys given beside it win. Keys that are
    neither stay where they are, for validation to accept or name."""
    nested: dict[str, object] = {}
    flat: dict[str, dict[str, object]] = {}
    for key, value in data.items():
        if key in COMPONENTS and isinstance(value, (dict, BaseModel)):
            nested[key] = value
        elif key in FLAT_KEYS:
            component, field = FLAT_KEYS[key]
            flat.setdefault(component, {})[field] = value
        else:
            nested[key] = value
    for component, values in flat.items():
        given = nested.get(component)
        base = (given.model_dump() if isinstance(given, BaseModel)
                else dict(given) if isinstance(given, dict) else {})
        nested[component] = {**base, **values}
    return nested
