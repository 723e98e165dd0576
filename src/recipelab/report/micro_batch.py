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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from recipelab.errors import RecipelabError
from recipelab.guardrails.base import DeviceInfo, gib
from recipelab.guardrails.memory import PeakBreakdown, peak_breakdown
from recipelab.recipe import Recipe
from recipelab.units import GIB

DEFAULT_GPU_MEMORY_GIB = 80.0
MEMORY_MARGIN = 0.10
DDP_BUCKET_BYTES_PER_PARAM = 4
"""PyTorch DDP copies every fp32 gradient into its all-reduce buckets (``gradient_as_bucket_view``
is off by default), one more fp32 copy of the parameters on each rank of a multi-GPU run."""

DeviceKind = Literal["cuda", "cpu"]


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

    @property
    def batch_size(self) -> int:
        """The recipe's ``batch_size``: the global micro-batch over all GPUs."""
        return self.per_gpu * self.gpus

    def apply(self, recipe: Recipe) -> Recipe:
        return recipe.model_copy(update={"batch_size": self.batch_size,
                                         "grad_accum": self.grad_accum})

    def describe(self) -> str:
        return (f"{self.per_gpu} sequence(s) per GPU × {self.gpus} GPU(s) × grad_accum "
                f"{self.grad_accum}: predicted peak {gib(self.peak_bytes)} per GPU of "
                f"{gib(self.budget_bytes)} usable (the whole share at once: "
                f"{gib(self.naive_peak_bytes)})")


def per_gpu_peak(recipe: Recipe, per_gpu: int, gpus: int, device: DeviceKind = "cuda"
                 ) -> PeakBreakdown:
    """The predicted peak on one GPU training ``per_gpu`` sequences of ``recipe`` per
    micro-step on ``gpus`` GPUs (DDP's gradient buckets counted with the states)."""
    info = DeviceInfo(kind=device, name=device, memory_bytes=0, compute_capability=None,
                      has_transformer_engine=False, native_bf16=True)
    found = peak_breakdown(recipe.model_copy(update={"batch_size": per_gpu, "grad_accum": 1}),
                           info)
    if gpus > 1:
        buckets = DDP_BUCKET_BYTES_PER_PARAM * recipe.param_count()
        found = PeakBreakdown(found.overhead, found.states + buckets, found.activations,
                              found.logits)
    return found


def split_batch(recipe: Recipe, gpus: int, memory_bytes: int,
                device: DeviceKind = "cuda") -> BatchSplit:
    """The largest per-GPU micro-batch of ``recipe``'s global batch (``batch_size ×
    grad_accum`` sequences) that fits ``memory_bytes`` less the margin, with the global
    batch unchanged; :class:`BatchFitError` when even one sequence per GPU does not fit."""
    sequences = recipe.batch_size * recipe.grad_accum
    if sequences % gpus:
        raise BatchFitError(
            f"a global batch of {sequences} sequences does not split over {gpus} GPUs: give a "
            f"batch_size × grad_accum that is a multiple of {gpus}")
    share = sequences // gpus
    budget = int(memory_bytes * (1.0 - MEMORY_MARGIN))
    naive = per_gpu_peak(recipe, share, gpus, device).total
    for per_gpu in sorted((d for d in range(1, share + 1) if share % d == 0), reverse=True):
        peak = per_gpu_peak(recipe, per_gpu, gpus, device).total
        if peak <= budget:
            return BatchSplit(per_gpu, share // per_gpu, gpus, peak, naive, budget)
    one = per_gpu_peak(recipe, 1, gpus, device)
    replicated = (" recipelab pretrain keeps a whole copy of the model and its optimizer on "
                  "every GPU (DDP), so more GPUs do not lower it;" if one.states > budget else "")
    raise BatchFitError(
        f"one sequence of {recipe.seq_len} tokens per GPU needs {gib(one.total)} "
        f"({gib(one.states)} weights, gradients and AdamW states, {gib(one.activations)} "
        f"activations, {gib(one.logits)} fp32 logits, {gib(one.overhead)} CUDA context), more "
        f"than the {gib(budget)} usable of {memory_bytes / GIB:g} GiB ({MEMORY_MARGIN:.0%} kept "
        f"free):{replicated} send it to GPUs with more memory (--gpu-memory-gib), or pick a "
        "smaller target or a shorter context")
