"""Validation bits per byte: the one number every candidate is ranked by.

``val_bpb = sum(cross-entropy in nats over the predicted eval tokens)
            / (ln 2 × UTF-8 bytes those tokens encode)``

Because the denominator counts bytes, not tokens, the figure compares across tokenizers and
vocabulary sizes. The evaluation slice is cut into consecutive windows of ``seq_len`` inputs;
every token after the first is predicted exactly once, and the byte count is taken over
exactly those predicted tokens.

Every forward pass is shown a whole number of :data:`~recipelab.recipe.FP8_TOKEN_MULTIPLE`
tokens, whatever the precision: TransformerEngine refuses an FP8 GEMM over any other count,
and the tail window (and a short last batch) rarely has one. Such a batch is padded at the
end of its rows, and with whole rows, and only the logits of real positions are scored. The
model is causal, so a position never sees the padding after it, and val_bpb is the same
number it would be without the padding.

The slice is a sample of the corpus, so val_bpb carries a sampling error of its own: two
slices of the same size would score the same model differently. ``stderr`` estimates it from
the slice itself: the predicted tokens fall into :data:`EVAL_BLOCKS` blocks by byte position,
and the blocks are the samples of a ratio estimator (:func:`recipelab.ratio.ratio_stderr`).
Blocks span several windows, so the error counts the likeness of neighbouring text that
per-window samples would miss. The blocks' sums go back with the score: every trial on the
same slice has the same blocks, so the report can give a *gain's* sampling error too
(:func:`recipelab.ratio.gain_stderr`), the one that matters beside the paired noise floor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recipelab.ratio import ratio_stderr
from recipelab.recipe import FP8_TOKEN_MULTIPLE

EVAL_BLOCKS = 32  # the slice's sampling units for its error: 2 KiB each on a 64 KiB slice


@dataclass(frozen=True)
class BitsPerByte:
    """val_bpb with its parts; ``stderr`` is its sampling error over the slice's blocks (None
    with a single block), whose sums ``block_nats`` and ``block_bytes`` hold."""

    bpb: float
    nats: float
    bytes: int
    tokens: int
    stderr: float | None = None
    block_nats: tuple[float, ...] = ()  # per block of the slice, for a gain's error
    block_bytes: tuple[int, ...] = ()


def block_sums(nats: np.ndarray, n_bytes: np.ndarray,
               blocks: int = EVAL_BLOCKS) -> tuple[np.ndarray, np.ndarray]:
    """Per-token ``nats`` and ``n_bytes`` summed into ``blocks`` blocks by byte position (a
    token belongs to the block its first byte falls in), so that slices tokenized differently
    still share their blocks' text; fewer blocks when there are fewer tokens."""
    count = max(1, min(blocks, len(nats)))
    total = int(n_bytes.sum())
    starts = np.cumsum(n_bytes) - n_bytes
    index = np.minimum(starts * count // max(total, 1), count - 1).astype(np.int64)
    return (np.bincount(index, weights=nats, minlength=count),
            np.bincount(index, weights=n_bytes, minlength=count))


def _windows(tokens: torch.Tensor, seq_len: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(inputs, targets) pairs: full windows stacked into one batch, then the short tail."""
    predicted = tokens.numel() - 1
    full = predicted // seq_len
    pairs = []
    if full:
        body = tokens[: full * seq_len + 1]
        pairs.append((body[:-1].view(full, seq_len), body[1:].view(full, seq_len)))
    if predicted % seq_len:
        tail = tokens[full * seq_len:]
        pairs.append((tail[:-1].unsqueeze(0), tail[1:].unsqueeze(0)))
    return pairs


def padded_size(rows: int, width: int, seq_len: int,
                multiple: int = FP8_TOKEN_MULTIPLE) -> tuple[int, int]:
    """The smallest (rows, width) batch holding a ``rows × width`` one, no wider than
    ``seq_len``, whose token count is a multiple of ``multiple``; of two that small, the one
    with fewer rows."""
    if rows * width % multiple == 0:
        return rows, width
    sizes = []
    for padded_width in range(width, max(width, seq_len) + 1):
        step = multiple // math.gcd(padded_width, multiple)
        sizes.append((-(-rows // step) * step, padded_width))
    return min(sizes, key=lambda size: (size[0] * size[1], size[0]))


def _padded(inputs: torch.Tensor, seq_len: int) -> torch.Tensor:
    """``inputs`` padded at the end of its rows and with whole rows to :func:`padded_size`.
    The padding is token 0; its logits are never scored."""
    rows, width = inputs.shape
    padded_rows, padded_width = padded_size(rows, width, seq_len)
    if (padded_rows, padded_width) == (rows, width):
        return inputs
    return F.pad(inputs, (0, padded_width - width, 0, padded_rows - rows))


def _batches(tokens: torch.Tensor, seq_len: int,
             batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The evaluation's (inputs, targets) batches, always the same ones in the same order."""
    for inputs, targets in _windows(tokens, seq_len):
        for start in range(0, inputs.size(0), batch_size):
            yield inputs[start:start + batch_size], targets[start:start + batch_size]


def _logits(model: nn.Module, x: torch.Tensor, y: torch.Tensor, seq_len: int,
            precision_context: Callable[[], AbstractContextManager[Any]],
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's real-position logits in fp32 and their targets, both flattened."""
    with precision_context():
        logits = model(_padded(x, seq_len))[: x.size(0), : x.size(1)]
    return logits.float().flatten(0, 1), y.flatten()


@torch.no_grad()
def bits_per_byte(model: nn.Module, eval_tokens: np.ndarray, token_bytes: np.ndarray,
                  seq_len: int, batch_size: int, device: torch.device,
                  precision_context: Callable[[], AbstractContextManager[Any]]) -> BitsPerByte:
    if eval_tokens.size < 2:
        raise ValueError("the evaluation slice must hold at least two tokens")
    was_training = model.training
    model.eval()
    tokens = torch.from_numpy(np.asarray(eval_tokens, dtype=np.int64)).to(device)
    widths = torch.from_numpy(np.asarray(token_bytes, dtype=np.int64)).to(device)
    nats = torch.zeros((), dtype=torch.float64, device=device)
    token_nats: list[torch.Tensor] = []  # per predicted token, in the slice's order
    for x, y in _batches(tokens, seq_len, batch_size):
        flat, labels = _logits(model, x, y, seq_len, precision_context)
        nats += F.cross_entropy(flat, labels, reduction="sum").double()  # as shard_sums sums
        token_nats.append(F.cross_entropy(flat, labels, reduction="none").double())
    model.train(was_training)
    n_bytes = widths[tokens[1:]].cpu().numpy()
    total, byte_count = float(nats.item()), int(n_bytes.sum())
    block_nats, block_bytes = block_sums(torch.cat(token_nats).cpu().numpy(), n_bytes)
    return BitsPerByte(bpb=total / (math.log(2) * byte_count), nats=total, bytes=byte_count,
                       tokens=int(eval_tokens.size - 1),
                       stderr=ratio_stderr(block_nats, block_bytes),
                       block_nats=tuple(float(v) for v in block_nats),
                       block_bytes=tuple(int(v) for v in block_bytes))


@torch.no_grad()
def shard_sums(model: nn.Module, eval_tokens: np.ndarray, token_bytes: np.ndarray,
               seq_len: int, batch_size: int, device: torch.device,
               precision_context: Callable[[], AbstractContextManager[Any]],
               rank: int, world_size: int, lockstep: bool = False) -> torch.Tensor:
    """``[nats, bytes, tokens]`` (float64, on ``device``) over the evaluation batches
    ``rank, rank + world_size, ...``: the ranks of a long run each score their share, and the
    sum over ranks, all-reduced, gives the same val_bpb as :func:`bits_per_byte` on one.
    ``lockstep``: every rank runs as many forwards (a sharded model's forward is a collective),
    a rank short of a batch scoring the first one again and counting nothing."""
    was_training = model.training
    model.eval()
    tokens = torch.from_numpy(np.asarray(eval_tokens, dtype=np.int64)).to(device)
    widths = torch.from_numpy(np.asarray(token_bytes, dtype=np.int64)).to(device)
    sums = torch.zeros(3, dtype=torch.float64, device=device)
    batches = list(_batches(tokens, seq_len, batch_size))
    for index, (x, y) in enumerate(batches):
        if index % world_size == rank:
            flat, labels = _logits(model, x, y, seq_len, precision_context)
            sums[0] += F.cross_entropy(flat, labels, reduction="sum").double()
            sums[1] += widths[y].sum().double()
            sums[2] += y.numel()
    if lockstep and batches and len(batches) % world_size and rank >= len(batches) % world_size:
        _logits(model, *batches[0], seq_len, precision_context)  # the others' last forward
    model.train(was_training)
    return sums
