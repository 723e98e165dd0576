"""Targets: --target FILE (a Llama-family config.json or a recipelab target JSON) becomes a
Target, and its proxy is derived exactly as a built-in target's (the built-in targets' proxies
are specified in tests/test_recipe.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from recipelab.targets import TargetFileError, derive_proxy, get_target, llama32_1b, proxy_recipe

# Llama-3.2-1B's published config.json, the fields recipelab reads and a few it ignores.
LLAMA_32_1B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32,
    "num_hidden_layers": 16, "num_key_value_heads": 8, "head_dim": 64, "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0, "vocab_size": 128256, "tie_word_embeddings": True,
    "max_position_embeddings": 131072, "torch_dtype": "bfloat16", "attention_bias": False,
}


def write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_a_llama_config_json_becomes_the_built_in_target_it_describes(tmp_path: Path) -> None:
    target = get_target(str(write(tmp_path / "Llama-3.2-1B" / "config.json", LLAMA_32_1B)))
    built_in = llama32_1b()
    assert target.name == "Llama-3.2-1B"
    assert target.shape == built_in.shape.model_copy(update={"rope_base": 500000.0})
    assert target.context == 131072
    assert "GQA 4:1" in target.description and "RoPE base 500000" in target.description


def test_the_proxy_of_a_config_json_is_derived_as_from_a_built_in_target(tmp_path: Path) -> None:
    target = get_target(str(write(tmp_path / "config.json", LLAMA_32_1B)))
    mine = derive_proxy(target, 5_000_000)
    theirs = derive_proxy(llama32_1b(), 5_000_000)
    assert mine == theirs.model_copy(update={"rope_base": 500000.0})
    assert proxy_recipe("cpu", str(tmp_path / "config.json"), 5_000_000).shape == mine


def test_head_dim_and_kv_heads_default_as_transformers_does(tmp_path: Path) -> None:
    config = {k: v for k, v in LLAMA_32_1B.items()
              if k not in ("head_dim", "num_key_value_heads", "rope_theta",
                           "tie_word_embeddings")}
    target = get_target(str(write(tmp_path / "c.json", config)))
    assert (target.shape.head_dim, target.shape.n_kv_head) == (64, 32)
    assert (target.shape.rope_base, target.shape.tie_embeddings) == (10_000.0, False)


def test_a_recipelab_target_json_is_read_with_its_shape(tmp_path: Path) -> None:
    shape = {"n_layer": 12, "d_model": 768, "n_head": 12, "n_kv_head": 4, "head_dim": 64,
             "ffn_ratio": 4.0, "activation": "gelu", "norm": "layernorm", "qk_norm": True,
             "vocab_size": 50304}
    path = write(tmp_path / "mine.json", {"name": "gpt-small", "description": "my GPT",
                                          "context": 2048, "shape": shape})
    target = get_target(str(path))
    assert (target.name, target.description, target.context) == ("gpt-small", "my GPT", 2048)
    assert target.shape.activation == "gelu" and target.shape.qk_norm


@pytest.mark.parametrize(("data", "message"), [
    ({"hidden_size": 64}, "lacks num_hidden_layers, num_attention_heads, intermediate_size"),
    ({**LLAMA_32_1B, "hidden_act": "gelu"}, "hidden_act 'gelu' is not a Llama-family"),
    ({**LLAMA_32_1B, "num_key_value_heads": 5}, "multiple of n_kv_head"),
    ({"shape": {"n_layer": 2}, "colour": "red"}, "unknown key(s) colour"),
    ([1, 2], "holds a JSON list, not an object"),
])
def test_a_target_file_that_cannot_be_used_says_why(tmp_path: Path, data: Any,
                                                     message: str) -> None:
    path = write(tmp_path / "bad.json", data)
    with pytest.raises(TargetFileError) as caught:
        get_target(str(path))
    assert str(caught.value).startswith(f"target file {path}")
    assert message in str(caught.value)


def test_a_missing_target_file_and_an_unknown_name_are_told_apart(tmp_path: Path) -> None:
    with pytest.raises(TargetFileError, match="does not exist"):
        get_target(str(tmp_path / "nope.json"))
    with pytest.raises(ValueError, match=r"unknown target 'llama9'.*path of a target file"):
        get_target("llama9")
