"""Specification of recipelab.recipe: the Recipe, its arithmetic, targets, proxies, presets."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from recipelab.recipe import (
    FP8_WIDTH_MULTIPLE,
    Recipe,
    Schedule,
    Shape,
    param_count,
    training_flops_per_token,
)
from recipelab.targets import (
    PROXY_PRESETS,
    TARGETS,
    ProxyBudgetError,
    Target,
    derive_proxy,
    get_target,
    proxy_recipe,
)
from recipelab.trainer.model import GPT

SMALL: dict[str, Any] = dict(n_layer=2, d_model=48, n_head=4, n_kv_head=2, head_dim=16,
                             ffn_ratio=2.5)
SEQ_LEN = 32
BUDGETS = (1_000_000, 20_000_000, 200_000_000)


def recipe(**changes: Any) -> Recipe:
    return proxy_recipe("tiny").apply(changes)


# --- parameter and FLOP arithmetic --------------------------------------------------------


@pytest.mark.parametrize(
    ("activation", "norm", "position", "qk_norm", "tie_embeddings"),
    list(itertools.product(("swiglu", "gelu", "gelu_exact", "relu2"), ("rmsnorm", "layernorm"),
                           ("rope", "learned"), (False, True), (False, True))),
)
def test_the_computed_parameter_count_equals_the_instantiated_gpt(
    activation: str, norm: str, position: str, qk_norm: bool, tie_embeddings: bool,
) -> None:
    shape = Shape(**SMALL, activation=activation, norm=norm, position=position,
                  qk_norm=qk_norm, tie_embeddings=tie_embeddings)
    assert param_count(shape, SEQ_LEN) == GPT(shape, SEQ_LEN).param_count()


@settings(max_examples=25, deadline=None)
@given(
    n_layer=st.integers(1, 3), kv_heads=st.integers(1, 3), group=st.integers(1, 3),
    half_head_dim=st.integers(2, 8), d_model=st.integers(8, 40),
    ffn_ratio=st.floats(0.5, 4.0), vocab_size=st.integers(256, 400),
    seq_len=st.integers(4, 40),
)
def test_the_parameter_count_is_exact_for_odd_widths_and_any_gqa_ratio(
    n_layer: int, kv_heads: int, group: int, half_head_dim: int, d_model: int,
    ffn_ratio: float, vocab_size: int, seq_len: int,
) -> None:
    shape = Shape(n_layer=n_layer, d_model=d_model, n_head=kv_heads * group,
                  n_kv_head=kv_heads, head_dim=2 * half_head_dim, ffn_ratio=ffn_ratio,
                  vocab_size=vocab_size, position="learned")
    assert param_count(shape, seq_len) == GPT(shape, seq_len).param_count()


def test_the_recipe_reports_the_parameter_count_of_its_shape_at_its_sequence_length() -> None:
    learned = recipe(**{"shape.position": "learned", "seq_len": 100})
    assert learned.param_count() == GPT(learned.shape, 100).param_count()


def test_training_flops_per_token_are_positive_and_grow_with_depth() -> None:
    flops = [recipe(**{"shape.n_layer": n}).flops_per_token() for n in (1, 2, 4, 8)]
    assert flops[0] > 0
    assert flops == sorted(set(flops))


def test_training_flops_per_token_are_at_least_six_per_parameter_in_the_matmuls() -> None:
    shape = proxy_recipe("tiny").shape
    assert training_flops_per_token(shape, 64) >= 6 * shape.n_layer * (
        shape.d_model * shape.attn_width)


# --- targets and proxies ------------------------------------------------------------------


def smallest_faithful_proxy_params(target: Target) -> int:
    """The fewest parameters a proxy keeping head_dim and the GQA ratio can have."""
    t = target.shape
    shape = t.model_copy(update={
        "n_layer": min(2, t.n_layer), "n_head": t.gqa_ratio, "n_kv_head": 1,
        "d_model": t.gqa_ratio * t.head_dim * t.d_model // t.attn_width, "vocab_size": 256,
    })
    return param_count(shape, 128)


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_a_proxy_keeps_the_targets_invariants_within_budget_or_names_the_smallest_budget(
    name: str, budget: int,
) -> None:
    target = get_target(name)
    smallest = smallest_faithful_proxy_params(target)
    if smallest > budget:
        with pytest.raises(ProxyBudgetError, match=f"{smallest:,}"):
            derive_proxy(target, budget)
        return
    proxy = derive_proxy(target, budget)
    t = target.shape
    assert (proxy.head_dim, proxy.ffn_ratio, proxy.activation, proxy.norm, proxy.position) == (
        t.head_dim, t.ffn_ratio, t.activation, t.norm, t.position)
    assert proxy.gqa_ratio == t.gqa_ratio
    assert param_count(proxy, 128) <= budget
    assert proxy.n_layer >= min(2, t.n_layer)


def test_every_budget_below_the_smallest_proxy_fails_and_the_smallest_itself_fits() -> None:
    target = get_target("llama3-70b")
    smallest = smallest_faithful_proxy_params(target)
    assert param_count(derive_proxy(target, smallest), 128) == smallest
    with pytest.raises(ProxyBudgetError, match=f"{smallest:,}"):
        derive_proxy(target, smallest - 1)


def test_a_proxy_budget_error_is_a_value_error_naming_the_target() -> None:
    with pytest.raises(ValueError, match="llama3-70b"):
        derive_proxy(get_target("llama3-70b"), 1_000_000)


def test_a_target_with_a_single_layer_gets_a_single_layer_proxy() -> None:
    toy = get_target("toy")
    one = Target("one-layer", "a one-layer toy", toy.shape.model_copy(update={"n_layer": 1}),
                 toy.context)
    assert derive_proxy(one, 1_000_000).n_layer == 1


@pytest.mark.parametrize(("preset", "budget"),
                         [("tiny", 100_000), ("cpu", 1_000_000), ("spark", 200_000_000)])
def test_presets_land_within_a_factor_of_two_of_their_nominal_size(
    preset: str, budget: int,
) -> None:
    params = proxy_recipe(preset).param_count()
    assert budget / 2 <= params <= budget * 2
    assert params <= PROXY_PRESETS[preset].budget


def derivable_proxies() -> list[tuple[str, str, int | None]]:
    """Every preset's proxy of every target it can hold, and llama2-7b proxies at budgets
    whose unrounded FFN widths (1720, 2408, 3096) TransformerEngine's FP8 GEMMs refuse."""
    cases: list[tuple[str, str, int | None]] = []
    for preset, target in itertools.product(PROXY_PRESETS, TARGETS):
        try:
            proxy_recipe(preset, target)
        except ProxyBudgetError:
            continue
        cases.append((preset, target, None))
    return cases + [("spark", "llama2-7b", budget) for budget in (30_000_000, 80_000_000,
                                                                   150_000_000)]


