"""fp8 shapes: an fp8 recipe whose widths or tokens TransformerEngine refuses is rejected.

The guardrail and :mod:`tests.trainer.te_standin` (which stands in for TE, since TE's FP8
GEMMs need an sm_89+ GPU) are held to agree: a recipe is accepted exactly when its model
trains a step and evaluates under the stand-in.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from recipelab.guardrails import check_hardware
from recipelab.guardrails.fp8 import fp8_shape_reasons
from recipelab.recipe import Recipe
from recipelab.targets import PROXY_PRESETS, TARGETS, ProxyBudgetError, proxy_recipe
from recipelab.trainer.device import autocast, linear_factory
from recipelab.trainer.evaluate import bits_per_byte
from recipelab.trainer.model import GPT
from recipelab.trainer.tokenizer import byte_tokenizer
from tests.guardrails.factories import BASELINE, H100, context
from tests.trainer import te_standin
from tests.trainer.test_fp8 import OnMeta, train_step

FP8 = BASELINE.apply({"precision": "fp8"})


def fp8(**edit: Any) -> Recipe:
    return FP8.apply(edit)


def test_the_fp8_baseline_has_no_shape_reasons() -> None:
    assert fp8_shape_reasons(FP8) == []


def test_other_precisions_are_never_judged_by_fp8_rules() -> None:
    odd = BASELINE.apply({"shape.d_model": 100, "batch_size": 3, "seq_len": 50})
    assert fp8_shape_reasons(odd) == []
    assert fp8_shape_reasons(odd.apply({"precision": "bf16"})) == []


def test_a_d_model_not_divisible_by_16_is_one_reason_naming_every_layer_and_the_fix() -> None:
    (reason,) = fp8_shape_reasons(fp8(**{"shape.d_model": 100}))
    assert reason.startswith("precision 'fp8' cannot run attn.qkv in_features, attn.out "
                             "out_features, ffn.up in_features, ffn.down out_features = 100 "
                             "(shape.d_model)")
    assert "divisible by 16" in reason
    assert reason.endswith("Set shape.d_model to a multiple of 16 (96 or 112), or use bf16.")


def test_a_head_dim_making_the_attention_width_illegal_names_head_dim() -> None:
    (reason,) = fp8_shape_reasons(fp8(**{"shape.head_dim": 20}))  # 2 heads: 40 wide
    assert "attn.out in_features = 40" in reason
    assert "Set shape.head_dim to a multiple of 16 (16 or 32)" in reason


def test_a_token_count_not_divisible_by_16_names_batch_and_seq_len_and_the_fix() -> None:
    (reason,) = fp8_shape_reasons(fp8(batch_size=3, seq_len=50))
    assert "3 × 50 = 150 tokens per micro-batch" in reason
    assert "Set seq_len to a multiple of 16 (48 or 64) or batch_size to a multiple of 8" in reason


def test_a_short_sequence_suggests_the_first_multiple_of_16() -> None:
    (reason,) = fp8_shape_reasons(fp8(batch_size=1, seq_len=12))
    assert "seq_len to a multiple of 16 (16)" in reason


def test_the_hardware_check_reports_shape_reasons_with_the_device_reasons() -> None:
    assert check_hardware(FP8, context(device=H100)) == []
    reasons = check_hardware(fp8(**{"shape.d_model": 100}), context(device=H100))
    assert len(reasons) == 1 and "shape.d_model" in reasons[0]
    on_cpu = check_hardware(fp8(batch_size=3, seq_len=50), context())
    assert len(on_cpu) == 2 and "CUDA GPU" in on_cpu[0] and "150 tokens" in on_cpu[1]


@pytest.mark.parametrize(("preset", "target"), [
    (preset, target) for preset in PROXY_PRESETS for target in TARGETS])
def test_every_proxy_a_preset_derives_passes_as_fp8(preset: str, target: str) -> None:
    try:
        recipe = proxy_recipe(preset, target)
    except ProxyBudgetError:
        return
    assert fp8_shape_reasons(recipe.apply({"precision": "fp8"})) == []


@pytest.mark.parametrize("edit", [
    {}, {"shape.d_model": 100}, {"shape.d_model": 72}, {"shape.head_dim": 20},
    {"shape.head_dim": 24, "shape.n_head": 4, "shape.n_kv_head": 2},
    {"batch_size": 3, "seq_len": 50}, {"batch_size": 2, "seq_len": 40}, {"seq_len": 36},
    {"batch_size": 1, "seq_len": 24},  # legal forward (24 % 8 == 0), refused weight gradient
    {"shape.ffn_ratio": 1.3, "shape.activation": "gelu"},
])
def test_the_guardrail_accepts_exactly_what_te_runs(
    monkeypatch: pytest.MonkeyPatch, edit: dict[str, Any],
) -> None:
    te_standin.install(monkeypatch)
    recipe = fp8(**edit)
    refused: Exception | None = None
    try:
        with torch.device("meta"):
            model = GPT(recipe.shape, recipe.seq_len, linear_factory("fp8"))
        train_step(model, recipe)
        bits_per_byte(OnMeta(model), np.arange(1000, dtype=np.int64) % 256,
                      byte_tokenizer().token_bytes, recipe.seq_len, recipe.batch_size,
                      torch.device("cpu"), autocast("fp8", torch.device("cpu")))
    except (ValueError, RuntimeError) as error:
        refused = error
    assert (fp8_shape_reasons(recipe) == []) == (refused is None), refused
