"""Knob and SearchSpace: declarations, membership, Optuna distributions and descriptions."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from recipelab.proposer import Knob, SearchSpace, default_space
from recipelab.proposer.space import SHAPE_KNOBS
from recipelab.recipe import Optimizer
from recipelab.targets import proxy_recipe

TINY = proxy_recipe("tiny")


def test_default_space_is_relative_to_the_baseline() -> None:
    space = {knob.name: knob for knob in default_space(TINY).knobs}
    assert TINY.optimizer.lr == 1e-2 and TINY.steps == 20 and TINY.batch_size == 8
    assert space["optimizer.lr"] == Knob("optimizer.lr", 1e-3, 0.1, log=True)
    assert space["schedule.warmup_steps"] == Knob("schedule.warmup_steps", 0, 6, integer=True)
    assert space["batch_size"].choices == (4, 8, 16)
    assert space["schedule.kind"].choices == ("cosine", "linear", "wsd")
    assert space["seq_len"].choices == (32, 64, 128)
    # 4 sequences of 64 tokens are 1 of 128 tokens with 2 micro-batches, and no fewer.
    assert space["grad_accum"].choices == (1, 2)
    assert space["shape.rope_base"] == Knob("shape.rope_base", 1e3, 1e5, log=True,
                                            condition=("shape.position", ("rope",)))
    # The tiny proxy ties its embeddings, so the output layer's own knobs do not exist.
    assert set(space) == {
        "optimizer.lr", "optimizer.beta1", "optimizer.beta2", "optimizer.eps",
        "optimizer.weight_decay", "optimizer.grad_clip", "optimizer.lr_embed_mult",
        "optimizer.lr_hidden_mult", "optimizer.decay_embeddings", "optimizer.decay_norms",
        "schedule.kind", "schedule.warmup_steps", "schedule.min_lr_ratio",
        "schedule.decay_fraction", "stability.z_loss", "stability.logit_softcap",
        "stability.init_std", "stability.depth_scaled_init", "shape.rope_base",
        "batch_size", "seq_len", "grad_accum"}


def test_every_combination_of_batch_seq_len_and_grad_accum_keeps_tokens_per_step() -> None:
    for baseline in (TINY, proxy_recipe("cpu")):
        space, parent = default_space(baseline), baseline.knobs()
        for batch in space.knob("batch_size").choices or ():
            for seq in space.knob("seq_len").choices or ():
                for accum in space.knob("grad_accum").choices or ():
                    point = {"batch_size": batch, "seq_len": seq, "grad_accum": accum}
                    recipe = baseline.apply(space.resolve(point, parent))
                    assert recipe.tokens_per_step == batch * baseline.seq_len, point


def test_every_default_knob_holds_the_baseline_value() -> None:
    for baseline in (TINY, proxy_recipe("cpu"), proxy_recipe("tiny", "llama2-7b", 2_000_000)):
        space = default_space(baseline, [*SHAPE_KNOBS, "precision"], precisions=("fp32", "bf16"))
        for name, value in space.point_of(baseline.knobs(), baseline.knobs()).items():
            assert space.knob(name).contains(value), name


def test_an_untied_output_layer_has_its_own_lr_multiplier_and_init_scale() -> None:
    untied = proxy_recipe("tiny", "llama2-7b", 2_000_000)
    assert not untied.shape.tie_embeddings
    names = default_space(untied).names()
    assert {"optimizer.lr_output_mult", "stability.output_init_std"} <= set(names)
    tied_but_searched = default_space(TINY, ["shape.tie_embeddings"])
    assert tied_but_searched.knob("optimizer.lr_output_mult").condition == (
        "shape.tie_embeddings", (False,))


def test_searchable_adds_shape_knobs_and_refuses_the_size_knobs() -> None:
    space = default_space(TINY, ["shape.activation", "shape.norm", "shape.qk_norm"])
    assert {"shape.activation", "shape.norm", "shape.qk_norm"} <= space.searchable_shape_knobs()
    assert space.knob("shape.activation").choices == ("swiglu", "gelu", "gelu_exact", "relu2")
    with pytest.raises(ValueError, match=r"cannot search shape.n_layer; searchable shape "
                                         r"knobs are shape.activation"):
        default_space(TINY, ["shape.n_layer"])


def test_precision_is_searched_only_on_purpose_and_among_what_the_machine_can_train() -> None:
    assert "precision" not in default_space(TINY).names()
    assert "precision" not in default_space(TINY, precisions=("fp32", "bf16")).names()
    assert "precision" not in default_space(TINY, ["precision"], precisions=("fp32",)).names()
    assert default_space(TINY, ["precision"], precisions=("fp32", "bf16")).knob(
        "precision").choices == ("fp32", "bf16")


def test_the_wsd_decay_fraction_exists_only_under_wsd() -> None:
    knob = default_space(TINY).knob("schedule.decay_fraction")
    assert knob.active({"schedule.kind": "wsd"})
    assert not knob.active({"schedule.kind": "cosine"})
    assert "only when schedule.kind is 'wsd'" in knob.describe()


def test_resolve_drops_inactive_knobs_and_keeps_tokens_per_step() -> None:
    space, parent = default_space(TINY), TINY.knobs()
    assert TINY.seq_len == 64 and TINY.grad_accum == 1
    edit = space.resolve({"schedule.kind": "cosine", "schedule.decay_fraction": 0.4,
                          "seq_len": 128, "batch_size": 16}, parent)
    assert edit == {"seq_len": 128}  # 16 sequences of 64 tokens are 8 of 128, the parent's
    edit = space.resolve({"grad_accum": 2, "seq_len": 128, "batch_size": 4}, parent)
    assert edit == {"grad_accum": 2, "seq_len": 128, "batch_size": 1}
    assert TINY.apply(edit).tokens_per_step == 4 * TINY.seq_len  # the batch size's tokens
    assert space.resolve({"batch_size": 16}, parent) == {"batch_size": 16}


def test_point_of_inverts_resolve() -> None:
    space, parent = default_space(TINY), TINY.knobs()
    point = {**space.point_of(parent, parent), "seq_len": 128, "grad_accum": 2,
             "batch_size": 16, "schedule.kind": "wsd", "schedule.decay_fraction": 0.3}
    recipe = TINY.apply(space.resolve(point, parent))
    assert recipe.batch_size == 4
    assert space.point_of(recipe.knobs(), parent) == point


def test_rows_give_name_range_default_and_condition() -> None:
    rows = {row["name"]: row for row in default_space(TINY).rows(TINY)}
    assert rows["optimizer.lr"] | {} == {
        "name": "optimizer.lr", "range": "float in [0.001, 0.1], log scale", "default": 0.01,
        "note": "", "low": 1e-3, "high": 0.1, "log": True, "integer": False}
    assert rows["schedule.decay_fraction"]["condition"] == {"knob": "schedule.kind",
                                                            "values": ["wsd"]}
    assert rows["seq_len"]["note"] == "batch_size rescales to keep tokens per step"


def test_default_space_edges() -> None:
    odd = TINY.model_copy(update={"optimizer": Optimizer(lr=0.5), "batch_size": 1, "steps": 2})
    space = {knob.name: knob for knob in default_space(odd).knobs}
    assert space["optimizer.lr"].high == 1.0
    assert space["batch_size"].choices == (1, 2)
    assert space["schedule.warmup_steps"].high == 1


def test_default_space_searches_no_shape_invariant() -> None:
    """The RoPE base is a stability knob the target sets, not a shape invariant."""
    assert default_space(TINY).searchable_shape_knobs() == frozenset({"shape.rope_base"})


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
    assert "schedule.kind: one of 'cosine', 'linear', 'wsd'" in text
    assert len(text.splitlines()) == 22


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