@pytest.mark.parametrize(("preset", "target", "budget"), derivable_proxies())
def test_every_proxy_has_only_widths_an_fp8_gemm_accepts_and_keeps_the_ffn_ratio(
    preset: str, target: str, budget: int | None,
) -> None:
    """Widths are legal in every precision, so switching to fp8 never changes the model; the
    FFN width is ffn_ratio × d_model rounded to the nearest multiple of 16, and the
    ffn_ratio knob (what the shape guardrail compares) is the target's exactly."""
    shape = proxy_recipe(preset, target, budget).shape
    for layer in shape.linear_layers():
        assert layer.in_features % FP8_WIDTH_MULTIPLE == 0, layer
        assert layer.out_features % FP8_WIDTH_MULTIPLE == 0, layer
    assert shape.ffn_ratio == get_target(target).shape.ffn_ratio
    assert abs(shape.ffn_hidden - shape.ffn_ratio * shape.d_model) <= FP8_WIDTH_MULTIPLE / 2


def test_llama2_7b_proxies_round_their_ffn_width_to_a_multiple_of_16() -> None:
    widths = [proxy_recipe("spark", "llama2-7b", budget).shape.ffn_hidden
              for budget in (30_000_000, 80_000_000, 150_000_000)]
    assert widths == [1728, 2416, 3104]  # 2.6875 × (640, 896, 1152), ties rounded up


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_targets_own_ffn_width_is_kept_when_it_is_a_multiple_of_16(target: str) -> None:
    shape = get_target(target).shape
    exact = shape.ffn_ratio * shape.d_model
    if exact % FP8_WIDTH_MULTIPLE == 0:
        assert shape.ffn_hidden == exact
    assert shape.ffn_hidden % FP8_WIDTH_MULTIPLE == 0


