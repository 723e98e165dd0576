"""What a trajectory says: which knobs matter, how ranks agree, how the best result moved.

These are the read-only questions the report and the calibration of a later campaign ask of
finished trials. They take plain :class:`TrialRecord` sequences (from a store or a JSONL
file) and never write anything.
"""

from __future__ import annotations

import json
import math
import statistics
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from recipelab.recipe import flatten
from recipelab.trajectory.record import TrialRecord

optuna.logging.set_verbosity(optuna.logging.WARNING)

MIN_IMPORTANCE_TRIALS = 4
NOT_KNOBS = frozenset({"seed"})
"""Recipe fields that are not choices: the training seed varies between the baseline's noise
seeds and seed re-runs, and what it "explains" is the noise floor, not a recipe decision."""
IMPORTANCE_TOP_QUANTILE = 0.5
_LOG_SCALE_SPAN = 10.0  # a positive numeric knob whose values span this factor is searched in log space


def scored_proxies(records: Iterable[TrialRecord]) -> list[TrialRecord]:
    """Complete proxy trials with a finite val_bpb: the trials a ranking can use."""
    return [r for r in records
            if r.kind == "proxy" and r.status == "complete"
            and r.val_bpb is not None and math.isfinite(r.val_bpb)]


def best_so_far(records: Iterable[TrialRecord]) -> list[tuple[int, float]]:
    """``(iteration, best val_bpb up to and including it)`` for every scored proxy trial, in
    iteration order (ties keep trajectory order): the line a search's progress is read from.
    A recipe counts at its mean over the seeds it has by then, so a seed re-run that drew a
    lucky seed moves its recipe's mean, not the line to its own value."""
    scored = sorted(scored_proxies(records), key=lambda r: r.iteration)
    by_recipe: dict[str, list[float]] = {}
    line: list[tuple[int, float]] = []
    for record in scored:
        assert record.val_bpb is not None
        unseeded = {k: v for k, v in record.recipe.items() if k != "seed"}
        by_recipe.setdefault(json.dumps(unseeded, sort_keys=True), []).append(record.val_bpb)
        line.append((record.iteration, min(statistics.fmean(v) for v in by_recipe.values())))
    return line


def _ranks(values: Sequence[float]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """1-based ranks with ties sharing the average of the ranks they span."""
    arr = np.asarray(values, dtype=float)
    order = np.argsort(arr, kind="stable")
    ranks = np.empty(len(arr), dtype=float)
    i = 0
    while i < len(arr):
        j = i
        while j + 1 < len(arr) and arr[order[j + 1]] == arr[order[i]]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation (ties averaged), or None when it says nothing: fewer than
    three pairs, or one side constant."""
    if len(xs) != len(ys):
        raise ValueError(f"spearman needs paired values, got {len(xs)} xs and {len(ys)} ys")
    if len(xs) < 3:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    dx, dy = rx - rx.mean(), ry - ry.mean()
    denom = math.sqrt(float((dx * dx).sum()) * float((dy * dy).sum()))
    if denom == 0.0:
        return None
    return float((dx * dy).sum()) / denom


def _distribution(values: list[Any]) -> BaseDistribution:
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        low, high = min(values), max(values)
        if all(isinstance(v, int) for v in values):
            return IntDistribution(int(low), int(high))
        log = low > 0 and high / low >= _LOG_SCALE_SPAN
        return FloatDistribution(float(low), float(high), log=log)
    return CategoricalDistribution(sorted({_categorical(v) for v in values}, key=str))


def _categorical(value: Any) -> Any:
    return value if isinstance(value, (bool, int, float, str)) or value is None else str(value)


def knob_importance(records: Sequence[TrialRecord]) -> dict[str, float]:
    """How much each varying knob decides whether a trial lands among the best val_bpb
    (Optuna's PED-ANOVA over the better half), normalised to sum to 1, most important first.

    The seed is never a knob here (:data:`NOT_KNOBS`). Empty when the trajectory cannot say:
    fewer than :data:`MIN_IMPORTANCE_TRIALS` scored
    proxy trials, no knob that varies, or a val_bpb that does not vary.
    """
    scored = scored_proxies(records)
    if len(scored) < MIN_IMPORTANCE_TRIALS:
        return {}
    knob_rows = [flatten(r.recipe) for r in scored]
    shared = set.intersection(*(set(row) for row in knob_rows))
    varying = sorted(k for k in shared - NOT_KNOBS
                     if len({repr(_categorical(row[k])) for row in knob_rows}) > 1)
    targets = [float(r.val_bpb) for r in scored if r.val_bpb is not None]
    if not varying or max(targets) == min(targets):
        return {}
    distributions = {k: _distribution([row[k] for row in knob_rows]) for k in varying}
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.RandomSampler(seed=0))
    for row, value in zip(knob_rows, targets, strict=True):
        params = {k: _categorical(row[k]) for k in varying}
        study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions,
                                                  value=value))
    # PED-ANOVA: which knob values the best trials concentrate on (needs no scikit-learn, and
    # is deterministic). Its top group needs at least two trials to say anything.
    quantile = max(IMPORTANCE_TOP_QUANTILE, 2 / len(scored))
    evaluator = optuna.importance.PedAnovaImportanceEvaluator(target_quantile=quantile)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PED-ANOVA warns that small studies are noisy; we know
        importances = optuna.importance.get_param_importances(study, evaluator=evaluator,
                                                              params=varying)
    return dict(sorted(((k, float(v)) for k, v in importances.items()),
                       key=lambda item: (-item[1], item[0])))
