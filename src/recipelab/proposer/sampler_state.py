"""What a classical sampler believes, as a few lines an LLM can read.

An LLM that steers a sampler needs to see what the sampler has learned, not just its
candidates (the Centaur result, arXiv 2603.24647): for CMA-ES the search distribution (its
mean, step size and main axes), for TPE the split of the complete trials into the good and
the rest and where the good ones lie on the knobs that matter most.

Optuna keeps neither in a public object. The classical proposer builds a fresh study per
call, so CMA-ES never restores a stored optimizer: the distribution it samples from is the
one ``CmaEsSampler._init_optimizer`` builds (warm-started from the complete trials, or the
default centred one), rebuilt here the way ``CmaEsSampler.sample_relative`` does it, through
Optuna's private ``_SearchSpaceTransform``, and read from the ``cmaes`` optimizer (``mean``,
``_sigma``, ``_C``). TPE's split uses its ``_gamma`` (``default_gamma`` until it has sampled).
Those names are private and may move in any Optuna release, so :func:`sampler_state` fails
soft: when they do, the state is omitted (the prompt goes without it) rather than the turn.
A test pins that the state is present with the installed Optuna, so an upgrade that moves
them is noticed.

Call it only after the candidates are drawn: rebuilding CMA-ES's optimizer draws from the
sampler's generator, which must not change what the sampler proposes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.samplers import BaseSampler, CmaEsSampler, TPESampler
from optuna.trial import FrozenTrial, TrialState

from recipelab.proposer.space import SearchSpace

KNOBS_SHOWN = 6  # knobs a TPE state describes, the most important first
AXES_SHOWN = 2
LOADINGS_SHOWN = 3
ISOTROPIC_RATIO = 1.5  # main axes mean nothing while the covariance is nearly round
CMAES_STATE_ERRORS = (AttributeError, ImportError, TypeError, ValueError, KeyError,
                      IndexError, np.linalg.LinAlgError)


@dataclass(frozen=True)
class SamplerState:
    """The sampler's beliefs: ``lines`` for the prompt, ``data`` for the record."""

    sampler: str  # "TPE" or "CMA-ES"
    lines: tuple[str, ...]
    data: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        return "\n".join(self.lines)


def sampler_state(study: optuna.Study, sampler: BaseSampler, space: SearchSpace,
                  importance: Mapping[str, float]) -> SamplerState | None:
    """The state of ``sampler`` over ``study``, or None when it has none worth showing
    (random search, no complete trial yet) or Optuna's private names moved."""
    try:
        if isinstance(sampler, CmaEsSampler):
            return cmaes_state(study, sampler)
        if isinstance(sampler, TPESampler):
            return tpe_state(study, sampler, space, importance)
    except CMAES_STATE_ERRORS:
        return None
    return None


