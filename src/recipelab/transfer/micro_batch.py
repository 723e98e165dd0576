"""Split an exported recipe's global batch into micro-batches that fit the cloud GPUs' memory.

The batch rule sets the global batch in sequences; nothing about it says one GPU can hold it
in one forward pass. At a 50k vocabulary the fp32 logits alone (3 copies: the logits, their
softmax and their gradient) cost 12 bytes × vocabulary per token, so a lab-sized 50M model
with a 0.5M-token global batch would need hundreds of GiB at step 0 if each GPU took its
whole share at once. ``recipelab pretrain`` trains ``batch_size`` rows per micro-step over all
ranks (``batch_size % world_size == 0``, each rank takes its rows) and accumulates
``grad_accum`` micro-steps, so the same global batch can be taken in smaller bites.

:func:`split_batch` picks the largest per-GPU micro-batch that divides each GPU's share of
the global batch (so the global batch is unchanged exactly) and whose peak, by the memory
model of :mod:`recipelab.guardrails.memory` plus what DDP adds, stays within the GPU's memory
less :data:`MEMORY_MARGIN`. The margin covers what the analytic model leaves out: the
allocator's fragmentation, NCCL's buffers, and an "80 GB" card's slightly smaller usable size.

**Sharding.** DDP keeps a whole copy of the weights, gradients and AdamW states on every GPU:
16 bytes a parameter, 100 GiB for 7B, so more GPUs do not help. Fully sharded data parallel
(PyTorch's FSDP2, ``fully_shard`` per transformer block as torchtitan applies it) keeps
``1/gpus`` of those states on each GPU and gathers one block's parameters whole only while
it runs. :func:`per_gpu_peak` counts, under ``"full"`` sharding, the states divided over the
GPUs plus the units gathered at once: the root (embeddings, output layer, final norm) and two
blocks (the one running and the one prefetched), each with its unsharded gradient, in the
precision the parameters are cast to. ``"auto"`` (:func:`split_batch`) shards only when no
micro-batch fits a whole copy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from recipelab.errors import RecipelabError
from recipelab.guardrails.base import DeviceInfo, gib
from recipelab.guardrails.memory import STATE_BYTES_PER_PARAM, PeakBreakdown, peak_breakdown
from recipelab.recipe import Recipe, layer_param_count
from recipelab.units import GIB

DEFAULT_GPU_MEMORY_GIB = 80.0
MEMORY_MARGIN = 0.10
DDP_BUCKET_BYTES_PER_PARAM = 4
"""PyTorch DDP copies every fp32 gradient into its all-reduce buckets (``gradient_as_bucket_view``
is off by default), one more fp32 copy of the parameters on each rank of a multi-GPU run."""

DeviceKind = Literal["cuda", "cpu"]
Sharding = Literal["none", "full"]
ShardingChoice = Literal["auto", "none", "full"]
GATHERED_BLOCKS = 2
"""Blocks whose parameters FSDP holds gathered at once: the one running and the one its
forward (or backward) prefetches."""


class BatchFitError(RecipelabError, ValueError):
    """The global batch cannot be split so that one GPU holds a micro-batch; says what to do."""


@dataclass(frozen=True)
class BatchSplit:
    """How the global batch is taken: ``per_gpu`` sequences per GPU per micro-step,
    ``grad_accum`` micro-steps, on ``gpus`` GPUs."""

    per_gpu: int
    grad_accum: int
    gpus: int
    peak_bytes: int  # predicted per-GPU peak at ``per_gpu``
    naive_peak_bytes: int  # ... with each GPU's whole share in one micro-step
    budget_bytes: int  # the GPU's memory less the margin
    sharding: Sharding = "none"
    why_sharded: str = ""  # under "auto": what a whole copy per GPU would have needed

    @property
    def batch_size(self) -> int:
        """The recipe's ``batch_size``: the global micro-batch over all GPUs."""
        return self.per_gpu * self.gpus

    def apply(self, recipe: Recipe) -> Recipe:
        return recipe.model_copy(update={"batch_size": self.batch_size,
                                         "grad_accum": self.grad_accum})

    def describe(self) -> str:
        sharded = (f", sharded (FSDP2: each GPU keeps 1/{self.gpus} of the weights, gradients "
                   f"and AdamW states{'; ' + self.why_sharded if self.why_sharded else ''})"
                   if self.sharding == "full" else "")
        return (f"{self.per_gpu} sequence(s) per GPU × {self.gpus} GPU(s) × grad_accum "
                f"{self.grad_accum}: predicted peak {gib(self.peak_bytes)} per GPU of "
                f"{gib(self.budget_bytes)} usable (the whole share at once: "
                f"{gib(self.naive_peak_bytes)}){sharded}")


