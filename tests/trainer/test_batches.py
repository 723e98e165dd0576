"""Batches from ``(seed, step)`` alone: the same data for a resumed run and for every recipe
at one seed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from recipelab.trainer.batches import sample_batch
from recipelab.trainer.spec import DataError


def test_a_batch_is_int64_windows_of_train_with_targets_shifted_by_one() -> None:
    train = np.arange(10_000, dtype=np.int32)
    x, y = sample_batch(train, batch_size=4, seq_len=16, seed=0, step=0)
    assert x.shape == y.shape == (4, 16)
    assert x.dtype == y.dtype == torch.int64
    assert torch.equal(y, x + 1), "each row is a contiguous window; y is x shifted by one"
    assert x.is_contiguous() and y.is_contiguous()


def test_batches_depend_only_on_seed_and_step_so_a_resumed_run_sees_the_same_data() -> None:
    train = np.arange(100_000, dtype=np.int32)
    uninterrupted = [sample_batch(train, 8, 32, seed=7, step=s)[0] for s in range(6)]
    resumed = sample_batch(train, 8, 32, seed=7, step=5)[0]
    assert torch.equal(resumed, uninterrupted[5])


def test_batches_differ_across_steps_and_across_seeds() -> None:
    train = np.arange(100_000, dtype=np.int32)
    base = sample_batch(train, 8, 32, seed=1, step=3)[0]
    assert not torch.equal(base, sample_batch(train, 8, 32, seed=1, step=4)[0])
    assert not torch.equal(base, sample_batch(train, 8, 32, seed=2, step=3)[0])


def test_batches_can_be_drawn_from_a_uint16_memmap(tmp_path: Path) -> None:
    np.arange(5_000, dtype=np.uint16).tofile(tmp_path / "train.bin")
    train = np.memmap(tmp_path / "train.bin", dtype=np.uint16, mode="r")
    x, y = sample_batch(train, 2, 8, seed=0, step=0)
    assert torch.equal(y, x + 1) and int(x.max()) < 5_000


def test_a_train_array_shorter_than_one_sequence_cannot_be_sampled() -> None:
    with pytest.raises(DataError, match=r"10 training tokens.*seq_len 16"):
        sample_batch(np.arange(10, dtype=np.int32), 1, 16, seed=0, step=0)