@pytest.mark.parametrize("activation", ["swiglu", "gelu", "gelu_exact", "relu2"])
def test_linear_layers_are_exactly_the_projections_the_model_builds_through_its_factory(
    activation: str,
) -> None:
    built: list[tuple[int, int]] = []

    def recording(in_features: int, out_features: int) -> torch.nn.Module:
        built.append((in_features, out_features))
        return torch.nn.Linear(in_features, out_features, bias=False)

    shape = Shape(**SMALL, activation=activation)
    GPT(shape, SEQ_LEN, recording)
    per_block = [(layer.in_features, layer.out_features) for layer in shape.linear_layers()]
    assert built == per_block * shape.n_layer


def test_an_unknown_preset_or_target_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="'huge'"):
        proxy_recipe("huge")
    with pytest.raises(ValueError, match="'gpt-5'"):
        get_target("gpt-5")


# --- validation ---------------------------------------------------------------------------


def tiny_data() -> dict[str, Any]:
    return proxy_recipe("tiny").model_dump()


@pytest.mark.parametrize("where", ["top", "shape", "optimizer", "schedule"])
def test_a_recipe_rejects_unknown_keys_at_every_level(where: str) -> None:
    data = tiny_data()
    (data if where == "top" else data[where])["learning_rate"] = 0.1
    with pytest.raises(ValidationError) as info:
        Recipe.model_validate(data)
    [error] = info.value.errors()
    assert error["type"] == "extra_forbidden"
    assert error["loc"][-1] == "learning_rate"


@pytest.mark.parametrize(("path", "value"), [
    (("batch_size",), "sixteen"),
    (("optimizer", "lr"), "fast"),
    (("shape", "tie_embeddings"), "maybe"),
    (("shape", "activation"), "tanh"),
    (("precision",), "fp16"),
    (("shape",), [1, 2]),
])
def test_a_recipe_rejects_wrong_types_with_a_pydantic_error_at_the_knob(
    path: tuple[str, ...], value: object,
) -> None:
    data = tiny_data()
    node = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    with pytest.raises(ValidationError) as info:
        Recipe.model_validate(data)
    assert any(error["loc"][: len(path)] == path for error in info.value.errors())


def test_n_head_not_divisible_by_n_kv_head_is_rejected_naming_both() -> None:
    with pytest.raises(ValidationError, match=r"n_head \(6\).*n_kv_head \(4\)"):
        Shape(**{**SMALL, "n_head": 6, "n_kv_head": 4})


def test_odd_head_dim_is_rejected_with_rope_naming_it_and_allowed_with_learned_positions() -> None:
    with pytest.raises(ValidationError, match=r"head_dim \(15\)"):
        Shape(**{**SMALL, "head_dim": 15})
    assert Shape(**{**SMALL, "head_dim": 15, "position": "learned"}).head_dim == 15


def test_a_recipe_is_frozen() -> None:
    with pytest.raises(ValidationError):
        proxy_recipe("tiny").seed = 3  # type: ignore[misc]


# --- knobs, edits and fingerprints --------------------------------------------------------


def test_apply_changes_the_named_knobs_and_leaves_the_parent_alone() -> None:
    parent = proxy_recipe("tiny")
    child = parent.apply({"optimizer.lr": 0.02, "shape.n_layer": 3, "seed": 7})
    assert (child.optimizer.lr, child.shape.n_layer, child.seed) == (0.02, 3, 7)
    assert parent.optimizer.lr == PROXY_PRESETS["tiny"].lr


def test_apply_with_an_unknown_knob_raises_naming_it() -> None:
    with pytest.raises(ValueError, match=r"unknown knob\(s\) optimizer\.learning_rate"):
        proxy_recipe("tiny").apply({"optimizer.learning_rate": 0.1, "optimizer.lr": 0.1})


def test_apply_validates_the_result_as_a_whole() -> None:
    with pytest.raises(ValidationError, match="n_kv_head"):
        proxy_recipe("tiny").apply({"shape.n_kv_head": 3})


def test_edit_from_returns_exactly_the_changed_knobs() -> None:
    parent = proxy_recipe("tiny")
    edit = {"optimizer.lr": 0.02, "shape.activation": "gelu", "schedule.kind": "linear"}
    child = parent.apply({**edit, "seed": parent.seed})  # re-setting a knob is no change
    assert child.edit_from(parent) == edit
    assert parent.edit_from(parent) == {}


def test_knobs_are_dotted_names_that_apply_accepts() -> None:
    parent = proxy_recipe("tiny")
    knobs = parent.knobs()
    assert knobs["optimizer.lr"] == parent.optimizer.lr
    assert parent.apply(knobs) == parent