def gathered_bytes(recipe: Recipe) -> int:
    """What FSDP holds unsharded at once: the root's parameters (embeddings, the untied
    output layer, the final norm) and :data:`GATHERED_BLOCKS` blocks', each with its
    gradient, in the precision the parameters are cast to (2 bytes unless fp32)."""
    block = layer_param_count(recipe.shape)
    root = recipe.param_count() - recipe.shape.n_layer * block
    width = 4 if recipe.precision == "fp32" else 2
    return 2 * width * (root + GATHERED_BLOCKS * block)


def per_gpu_peak(recipe: Recipe, per_gpu: int, gpus: int, device: DeviceKind = "cuda",
                 sharding: Sharding = "none") -> PeakBreakdown:
    """The predicted peak on one GPU training ``per_gpu`` sequences of ``recipe`` per
    micro-step on ``gpus`` GPUs: DDP's gradient buckets counted with the states, or under
    ``"full"`` sharding the states divided over the GPUs plus :func:`gathered_bytes`."""
    info = DeviceInfo(kind=device, name=device, memory_bytes=0, compute_capability=None,
                      has_transformer_engine=False, native_bf16=True)
    found = peak_breakdown(recipe.model_copy(update={"batch_size": per_gpu, "grad_accum": 1}),
                           info)
    if gpus == 1:
        return found
    params = recipe.param_count()
    if sharding == "full":
        states = -(-STATE_BYTES_PER_PARAM * params // gpus) + gathered_bytes(recipe)
    else:
        states = found.states + DDP_BUCKET_BYTES_PER_PARAM * params
    return PeakBreakdown(found.overhead, states, found.activations, found.logits)


def split_batch(recipe: Recipe, gpus: int, memory_bytes: int, device: DeviceKind = "cuda",
                sharding: ShardingChoice = "auto") -> BatchSplit:
    """The largest per-GPU micro-batch of ``recipe``'s global batch (``batch_size ×
    grad_accum`` sequences) that fits ``memory_bytes`` less the margin, with the global
    batch unchanged; :class:`BatchFitError` when even one sequence per GPU does not fit.
    ``"auto"`` keeps a whole copy per GPU where one fits and shards only where none does."""
    if gpus == 1 or sharding == "none":
        return _split(recipe, gpus, memory_bytes, device, "none")
    if sharding == "full":
        return _split(recipe, gpus, memory_bytes, device, "full")
    try:
        return _split(recipe, gpus, memory_bytes, device, "none")
    except BatchFitError:
        whole = per_gpu_peak(recipe, 1, gpus, device)
        found = _split(recipe, gpus, memory_bytes, device, "full")
        return dataclasses.replace(found, why_sharded=(
            f"a whole copy per GPU needs {gib(whole.total)} at one sequence, more than the "
            f"{gib(found.budget_bytes)} usable"))


def _split(recipe: Recipe, gpus: int, memory_bytes: int, device: DeviceKind,
           sharding: Sharding) -> BatchSplit:
    sequences = recipe.batch_size * recipe.grad_accum
    if sequences % gpus:
        raise BatchFitError(
            f"a global batch of {sequences} sequences does not split over {gpus} GPUs: give a "
            f"batch_size × grad_accum that is a multiple of {gpus}")
    share = sequences // gpus
    budget = int(memory_bytes * (1.0 - MEMORY_MARGIN))
    naive = per_gpu_peak(recipe, share, gpus, device, sharding).total
    for per_gpu in sorted((d for d in range(1, share + 1) if share % d == 0), reverse=True):
        peak = per_gpu_peak(recipe, per_gpu, gpus, device, sharding).total
        if peak <= budget:
            return BatchSplit(per_gpu, share // per_gpu, gpus, peak, naive, budget, sharding)
    one = per_gpu_peak(recipe, 1, gpus, device, sharding)
    fixes = []
    if sharding == "none" and gpus > 1 and one.states > budget:
        fixes.append("a whole copy of the model and its optimizer on every GPU does not shrink "
                     "with more GPUs: shard it (--sharding auto)")
    elif one.states > budget / 2:
        fixes.append("send it to more GPUs (--gpus) or GPUs with more memory (--gpu-memory-gib)")
    if one.activations + one.logits > budget / 2:
        fixes.append("one sequence's activations need more than half a GPU: a shorter context, "
                     "or activation checkpointing in a trainer that has it (the memory model "
                     "assumes none)")
    fixes.append("pick a smaller target")
    how = "sharded over" if sharding == "full" else "on each of"
    raise BatchFitError(
        f"one sequence of {recipe.seq_len} tokens per GPU needs {gib(one.total)} "
        f"({gib(one.states)} weights, gradients and AdamW states {how} {gpus} GPU(s), "
        f"{gib(one.activations)} activations, {gib(one.logits)} fp32 logits, "
        f"{gib(one.overhead)} CUDA context), more than the {gib(budget)} usable of "
        f"{memory_bytes / GIB:.4g} GiB ({MEMORY_MARGIN:.0%} kept free): {'; or '.join(fixes)}")
