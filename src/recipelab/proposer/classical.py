"""The built-in classical proposer: Optuna's samplers over the declared search space.

It needs no LLM, so it is the proposer of a campaign without one, the baseline an LLM
proposer has to beat, and the sampler a hybrid proposer falls back on.

The proposer keeps no state between calls. Each :meth:`ClassicalProposer.propose` builds a
fresh in-memory study, replays the history into it as finished trials and asks the sampler
for ``n`` points. A resumed campaign therefore proposes exactly what the interrupted one
would have, and the trajectory stays the only memory. The sampler's seed mixes the
proposer's ``seed`` with the length of the history, so successive calls differ while the
same history always gives the same proposals.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.samplers import BaseSampler, CmaEsSampler, RandomSampler, TPESampler
from optuna.trial import FrozenTrial, TrialState, create_trial

from recipelab.proposer.base import Observation, Proposal, Proposer
from recipelab.proposer.sampler_state import SamplerState, sampler_state
from recipelab.proposer.space import SearchSpace
from recipelab.recipe import Recipe, upgrade_knobs

# A proposer is called inside a campaign whose own logs say what happened; Optuna's
# per-trial INFO lines would only be noise there.
optuna.logging.set_verbosity(optuna.logging.WARNING)

SamplerName = Literal["tpe", "cmaes", "random"]
SAMPLER_LABELS: dict[str, str] = {"tpe": "TPE", "cmaes": "CMA-ES", "random": "random"}

TPE_STARTUP_TRIALS = 10  # complete trials before TPE models rather than samples at random
CMAES_WARM_START_TRIALS = 10  # warm start keeps the best 10 %, so it needs ten trials
ASKS_PER_PROPOSAL = 10  # re-asks allowed per proposal when the sampler repeats a point
HYPOTHESIS_CHARS = 200
SIGNIFICANT_DIGITS = 6


def history_seed(seed: int, history_length: int) -> int:
    """A sampler seed that differs per call yet is a pure function of (seed, history)."""
    return int(np.random.SeedSequence([seed, history_length]).generate_state(1)[0])


def _round(value: float) -> float:
    return float(f"{value:.{SIGNIFICANT_DIGITS}g}")


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def hypothesis_line(label: str, edit: dict[str, Any], parent: dict[str, Any],
                    rationale: str) -> str:
    """``"TPE: lr 0.01→0.0052, warmup_steps 2→0; <rationale>"`` within the length limit.

    Knobs are named by their last dotted part (unique within a recipe). When not every change
    fits, the line lists what fits and counts the rest.
    """
    changes = [f"{name.rsplit('.', 1)[-1]} {_short(parent[name])}→{_short(value)}"
               for name, value in edit.items()]
    for shown in range(len(changes), 0, -1):
        listed = ", ".join(changes[:shown])
        if shown < len(changes):
            listed += f" (+{len(changes) - shown} more)"
        line = f"{label}: {listed}; {rationale}"
        if len(line) <= HYPOTHESIS_CHARS:
            return line
    return f"{label}: {len(changes)} knobs changed; {rationale}"[:HYPOTHESIS_CHARS]


@dataclass(frozen=True)
class Suggestion:
    """What one call of the sampler gives: candidates, the points of the space they lie at
    (in the same order), and the sampler's state when it was asked for and readable."""

    sampler: str  # the sampler's label, e.g. "TPE"
    points: list[dict[str, Any]]
    proposals: list[Proposal]
    state: SamplerState | None


def _suggest(trial: optuna.Trial, name: str, distribution: BaseDistribution) -> Any:
    """``trial``'s value for ``name`` from ``distribution`` (Optuna's suggest API by type)."""
    if isinstance(distribution, CategoricalDistribution):
        return trial.suggest_categorical(name, distribution.choices)
    if isinstance(distribution, IntDistribution):
        return trial.suggest_int(name, distribution.low, distribution.high, log=distribution.log)
    assert isinstance(distribution, FloatDistribution)
    return trial.suggest_float(name, distribution.low, distribution.high, log=distribution.log)


