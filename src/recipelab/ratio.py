"""The sampling error of a ratio of sums, defined once: val_bpb is one (nats over bytes,
summed over the evaluation slice's blocks), and so is a gain between two trials scored on
the same slice. The trainer reports a score's error with it and the report a gain's."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Samples = Sequence[float] | np.ndarray
"""Per-block sums, as a list or an array."""


def ratio_stderr(nats: Samples, n_bytes: Samples) -> float | None:
    """The standard error of ``sum(nats) / (ln 2 · sum(n_bytes))`` with each element as one
    sample (the delta method for a ratio estimator); None with fewer than two samples. An
    element of no bytes (a block no token starts in) is no sample."""
    b = np.asarray(n_bytes, dtype=np.float64)
    x = np.asarray(nats, dtype=np.float64)[b > 0]
    b = b[b > 0]
    n = len(x)
    total = float(b.sum())
    if n < 2 or total <= 0:
        return None
    residuals = x - float(x.sum()) / total * b
    return math.sqrt(n / (n - 1) * float((residuals**2).sum())) / (math.log(2) * total)


def gain_stderr(base_nats: Samples, base_bytes: Samples, nats: Samples,
                n_bytes: Samples) -> float | None:
    """The sampling error of ``val_bpb(base) − val_bpb(other)`` over the blocks both were
    scored on: what drawing another slice of the same size would change in a gain. Much of a
    slice's error is shared by every trial scored on it, so this is far smaller than either
    score's own. None unless both have the same number of blocks (two or more)."""
    if len(base_nats) != len(nats) or len(base_bytes) != len(n_bytes):
        return None
    b0, b1 = np.asarray(base_bytes, dtype=np.float64), np.asarray(n_bytes, dtype=np.float64)
    # per block, the two scores' difference in nats at the bytes they share; the ratio's
    # delta method over those differences is the gain's error
    difference = (np.asarray(base_nats, dtype=np.float64) / np.maximum(b0, 1.0)
                  - np.asarray(nats, dtype=np.float64) / np.maximum(b1, 1.0))
    shared = (b0 + b1) / 2
    return ratio_stderr(difference * shared, shared)
