"""The components of a campaign's settings, one small model per concern.

Each component validates itself and owns the rules that read only its own fields (the
window its deadline, the ladder its rungs, the executor its threads), so a reader asks
``settings.ladder.promote`` and a rule about the ladder lives beside the ladder's fields.
:data:`COMPONENTS` names them as :class:`~recipelab.agent.setup.settings.CampaignSettings` holds
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
from recipelab.recipe import StrictModel
from recipelab.targets import proxy_recipe
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

    iterations: int | None = Field(
        default=None, ge=0, description="proxy trials to train",
        json_schema_extra={"default_means": "no count; run needs this, --window.hours or --window.until"})
    hours: float | None = Field(default=None, gt=0,
                                description="stop launching after this many hours",
                                json_schema_extra={"default_means": "no limit"})
    until: str | None = Field(default=None,
                              description="stop launching at this local time, HH:MM",
                              json_schema_extra={"default_means": "no limit"})
    trial_timeout_s: float = Field(default=600.0, gt=0, description="seconds per proxy trial")
    max_consecutive_failures: int = Field(default=5, ge=1, description=(
        "stop launching after this many proxy trials in a row fail with the same reason; the "
        "command then exits with code 3"))
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

    promote: int = Field(default=PROMOTE, ge=0, description=(
        "finalists on the ladder's top rung (the stress horizon), each at --ladder.top-seeds seeds "
        "with the baseline; 0: no ladder"))
    stress_steps: int = Field(default=1000, ge=1, description=(
        "steps of the ladder's top rung, the stress horizon"))
    stress_log_every: int = Field(default=50, ge=1)
    stress_checkpoint_every: int = Field(default=50, ge=1)
    fidelity: int = Field(default=0, ge=0, description=(
        "also stress-run K mid-ranked trials, for the proxy-to-stress rank agreement"))
    # fresh seeds (trajectory.ladder.top_rung_seeds), never those the lower rungs ranked on
    top_seeds: int = Field(default=TOP_SEEDS, ge=2, le=20, description=(
        "fresh seeds of every finalist, the baseline and its learning-rate family at the top "
        "rung, where the winner is named only when its own paired interval over the tuned "
        "baseline excludes 0 (Bonferroni over the finalists and the close call): more seeds, a "
        "narrower interval; 'recipelab stress' with more than the campaign ran adds the "
        "missing seeds"))
    close_call_seeds: int = Field(default=CLOSE_CALL_SEEDS, ge=0, le=20, description=(
        "when the top rung's best finalist gains but its interval includes 0, train it and "
        "the tuned baseline at this many more seeds there for a second look before keeping "
        "the baseline; 0: keep it at once (and the first look keeps all the error)"))
    eta: int = Field(default=3, ge=2, description=(
        "the ladder (successive halving, ASHA-style): each rung keeps the best 1/ETA of the "
        "one below at ETA times its steps, up to --ladder.stress-steps; the baseline climbs every "
        "rung"))
    rung_size: int = Field(default=10, ge=0, description=(
        "at most N candidates climb to the ladder's first rung above the proxy; 0 goes "
        "straight from the proxy to the top rung"))
    rung_steps: int | None = Field(default=None, ge=1, description=(
        "steps of the ladder's first rung above the proxy; each rung above it has --ladder.eta times "
        "more"), json_schema_extra={"default_means": "proxy steps × --ladder.eta"})
    horizon_rule: bool = Field(default=True, description=(
        "train every rung at the learning rate the horizon rule gives for its tokens, "
        "lr ∝ tokens^-alpha, alpha fitted from the baseline's learning-rate family (lr × ½, "
        "× 2) and shrunk toward the published 0.32"))
    attribution: bool = Field(default=True, description=(
        "after the winner is named, measure which groups of its edit carry the gain and "
        "recommend the minimal winning edit"))
    width_rung: bool = Field(default=True, description=(
        "then train the recommendation at the proxy's width and twice it, at the top rung's "
        "tokens, so the export predicts a larger target with a measured size term"))
    compile_stress: bool = Field(default=False, description=(
        "torch.compile stress runs (cache in ~/.cache/recipelab): they run long enough to win "
        "back the compile time"))
    # a ranking on repeated text ranks regularization, not what a cloud run reads
    repeat_text: bool = Field(default=False, description=(
        "let the longest run read the training text more than once; without it the preflight "
        "refuses a corpus smaller than the longest run"))

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

    noise_seeds: int = Field(default=3, ge=1, le=20, description=(
        "baseline seeds measuring the noise floor, counted in --window.iterations; 1 disables"))
    # tried in order after the noise floor and before the proposer's, counted in the iterations
    edits: tuple[dict[str, Any], ...] = Field(default=(), description=(
        "your own edit of the baseline as JSON, e.g. '{\"optimizer.lr\": 0.005}', tried "
        "before the proposer's and judged by the guardrails (repeatable)"))
    calibrate_from: tuple[str, ...] = Field(default=(), description=(
        "an earlier campaign's directory or trajectory.jsonl to learn from (repeatable)"))
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

    kind: Literal["classical", "llm", "hybrid"] | None = Field(
        default=None, description="classical, llm or hybrid",
        json_schema_extra={"default_means": "hybrid when an LLM is configured, else classical"})
    llm_base_url: str | None = Field(
        default=None, description="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1",
        json_schema_extra={"default_means": f"${environment.LLM_BASE_URL}"})
    llm_model: str | None = Field(default=None, description="model id", json_schema_extra={
        "default_means": f"${environment.LLM_MODEL}, else the server's first"})
    llm_share: float = Field(default=0.3, ge=0.0, le=1.0,
                             description="share of trials the LLM proposes in hybrid mode")
    llm_structured_output: Literal["auto", "json_schema", "json_object", "guided_json", "nvext",
                                   "prompt"] | None = Field(default=None, description=(
        "how the LLM's reply is constrained: auto, json_schema (OpenAI, vLLM), json_object "
        "(llama.cpp), guided_json (NIM 1.x), nvext or prompt"),
        json_schema_extra={"default_means": "auto"})
    sampler: Literal["tpe", "cmaes", "random"] = Field(default="tpe",
                                                       description="tpe, cmaes or random")
    # the hybrid's circuit breaker spaces the later looks
    llm_ready_timeout_s: float = Field(default=120.0, ge=0.0, description=(
        "seconds the LLM's first turn waits for a server still loading its model; later turns "
        "look once"))

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

    kind: Literal["local", "ray"] = Field(default="local", description=(
        "where trials run: local or ray (pip install 'recipelab[ray]')"))
    ray_address: str | None = Field(
        default=None, description="Ray cluster: auto (the one 'ray start' set up here) or HOST:PORT",
        json_schema_extra={"default_means": "a new Ray instance on this machine"})
    # auto: what pays on this machine (recipelab.agent.setup.machine)
    parallel: Annotated[int, Field(ge=1, le=1024)] | Literal["auto"] = Field(
        default="auto", description="trials in flight at once: auto or a number",
        json_schema_extra={"default_means": "on a CPU one 1-thread trial per core, as memory "
                                            "allows; on a GPU one; with Ray the cluster's GPUs"})
    threads: int | None = Field(
        default=None, ge=1, le=1024, description="CPU threads per trial",
        json_schema_extra={"default_means": "the cores divided among --executor.parallel trials"})
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="auto, cpu or cuda",
        json_schema_extra={"default_means": "cuda when there is one"})
    # a new campaign on unified memory starts with UNIFIED_MEMORY_RESERVE_GIB instead
    # (recipelab.agent.setup.preflight)
    memory_reserve_gib: float = Field(
        default=0.0, ge=0, description="device memory kept free for an LLM server sharing the GPU",
        json_schema_extra={"default_means": f"or {UNIFIED_MEMORY_RESERVE_GIB:g} on unified memory "
                                           "such as a GB10"})

    @property
    def parallel_on_one_device(self) -> int:
        """Trials sharing one device's memory at once: ``parallel`` for local trials (1 while
        it is still ``auto``), 1 for Ray tasks, which each have a device of their own."""
        if self.kind == "ray" or isinstance(self.parallel, str):
            return 1
        return self.parallel

    @property
    def resolved_parallel(self) -> int:
        """``parallel`` once resolved. Raises SettingsError while it is still ``auto``."""
        if isinstance(self.parallel, str):
            raise SettingsError(
                "--parallel auto has not been resolved for this machine yet: pass the settings "
                "through recipelab.agent.setup.machine.resolve (recipelab run does) or give "
                "--parallel a number")
        return self.parallel

    def trial_threads(self, cores: int | None = None) -> int | None:
        """Threads each trial gets: ``threads`` if set; for local trials, this machine's
        cores shared out among the ``parallel`` trials in flight (at least one each), since
        trials that all use every core spin against each other; for Ray, the task's own."""
        if self.threads is not None or self.kind == "ray":
            return self.threads
        return max(1, (cores or usable_cores()) // self.resolved_parallel)


class StoreSettings(StrictModel):
    """Where the records go besides ``trajectory.jsonl``."""

    db: str | None = Field(
        default=None, description="trajectory database URL, e.g. postgresql+psycopg://user@host/db",
        json_schema_extra={"default_means": "SQLite in the campaign directory"})
    mlflow_uri: str | None = Field(default=None, description=(
        "also log to MLflow: the campaign is one run, each trial a child run with its recipe, "
        "val_bpb and curve; a tracking server (http://HOST:5000), sqlite:///PATH/mlflow.db or a "
        "directory (pip install 'recipelab[mlflow]')"), json_schema_extra={"default_means": "none"})


COMPONENTS: dict[str, type[StrictModel]] = {
    "window": WindowSettings, "ladder": LadderSettings, "search": SearchSettings,
    "proposer": ProposerSettings, "executor": ExecutorSettings, "store": StoreSettings,
}
"""Each component by the name :class:`~recipelab.agent.setup.settings.CampaignSettings` holds it."""


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