class ClassicalProposer(Proposer):
    """Proposes points of ``space`` with Optuna's TPE, CMA-ES or random sampler.

    History becomes trials as follows: a complete observation with a finite ``val_bpb`` is
    a COMPLETE trial with that value; failed and rejected observations are FAIL trials,
    which Optuna's samplers leave out of their models (a rejected point says nothing about
    loss); running observations (trials in flight while the campaign runs several at once)
    are RUNNING trials, which TPE's constant liar treats as bad so a batch does not pile onto
    points already being trained; interrupted observations, and any whose knobs are missing
    from or outside the space (for example proposed by an LLM outside the declared ranges),
    are left out.

    ``priors`` are trials of earlier campaigns (calibration) whose ``val_bpb`` is relative to
    their own campaign's baseline. They enter every study before the history, scaled by this
    campaign's baseline val_bpb once it is known, so the sampler starts from what earlier
    campaigns learned instead of from random start-up points.

    CMA-ES in Optuna learns only from trials it generated itself, which a fresh study has
    none of, so once ten complete trials exist it is warm-started from them instead
    (WS-CMA-ES: the initial Gaussian fits the best tenth). Categorical knobs are sampled at
    random by CMA-ES.

    Conditional knobs are sampled define-by-run: a knob is asked for only once the knobs it
    depends on are sampled and hold the values it needs, and a trial records only the knobs
    active at its point, so TPE (``group=True``) models each conditional subspace apart.
    """

    name = "classical"

    def __init__(self, baseline: Recipe, baseline_id: str | None, space: SearchSpace,
                 sampler: SamplerName = "tpe", seed: int = 0,
                 priors: Sequence[Observation] = ()) -> None:
        if sampler not in get_args(SamplerName):
            raise ValueError(
                f"unknown sampler {sampler!r}; choose one of {', '.join(get_args(SamplerName))}"
            )
        space.check_fits(baseline)
        self.baseline = baseline
        self.baseline_id = baseline_id
        self.space = space
        self.sampler = sampler
        self.seed = seed
        self.priors = tuple(priors)
        self.proposer_name = f"{self.name}-{sampler}"

    def propose(self, history: list[Observation], n: int) -> list[Proposal]:
        """Up to ``n`` distinct proposals; fewer only if the sampler keeps repeating points."""
        return self.suggest(history, n, with_state=False).proposals

    def suggest(self, history: list[Observation], n: int, *,
                with_state: bool = True) -> Suggestion:
        """Up to ``n`` candidates as :meth:`propose` makes them, with the points of the space
        they lie at and, when ``with_state``, what the sampler believes (its
        :class:`~recipelab.proposer.sampler_state.SamplerState`, or None when it has none to
        show or Optuna's internals moved). The candidates are exactly :meth:`propose`'s:
        the state is read after they are drawn, so reading it never changes a proposal.
        """
        with warnings.catch_warnings():
            # Optuna flags warm-started CMA-ES and TPE's group decomposition as experimental
            # on every call; both are deliberate (see the class docstring), so it is noise.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study, sampler, n_complete = self._study(history)
            points = self._sample_from(study, n)
            state = None
            if with_state:
                importance, _ = knob_importance(self.space, self.baseline, history)
                state = sampler_state(study, sampler, self.space, importance)
        parent = self.baseline.knobs()
        rationale = self._rationale(n_complete)
        if self.priors:
            rationale += f" (with {len(self.priors)} trials of earlier campaigns)"
        label = SAMPLER_LABELS[self.sampler]
        proposals = []
        for point in points:
            edit = self.space.resolve(point, parent)
            proposals.append(Proposal.from_edit(
                self.baseline, self.baseline_id, edit,
                hypothesis_line(label, edit, parent, rationale), self.proposer_name,
            ))
        return Suggestion(label, points, proposals, state)

    def trials(self, history: Sequence[Observation]) -> list[FrozenTrial]:
        """The trials the sampler is told on every call: the priors (scaled by this
        campaign's baseline), then each observation it can place in the space, with the
        values actually trained, whoever proposed them (an LLM's pick included)."""
        distributions = self.space.distributions()
        trials = [trial for obs in history
                  if (trial := self._as_trial(obs, distributions)) is not None]
        scale = self._baseline_scale(trials)
        return [trial for obs in self.priors
                if (trial := self._as_trial(obs, distributions, scale)) is not None] + trials

    def _study(self, history: list[Observation]) -> tuple[optuna.Study, BaseSampler, int]:
        """A fresh study told every trial of :meth:`trials`, its sampler, and how many of
        those trials are complete."""
        trials = self.trials(history)
        complete = [trial for trial in trials if trial.state == TrialState.COMPLETE]
        sampler = self._make_sampler(history_seed(self.seed, len(history)), complete)
        study = optuna.create_study(direction="minimize", sampler=sampler)
        study.add_trials(trials)
        return study, sampler, len(complete)

    def _sample_from(self, study: optuna.Study, n: int) -> list[dict[str, Any]]:
        """Up to ``n`` distinct points other than the baseline's and those in flight.

        A point the sampler repeats (the baseline, or one already asked in this call) is
        asked again, within a bound, since proposing it twice would waste a trial.
        """
        baseline = self.baseline.knobs()
        seen = {self._key(self.space.point_of(baseline, baseline))}
        seen |= {self._key(trial.params) for trial in study.get_trials(deepcopy=False)
                 if trial.state == TrialState.RUNNING}
        points: list[dict[str, Any]] = []
        for _ in range(n * ASKS_PER_PROPOSAL):
            if len(points) == n:
                break
            point = self._point(self._ask(study, baseline))
            key = self._key(point)
            if key not in seen:
                seen.add(key)
                points.append(point)
        return points

    def _ask(self, study: optuna.Study, parent: dict[str, Any]) -> dict[str, Any]:
        """One point, define-by-run: each knob in declaration order, if active by then."""
        trial = study.ask()
        params: dict[str, Any] = {}
        for knob in self.space.knobs:
            if knob.active({**parent, **params}):
                params[knob.name] = _suggest(trial, knob.name, knob.distribution())
        return params

    @staticmethod
    def _key(point: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
        return tuple(sorted((name, (type(value).__name__, value)) for name, value in point.items()))

    def _baseline_scale(self, trials: list[FrozenTrial]) -> float:
        """What a prior's relative val_bpb of 1.0 means in this campaign: the mean of the
        complete trials at the baseline's point (its seeds), else of every complete trial,
        else 1.0 (no trial yet, so relative values are the only scale there is)."""
        base = self.space.point_of(self.baseline.knobs(), self.baseline.knobs())
        complete = [t.value for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
        at_base = [t.value for t in trials if t.state == TrialState.COMPLETE and t.value is not None
                   and t.params == base]
        values = at_base or complete
        return float(np.mean(values)) if values else 1.0

    def _as_trial(self, obs: Observation, distributions: dict[str, BaseDistribution],
                  scale: float | None = None) -> FrozenTrial | None:
        """``obs`` as an Optuna trial, or None when it cannot be placed in the space.

        Only the knobs active at the observation's point are its params. A prior (``scale``
        given) has a relative val_bpb, multiplied by ``scale``; a knob of this space it lacks
        is taken at the baseline's value (an earlier campaign that did not search a knob
        left it at its default).
        """
        base, knobs = self.baseline.knobs(), upgrade_knobs(obs.knobs)
        if scale is None and any(name not in knobs for name in self.space.names()):
            return None
        params = self.space.point_of({**base, **knobs}, base)
        if any(not self.space.knob(name).contains(value) for name, value in params.items()):
            return None
        used = {name: distributions[name] for name in params}
        if obs.status == "complete" and obs.val_bpb is not None and math.isfinite(obs.val_bpb):
            return create_trial(value=obs.val_bpb * (scale or 1.0), params=params,
                                distributions=used)
        if obs.status in ("failed", "rejected"):
            return create_trial(state=TrialState.FAIL, params=params, distributions=used)
        if obs.status == "running":
            return create_trial(state=TrialState.RUNNING, params=params, distributions=used)
        return None

    def _make_sampler(self, seed: int, complete: list[FrozenTrial]) -> BaseSampler:
        if self.sampler == "tpe":
            # constant_liar treats points asked earlier in this call as bad, so a batch
            # spreads out instead of piling onto the same optimum.
            return TPESampler(seed=seed, multivariate=True, group=True, constant_liar=True,
                              n_startup_trials=TPE_STARTUP_TRIALS)
        if self.sampler == "cmaes":
            return CmaEsSampler(seed=seed, warn_independent_sampling=False,
                                source_trials=self._warm_start(complete))
        return RandomSampler(seed=seed)

    def _warm_start(self, complete: list[FrozenTrial]) -> list[FrozenTrial] | None:
        """The complete trials restricted to the knobs CMA-ES models, once there are enough.

        Optuna only warm-starts from trials whose distributions are exactly CMA-ES's search
        space: the numeric knobs whose range is more than one value and that every complete
        trial has (a conditional knob whose condition some trial did not meet is left out).
        """
        everywhere = set(self.space.names()).intersection(*(t.params for t in complete))
        numeric = {knob.name: dist for knob in self.space.knobs if knob.name in everywhere
                   and not isinstance(dist := knob.distribution(), CategoricalDistribution)
                   and not dist.single()}
        if not numeric or len(complete) < CMAES_WARM_START_TRIALS:
            return None
        return [create_trial(value=trial.value,
                             params={name: trial.params[name] for name in numeric},
                             distributions=numeric)
                for trial in complete]

    def _point(self, params: dict[str, Any]) -> dict[str, Any]:
        """Sampled params as recipe values: ints stay ints, floats keep 6 significant digits."""
        point: dict[str, Any] = {}
        for knob in self.space.knobs:
            if knob.name not in params:
                continue
            value = params[knob.name]
            if knob.choices is None and not knob.integer:
                assert knob.low is not None and knob.high is not None  # a float range
                value = min(max(_round(value), knob.low), knob.high)
            point[knob.name] = value
        return point

    def _rationale(self, n_complete: int) -> str:
        if self.sampler == "tpe":
            if n_complete >= TPE_STARTUP_TRIALS:
                return f"model of {n_complete} trials expects lower val_bpb"
            return f"random start-up, {n_complete}/{TPE_STARTUP_TRIALS} trials before TPE models"
        if self.sampler == "cmaes":
            if n_complete >= CMAES_WARM_START_TRIALS:
                return f"Gaussian fitted to the best tenth of {n_complete} trials"
            return (f"default search distribution, {n_complete}/{CMAES_WARM_START_TRIALS} "
                    "trials before warm start")
        return "random search, exploring the space"


IMPORTANCE_MIN_TRIALS = 8
IMPORTANCE_QUANTILE = 0.25  # PED-ANOVA's "good" trials: the best quarter


def knob_importance(space: SearchSpace, baseline: Recipe,
                    history: Sequence[Observation]) -> tuple[dict[str, float], int]:
    """How much each knob explains which complete trials are among the best, and over how
    many trials; empty below :data:`IMPORTANCE_MIN_TRIALS`.

    PED-ANOVA (Watanabe et al. 2023) over the knobs every complete trial has and that vary
    among them: Optuna's evaluator that needs no extra dependency and takes milliseconds,
    so the LLM can be shown it every turn.
    """
    proposer = ClassicalProposer(baseline, None, space)
    distributions = space.distributions()
    complete = [trial for obs in history if obs.status == "complete"
                and (trial := proposer._as_trial(obs, distributions)) is not None]
    if len(complete) < IMPORTANCE_MIN_TRIALS:
        return {}, len(complete)
    varying = [name for name in space.names()
               if all(name in trial.params for trial in complete)
               and len({repr(trial.params[name]) for trial in complete}) > 1]
    if not varying:
        return {}, len(complete)
    study = optuna.create_study(direction="minimize")
    study.add_trials(complete)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PED-ANOVA is flagged experimental on every call
        evaluator = optuna.importance.PedAnovaImportanceEvaluator(
            target_quantile=IMPORTANCE_QUANTILE)
        found = optuna.importance.get_param_importances(study, evaluator=evaluator,
                                                        params=varying)
    return {name: float(value) for name, value in found.items()}, len(complete)
