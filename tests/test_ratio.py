"""The sampling error of a ratio of sums: a score's over its slice's blocks, and a gain's
between two trials on the same blocks. Each is checked against the spread it claims to
estimate: many slices drawn from one text."""

from __future__ import annotations

import math

import numpy as np
import pytest

from recipelab.ratio import gain_stderr, ratio_stderr

LN2 = math.log(2)


def text_of(blocks: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A text of ``blocks`` blocks: their bytes, a base model's nats and a better model's, whose
    gain varies a little from block to block while the text's difficulty varies a lot."""
    n_bytes = rng.integers(1500, 2600, blocks).astype(np.float64)
    difficulty = rng.normal(3.0, 0.6, blocks)  # bits per byte, shared by both models
    gain = rng.normal(0.05, 0.02, blocks)
    return n_bytes, difficulty * LN2 * n_bytes, (difficulty - gain) * LN2 * n_bytes


def bpb(nats: np.ndarray, n_bytes: np.ndarray) -> float:
    return float(nats.sum() / (LN2 * n_bytes.sum()))


def known(value: float | None) -> float:
    assert value is not None
    return value


def test_a_scores_error_is_the_spread_of_the_score_over_slices_drawn_from_the_text() -> None:
    rng = np.random.default_rng(0)
    n_bytes, base, _ = text_of(20_000, rng)
    slices = [rng.choice(len(n_bytes), 32, replace=False) for _ in range(4000)]
    spread = np.std([bpb(base[s], n_bytes[s]) for s in slices])
    claimed = np.median([known(ratio_stderr(base[s], n_bytes[s])) for s in slices])
    assert claimed == pytest.approx(spread, rel=0.1)


def test_a_gains_error_is_the_spread_of_the_gain_over_slices_and_far_below_a_scores() -> None:
    rng = np.random.default_rng(1)
    n_bytes, base, better = text_of(20_000, rng)
    slices = [rng.choice(len(n_bytes), 32, replace=False) for _ in range(4000)]
    gains = [bpb(base[s], n_bytes[s]) - bpb(better[s], n_bytes[s]) for s in slices]
    claimed = [known(gain_stderr(base[s], n_bytes[s], better[s], n_bytes[s])) for s in slices]
    assert np.median(claimed) == pytest.approx(np.std(gains), rel=0.1)
    score_error = np.median([known(ratio_stderr(base[s], n_bytes[s])) for s in slices])
    assert np.median(claimed) < score_error / 10


def test_a_gain_the_same_in_every_block_has_no_sampling_error() -> None:
    n_bytes = np.array([2048.0, 1024.0, 4096.0])
    base = np.array([3.0, 2.0, 4.0]) * LN2 * n_bytes
    assert gain_stderr(base, n_bytes, base - 0.1 * LN2 * n_bytes, n_bytes) == pytest.approx(0.0)


def test_fewer_than_two_samples_or_unmatched_blocks_give_no_error() -> None:
    assert ratio_stderr([1.0], [8.0]) is None
    assert ratio_stderr([1.0, 0.0], [8.0, 0.0]) is None, "a block of no bytes is no sample"
    assert gain_stderr([1.0, 2.0], [8.0, 8.0], [1.0], [8.0]) is None