def _short(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def cmaes_state(study: optuna.Study, sampler: CmaEsSampler) -> SamplerState | None:
    """CMA-ES's search distribution: mean (as knob values), step size, main axes.

    Positions are in Optuna's normalised space, where every numeric knob's range is 0..1
    (log-scaled knobs on the log scale), so a step size of 0.1 is a tenth of each range.
    """
    from optuna._transform import _SearchSpaceTransform  # private: see the module docstring

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        return None
    search_space = sampler.infer_relative_search_space(study, complete[-1])
    if not search_space:
        return None
    trans = _SearchSpaceTransform(search_space, transform_step=True, transform_0_1=True)
    optimizer = sampler._init_optimizer(trans, study.direction)
    mean = np.asarray(optimizer.mean, dtype=float)
    sigma = float(optimizer._sigma)
    cov = np.asarray(optimizer._C, dtype=float)
    names = list(search_space)
    if mean.shape != (len(names),) or cov.shape != (len(names), len(names)):
        raise ValueError("CMA-ES's optimizer no longer has one dimension per numeric knob")
    at_mean = trans.untransform(mean)
    fitted = sampler._source_trials is not None
    lines = [
        "CMA-ES search distribution ("
        + ("fitted to the best tenth of the complete trials" if fitted
           else "not fitted yet: centred in every range") + f"), step size {sigma:.3g} "
        "(1.0 = a knob's whole range):",
        "mean: " + ", ".join(f"{name} {_short(at_mean[name])}" for name in names),
    ]
    eigenvalues, eigenvectors = np.linalg.eigh(cov)
    order = np.argsort(eigenvalues)[::-1]
    axes: list[dict[str, Any]] = []
    if eigenvalues[order[0]] > ISOTROPIC_RATIO * max(eigenvalues[order[-1]], 1e-300):
        for rank in order[:AXES_SHOWN]:
            vector = eigenvectors[:, rank]
            top = np.argsort(-np.abs(vector))[:LOADINGS_SHOWN]
            spread = sigma * math.sqrt(max(float(eigenvalues[rank]), 0.0))
            loads = {names[i]: round(float(vector[i]), 3) for i in top}
            axes.append({"spread": round(spread, 4), "loadings": loads})
            lines.append(f"main axis {len(axes)} (spread {spread:.3g}): " + ", ".join(
                f"{'+' if load >= 0 else '-'}{name}" for name, load in loads.items()))
    return SamplerState("CMA-ES", tuple(lines), {
        "fitted": fitted, "sigma": sigma, "mean": {k: at_mean[k] for k in names},
        "axes": axes})


def _gamma(sampler: TPESampler, n: int) -> int:
    """How many complete trials TPE counts as good, as ``TPESampler._sample`` splits them."""
    gamma = sampler._gamma
    if gamma is None:  # set on the sampler's first model-based draw
        from optuna.samplers._tpe.sampler import default_gamma
        gamma = default_gamma
    return int(gamma(n))


def tpe_state(study: optuna.Study, sampler: TPESampler, space: SearchSpace,
              importance: Mapping[str, float]) -> SamplerState | None:
    """TPE's good/bad split and where the good trials lie on the knobs that matter most."""
    complete = sorted(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)),
                      key=lambda trial: (trial.value, trial.number))
    if not complete:
        return None
    n_good = min(_gamma(sampler, len(complete)), len(complete))
    good, rest = complete[:n_good], complete[n_good:]
    threshold = good[-1].value if good else None
    startup = sampler._n_startup_trials
    lines = [
        f"TPE ({'modelling' if len(complete) >= startup else 'random start-up'}, "
        f"{len(complete)} complete trials): the best {n_good} (val_bpb <= "
        f"{_short(threshold)}) are its good trials, the other {len(rest)} the rest."
    ]
    distributions = space.distributions()
    ranked = [name for name in importance if name in distributions]
    ranked += [name for name in space.names() if name not in ranked]
    knobs: dict[str, str] = {}
    for name in ranked:
        if len(knobs) == KNOBS_SHOWN:
            break
        where = _where(name, distributions[name], good, complete)
        if where:
            share = f" (importance {importance[name]:.2f})" if name in importance else ""
            knobs[name] = where + share
    if knobs:
        lines.append("where the good trials lie: " + "; ".join(
            f"{name} {where}" for name, where in knobs.items()))
    return SamplerState("TPE", tuple(lines), {
        "complete": len(complete), "good": n_good, "threshold": threshold, "knobs": knobs})


def _where(name: str, distribution: BaseDistribution, good: list[FrozenTrial],
           every: list[FrozenTrial]) -> str:
    """``0.002..0.004 of 0.0008..0.03`` or ``'wsd' in 2 of 2``; empty when the good trials
    do not have the knob or no trial moved it (nothing to learn from a constant)."""
    good_values = [trial.params[name] for trial in good if name in trial.params]
    all_values = [trial.params[name] for trial in every if name in trial.params]
    if not good_values or len({repr(value) for value in all_values}) < 2:
        return ""
    if isinstance(distribution, CategoricalDistribution):
        top = max(set(map(repr, good_values)), key=[repr(v) for v in good_values].count)
        count = [repr(v) for v in good_values].count(top)
        return f"{top} in {count} of {len(good_values)}"
    return (f"{_short(min(good_values))}..{_short(max(good_values))} "
            f"of {_short(min(all_values))}..{_short(max(all_values))}")