def test_equal_recipes_have_equal_fingerprints() -> None:
    a = proxy_recipe("tiny")
    b = Recipe.model_validate_json(a.model_dump_json())
    assert a.fingerprint() == b.fingerprint()


def test_changing_any_knob_changes_the_fingerprint() -> None:
    base = proxy_recipe("tiny")
    seen = {base.fingerprint()}
    for knob, value in base.knobs().items():
        changed: Any
        if isinstance(value, bool):
            changed = not value
        elif isinstance(value, float):
            changed = value / 2 if value else 1e-3  # a knob that is off (0.0) is turned on
        elif isinstance(value, int):
            changed = {"shape.n_kv_head": 2, "shape.n_head": 4}.get(knob, value + 2)
        else:
            changed = {"swiglu": "gelu", "rmsnorm": "layernorm", "rope": "learned",
                       "cosine": "linear", "fp32": "bf16", "byte": "bpe"}[value]
        edit = {knob: changed, "shape.n_head": 4} if knob == "shape.n_kv_head" else {
            knob: changed}
        seen.add(base.apply(edit).fingerprint())
    assert len(seen) == len(base.knobs()) + 1


# --- learning-rate schedule ---------------------------------------------------------------


@pytest.mark.parametrize("kind", ["cosine", "linear", "wsd"])
def test_warmup_rises_linearly_to_the_peak(kind: str) -> None:
    schedule = Schedule(kind=kind, warmup_steps=4)
    ramp = [schedule.lr_multiplier(step, 100) for step in range(5)]
    assert ramp == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0])


@pytest.mark.parametrize("kind", ["cosine", "linear"])
def test_the_last_step_of_the_run_uses_min_lr_ratio(kind: str) -> None:
    schedule = Schedule(kind=kind, warmup_steps=10, min_lr_ratio=0.1)
    total = 60
    assert schedule.lr_multiplier(total - 1, total) == pytest.approx(0.1, abs=1e-12)


@pytest.mark.parametrize("kind", ["cosine", "linear"])
def test_decay_after_warmup_never_increases_and_stays_above_min_lr_ratio(kind: str) -> None:
    schedule = Schedule(kind=kind, warmup_steps=10, min_lr_ratio=0.1)
    values = [schedule.lr_multiplier(step, 60) for step in range(9, 60)]
    assert values == sorted(values, reverse=True)
    assert min(values) >= 0.1 - 1e-12


def test_wsd_is_flat_at_the_peak_then_decays_over_the_last_fraction() -> None:
    schedule = Schedule(kind="wsd", warmup_steps=5, min_lr_ratio=0.0, decay_fraction=0.2)
    values = [schedule.lr_multiplier(step, 100) for step in range(100)]
    assert values[5:80] == [1.0] * 75
    cooldown = values[80:]
    assert all(a > b for a, b in itertools.pairwise(cooldown))
    assert cooldown[-1] < 0.1


def test_a_recipe_written_with_constant_cooldown_loads_as_the_same_wsd_schedule() -> None:
    old = Schedule.model_validate({"kind": "constant-cooldown", "warmup_steps": 5,
                                   "min_lr_ratio": 0.0, "cooldown_fraction": 0.3})
    assert old == Schedule(kind="wsd", warmup_steps=5, min_lr_ratio=0.0, decay_fraction=0.3)
    with pytest.raises(ValidationError, match="cooldown_fraction is the old name"):
        Schedule.model_validate({"cooldown_fraction": 0.3, "decay_fraction": 0.4})


def test_an_old_recipe_dict_without_the_new_knobs_loads_with_neutral_defaults() -> None:
    old = proxy_recipe("tiny").model_dump(mode="json")
    for section, names in {"optimizer": ("lr_embed_mult", "lr_output_mult", "lr_hidden_mult",
                                         "decay_embeddings", "decay_norms"),
                           "shape": ("rope_base",)}.items():
        for name in names:
            del old[section][name]
    del old["stability"]
    old["schedule"]["cooldown_fraction"] = old["schedule"].pop("decay_fraction")
    assert Recipe.model_validate(old) == proxy_recipe("tiny")


def test_zero_warmup_starts_at_the_peak() -> None:
    assert Schedule(kind="linear", warmup_steps=0).lr_multiplier(0, 50) == 1.0

