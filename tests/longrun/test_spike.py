"""The rehearsed loss spike (:mod:`recipelab.longrun.spike`): batches of the corpus's rarest
tokens, the same batch for the same step (so a resumed run spikes alike), and a postmortem
that says whether the loss came back."""

from __future__ import annotations

import numpy as np
import torch

from recipelab.longrun.spike import SpikeTrace, rare_batch, rarest_tokens


def test_the_rarest_tokens_are_the_least_frequent_that_occur() -> None:
    train = np.array([5] * 50 + [7] * 3 + [2] * 1 + [9] * 20, dtype=np.uint16)
    assert rarest_tokens(train, vocab_size=16, count=2).tolist() == [2, 7]  # 0, 1, 3... never occur


def test_a_rare_batch_is_a_function_of_its_seed_and_step() -> None:
    rare = np.array([2, 7], dtype=np.int64)
    x, y = rare_batch(rare, batch_size=2, seq_len=8, seed=0, step=15)
    again, _ = rare_batch(rare, batch_size=2, seq_len=8, seed=0, step=15)
    other, _ = rare_batch(rare, batch_size=2, seq_len=8, seed=0, step=16)
    assert x.shape == y.shape == (2, 8) and set(x.flatten().tolist()) <= {2, 7}
    assert torch.equal(x, again) and not torch.equal(x, other)
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one


def trace(after: list[float]) -> SpikeTrace:
    spike = SpikeTrace(start=10, steps=2)
    for step, loss in [(8, 2.0), (9, 2.0), (10, 6.0), (11, 5.0)]:
        spike.record(step, loss, grad_norm=1.0 if loss < 3 else 9.0)
    for step, loss in enumerate(after, start=12):
        spike.record(step, loss, grad_norm=1.0)
    return spike


def test_the_postmortem_says_whether_the_loss_came_back() -> None:
    recovered = trace([2.5, 2.1, 2.1, 2.0, 2.0]).postmortem()
    assert "peak: loss 6.0000 at step 10 (3.00× the pre-spike mean)" in recovered
    assert "recovered: yes: the loss was back within 10% of its pre-spike mean at step 13" in recovered
    assert "recovered: not yet" in trace([4.0, 3.9, 3.8]).postmortem()
    assert "recovered: no: the loss is not finite" in trace([float("nan")]).postmortem()
    assert "nothing to read" in SpikeTrace(start=10, steps=2).postmortem()
