"""The global batch split into per-GPU micro-batches that the memory model says fit."""

from __future__ import annotations

import pytest

from recipelab.guardrails.memory import STATE_BYTES_PER_PARAM
from recipelab.recipe import Recipe, Shape, layer_param_count
from recipelab.targets import get_target
from recipelab.transfer.micro_batch import (
    DDP_BUCKET_BYTES_PER_PARAM,
    MEMORY_MARGIN,
    BatchFitError,
    gathered_bytes,
    per_gpu_peak,
    split_batch,
)
from recipelab.units import GIB

# The reference lab's shape: a GPT-2-style 51M model, vocabulary 50,304, context 1,024, and a
# global batch of 512 sequences = 524,288 tokens.
LAB = Recipe(
    shape=Shape(n_layer=8, d_model=512, n_head=8, n_kv_head=8, head_dim=64, ffn_ratio=4,
                activation="gelu", norm="layernorm", position="learned", tie_embeddings=True,
                vocab_size=50304),
    batch_size=512, seq_len=1024, grad_accum=1, precision="bf16", tokenizer="bpe")


@pytest.mark.parametrize("memory_gib", [40, 80])
def test_the_lab_batch_on_one_gpu_is_taken_in_micro_batches_that_fit_where_the_naive_one_would_not(
        memory_gib: int) -> None:
    assert 45e6 < LAB.param_count() < 55e6 and LAB.tokens_per_step == 524_288
    memory = memory_gib * GIB
    split = split_batch(LAB, gpus=1, memory_bytes=memory)
    assert split.per_gpu * split.grad_accum == 512  # the global batch is unchanged
    assert split.apply(LAB).tokens_per_step == LAB.tokens_per_step
    usable = memory * (1 - MEMORY_MARGIN)
    assert split.peak_bytes == per_gpu_peak(LAB, split.per_gpu, 1).total <= usable
    # the largest that fits: the next micro-batch that divides the batch does not
    assert per_gpu_peak(LAB, 2 * split.per_gpu, 1).total > usable
    # the naive micro-batch, the whole batch at once, needs several times the card
    naive = per_gpu_peak(LAB, 512, 1)
    assert split.naive_peak_bytes == naive.total > 4 * memory
    assert naive.logits > memory  # fp32 logits alone: 12 bytes x 50,304 per token


def test_more_memory_allows_a_larger_micro_batch_and_fewer_accumulation_steps() -> None:
    small, large = (split_batch(LAB, 1, gib * GIB) for gib in (40, 80))
    assert large.per_gpu > small.per_gpu and large.grad_accum < small.grad_accum


def test_the_batch_splits_over_the_gpus_and_each_gpu_counts_ddps_gradient_buckets() -> None:
    split = split_batch(LAB, gpus=8, memory_bytes=80 * GIB)
    assert split.batch_size == 8 * split.per_gpu and split.batch_size % 8 == 0
    assert split.batch_size * split.grad_accum == 512
    one, many = per_gpu_peak(LAB, 4, 1), per_gpu_peak(LAB, 4, 8)
    assert many.states - one.states == DDP_BUCKET_BYTES_PER_PARAM * LAB.param_count()


def test_a_global_batch_that_does_not_divide_over_the_gpus_is_refused() -> None:
    with pytest.raises(BatchFitError, match="multiple of 8"):
        split_batch(LAB.model_copy(update={"batch_size": 12}), gpus=8, memory_bytes=80 * GIB)


def test_a_model_whose_states_alone_exceed_the_gpu_says_what_it_needs_and_what_to_do() -> None:
    target = get_target("llama2-7b")
    recipe = Recipe(shape=target.shape, seq_len=target.context, batch_size=8,
                    precision="bf16", tokenizer="bpe")
    with pytest.raises(BatchFitError) as caught:
        split_batch(recipe, gpus=8, memory_bytes=80 * GIB, sharding="none")
    message = str(caught.value)
    needed = per_gpu_peak(recipe, 1, 8).total
    assert f"{needed / GIB:.2f} GiB" in message and "AdamW states" in message
    assert "does not shrink with more GPUs: shard it (--sharding auto)" in message


def seven_b() -> Recipe:
    target = get_target("llama2-7b")
    return Recipe(shape=target.shape, seq_len=target.context, batch_size=8,
                  precision="bf16", tokenizer="bpe")


def test_auto_shards_a_7b_model_over_8_gpus_where_a_whole_copy_per_gpu_cannot_fit() -> None:
    recipe = seven_b()
    split = split_batch(recipe, gpus=8, memory_bytes=80 * GIB)
    assert split.sharding == "full" and split.peak_bytes <= 80 * GIB * (1 - MEMORY_MARGIN)
    assert "a whole copy per GPU needs" in split.why_sharded and "sharded (FSDP2" in split.describe()
    whole, sharded = per_gpu_peak(recipe, 1, 8), per_gpu_peak(recipe, 1, 8, sharding="full")
    params = recipe.param_count()
    assert sharded.states == -(-STATE_BYTES_PER_PARAM * params // 8) + gathered_bytes(recipe)
    assert sharded.states < whole.states / 4, "16 bytes a parameter, divided over 8 GPUs"
    assert sharded.activations == whole.activations, "sharding does not shrink activations"
    block = layer_param_count(recipe.shape)
    assert gathered_bytes(recipe) == 2 * 2 * (params - 32 * block + 2 * block), (
        "the root and two blocks, each with its gradient, in bf16")


def test_auto_keeps_a_whole_copy_per_gpu_where_one_fits() -> None:
    split = split_batch(LAB, gpus=8, memory_bytes=80 * GIB)
    assert split.sharding == "none" and not split.why_sharded
    assert split_batch(LAB, gpus=8, memory_bytes=80 * GIB, sharding="full").sharding == "full"
    assert split_batch(LAB, gpus=1, memory_bytes=80 * GIB, sharding="full").sharding == "none", (
        "one GPU has nothing to shard over")


def test_a_model_too_large_even_sharded_names_what_is_too_large() -> None:
    target = get_target("llama3-70b")
    recipe = Recipe(shape=target.shape, seq_len=target.context, batch_size=64,
                    precision="bf16", tokenizer="bpe")
    with pytest.raises(BatchFitError, match="sharded over 8 GPU") as caught:
        split_batch(recipe, gpus=8, memory_bytes=80 * GIB)
    assert "more GPUs (--gpus)" in str(caught.value), "1.1 TB of states over 8 GPUs"
    assert "a shorter context, or activation checkpointing" in str(caught.value)
    with pytest.raises(BatchFitError) as many:
        split_batch(recipe, gpus=64, memory_bytes=80 * GIB)
    assert "--gpus" not in str(many.value), "over 64 GPUs the states fit: the context does not"
    short = recipe.model_copy(update={"seq_len": 1024})
    assert split_batch(short, gpus=64, memory_bytes=80 * GIB).sharding == "full"
