"""Training batches drawn from ``(seed, step)`` alone.

A resumed run sees exactly the batches an uninterrupted one would, and two recipes trained
at the same seed see the same batches (common random numbers: their paired difference
carries less noise than either).
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from recipelab.trainer.spec import DataError
from recipelab.trainer.tokenizer import TokenArray


def sample_batch(train: TokenArray, batch_size: int, seq_len: int, seed: int,
                 step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` random windows of ``train``: inputs ``x`` and next-token targets ``y``.

    Offsets come from a generator seeded by ``(seed, step)`` alone, never from earlier calls,
    so a run resumed at step k sees the batches an uninterrupted run sees. One ``randint``
    and one vectorised gather (which also reads a uint16 memmap) keep it cheap per step.
    """
    windows = len(train) - seq_len
    if windows < 1:
        raise DataError(
            f"{len(train):,} training tokens cannot fill one sequence of seq_len {seq_len} plus "
            "its next-token target: use a smaller seq_len or a bigger corpus"
        )
    generator = torch.Generator().manual_seed(_batch_seed(seed, step))
    starts = torch.randint(windows, (batch_size,), generator=generator).numpy()
    rows = train[starts[:, None] + np.arange(seq_len + 1)]  # (B, T+1)
    tokens = torch.from_numpy(rows.astype(np.int64))
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def _batch_seed(seed: int, step: int) -> int:
    """Hash ``(seed, step)``: torch's CPU generator keeps only 32 bits of a seed, so packing
    the pair into one integer would make different seeds collide."""
    digest = hashlib.blake2b(f"{seed}:{step}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")
