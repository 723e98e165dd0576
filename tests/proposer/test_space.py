"""Knob and SearchSpace: declarations, membership, Optuna distributions and descriptions."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from recipelab.proposer import Knob, SearchSpace, default_space
from recipelab.recipe import Optimizer, proxy_recipe

TINY = proxy_recipe("tiny")


def test_default_space_is_relative_to_the_baseline() -> None:
    space = {knob.name: knob for knob in default_space(TINY).knobs}
    assert TINY.optimizer.lr == 1e-2 and TINY.steps == 20 and TINY.batch_size == 8
    assert space["optimizer.lr"] == Knob("optimizer.lr", 1e-3, 0.1, log=True)
    assert space["schedule.warmup_steps"] == Knob("schedule.warmup_steps", 0, 6, integer=True)
    assert space["batch_size"].choices == (4, 8, 16)
    assert space["schedule.kind"].choices == ("cosine", "linear", "constant-cooldown")
    assert set(space) == {"optimizer.lr", "optimizer.beta2", "optimizer.weight_decay",
                          "optimizer.grad_clip", "schedule.kind", "schedule.warmup_steps",
                          "schedule.min_lr_ratio", "batch_size"}


def test_default_space_edges() -> None:
    odd = TINY.model_copy(update={"optimizer": Optimizer(lr=0.5), "batch_size": 1, "steps": 2})
    space = {knob.name: knob for knob in default_space(odd).knobs}
    assert space["optimizer.lr"].high == 1.0
    assert space["batch_size"].choices == (1, 2)
    assert space["schedule.warmup_steps"].high == 1


def test_default_space_searches_no_shape_knob() -> None:
    assert default_space(TINY).searchable_shape_knobs() == frozenset()


def test_shape_knobs_are_reported_as_searchable() -> None:
    space = SearchSpace((Knob("shape.qk_norm", choices=(True, False)),
                         Knob("shape.n_layer", 2, 8, integer=True),
                         Knob("optimizer.lr", 1e-3, 1e-1, log=True)))
    assert space.searchable_shape_knobs() == {"shape.qk_norm", "shape.n_layer"}
    assert space.names() == ["shape.qk_norm", "shape.n_layer", "optimizer.lr"]


def test_distributions() -> None:
    dists = default_space(TINY).distributions()
    assert dists["optimizer.lr"] == FloatDistribution(1e-3, 0.1, log=True)
    assert dists["schedule.warmup_steps"] == IntDistribution(0, 6)
    assert dists["batch_size"] == CategoricalDistribution((4, 8, 16))


@pytest.mark.parametrize(("knob", "value", "inside"), [
    (Knob("x", 0.0, 1.0), 0.5, True),
    (Knob("x", 0.0, 1.0), 1, True),
    (Knob("x", 0.0, 1.0), 1.5, False),
    (Knob("x", 0.0, 1.0), float("nan"), False),
    (Knob("x", 0.0, 1.0), True, False),
    (Knob("x", 0.0, 1.0), "0.5", False),
    (Knob("x", 0, 6, integer=True), 3, True),
    (Knob("x", 0, 6, integer=True), 3.0, False),
    (Knob("x", choices=(True, False)), False, True),
    (Knob("x", choices=(True, False)), 0, False),
    (Knob("x", choices=(0, 1)), False, False),
    (Knob("x", choices=("cosine", "linear")), "step", False),
    (Knob("x", choices=(4, 8)), None, False),
])
def test_contains(knob: Knob, value: Any, inside: bool) -> None:
    assert knob.contains(value) is inside


@given(low=st.floats(-1e6, 1e6), width=st.floats(0, 1e6), t=st.floats(0, 1))
def test_contains_every_point_of_its_range(low: float, width: float, t: float) -> None:
    knob = Knob("x", low, low + width)
    assert knob.contains(min(low + t * width, low + width))
    assert not knob.contains(low + width + max(1.0, width))


def test_describe() -> None:
    assert Knob("optimizer.lr", 1e-4, 3e-2, log=True).describe() == (
        "optimizer.lr: float in [0.0001, 0.03], log scale")
    assert Knob("schedule.warmup_steps", 0, 6, integer=True).describe() == (
        "schedule.warmup_steps: integer in [0, 6]")
    assert Knob("shape.qk_norm", choices=(True, False)).describe() == (
        "shape.qk_norm: one of True, False")
    text = default_space(TINY).describe()
    assert text.splitlines()[0] == "optimizer.lr: float in [0.001, 0.1], log scale"
    assert "schedule.kind: one of 'cosine', 'linear', 'constant-cooldown'" in text
    assert len(text.splitlines()) == 8


@pytest.mark.parametrize(("kwargs", "message"), [
    ({}, "give a range"),
    ({"low": 0.0}, "give a range"),
    ({"low": 2.0, "high": 1.0}, "low <= high"),
    ({"low": 0.0, "high": float("inf")}, "finite"),
    ({"low": 0.0, "high": 1.0, "log": True}, "low > 0"),
    ({"low": 0.5, "high": 4, "integer": True}, "integer bounds"),
    ({"choices": ()}, "must not be empty"),
    ({"choices": (1, 2), "low": 0.0}, "not both"),
])
def test_invalid_knobs_fail_at_construction(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Knob("x", **kwargs)


def test_a_knob_declared_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"twice: optimizer\.lr"):
        SearchSpace((Knob("optimizer.lr", 1e-3, 1e-2), Knob("optimizer.lr", 1e-4, 1e-3)))
