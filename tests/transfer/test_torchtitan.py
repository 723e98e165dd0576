"""The exported recipe as a torchtitan job config: it parses, and it holds the recipe's numbers."""

from __future__ import annotations

import math
from typing import Any

import pytest

from recipelab.recipe import Recipe
from recipelab.targets import get_target, proxy_recipe
from recipelab.transfer.micro_batch import BatchSplit, split_batch
from recipelab.transfer.torchtitan import RELEASE, job_config, render, unexpressed
from recipelab.units import GIB

tomllib = pytest.importorskip("tomllib", reason="Python 3.11 reads TOML; 3.10 has no tomllib")

TARGET = get_target("llama2-7b")


def exported(**edit: object) -> tuple[Recipe, BatchSplit]:
    recipe = proxy_recipe("cpu", "llama2-7b").apply(edit).model_copy(update={
        "shape": TARGET.shape, "seq_len": TARGET.context, "batch_size": 64, "steps": 5000,
        "precision": "bf16", "tokenizer": "bpe"})
    split = split_batch(recipe, 8, 80 * GIB)
    return split.apply(recipe), split


def parsed(**edit: object) -> tuple[dict[str, Any], Recipe]:
    recipe, split = exported(**edit)
    text = render(job_config(recipe, split, "a test"), unexpressed(recipe))
    assert text.startswith(f"# torchtitan {RELEASE} job config")
    return tomllib.loads(text), recipe


def test_the_config_parses_and_holds_the_recipes_numbers() -> None:
    config, recipe = parsed(**{"optimizer.lr": 0.0021, "optimizer.beta2": 0.97,
                               "optimizer.eps": 1e-9, "optimizer.weight_decay": 0.05,
                               "optimizer.grad_clip": 0.7, "schedule.warmup_steps": 40,
                               "schedule.min_lr_ratio": 0.05, "seed": 7})
    assert config["optimizer"] == {"name": "AdamW", "lr": 0.0021, "beta1": 0.9, "beta2": 0.97,
                                   "eps": 1e-9, "weight_decay": 0.05, "implementation": "fused"}
    assert config["lr_scheduler"] == {"warmup_steps": 40, "decay_type": "cosine",
                                      "min_lr_factor": 0.05}, "cosine decays from the warm-up on"
    training = config["training"]
    assert training["global_batch_size"] == recipe.batch_size * recipe.grad_accum == 64
    assert training["local_batch_size"] * 8 * recipe.grad_accum == 64
    assert (training["seq_len"], training["max_norm"], training["steps"]) == (4096, 0.7, 5000)
    assert training["mixed_precision_param"] == "bfloat16"
    assert config["parallelism"] == {"data_parallel_replicate_degree": 1,
                                     "data_parallel_shard_degree": 8}
    assert config["debug"]["seed"] == 7


def test_wsd_decays_over_its_fraction_and_no_clipping_is_an_infinite_norm() -> None:
    config, _ = parsed(**{"schedule.kind": "wsd", "schedule.decay_fraction": 0.3,
                          "optimizer.grad_clip": 0.0})
    assert config["lr_scheduler"]["decay_ratio"] == 0.3
    assert config["lr_scheduler"]["decay_type"] == "linear"
    assert math.isinf(config["training"]["max_norm"])


def test_what_torchtitan_cannot_hold_is_listed_and_nothing_else() -> None:
    plain, _ = exported()
    assert len(unexpressed(plain)) == 1 and "flavor 'RECIPELAB'" in unexpressed(plain)[0]
    edited, _ = exported(**{"stability.z_loss": 1e-4, "optimizer.lr_embed_mult": 2.0})
    assert unexpressed(edited)[1:] == ["optimizer.lr_embed_mult = 2.0", "stability.z_loss = 0.0001"]


def test_fp8_asks_for_torchtitans_float8_converter_and_fp32_for_fp32_parameters() -> None:
    fp8, split = exported()
    assert job_config(fp8.model_copy(update={"precision": "fp8"}), split, "")["model"][
        "converters"] == ["float8"]
    assert job_config(fp8.model_copy(update={"precision": "fp32"}), split, "")["training"][
        "mixed_precision_param"] == "float32"
