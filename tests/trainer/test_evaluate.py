"""Specification of val_bpb: sum of cross-entropy in nats / (ln 2 × bytes of predicted tokens).

The model computes in float32, so a figure can only match a float64 hand computation to
about 1e-7 relative; REL is the tolerance used throughout (it still catches a single byte
or token miscounted out of 10^6).
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from recipelab.ratio import ratio_stderr
from recipelab.recipe import FP8_TOKEN_MULTIPLE, Shape
from recipelab.targets import proxy_recipe
from recipelab.trainer.evaluate import (
    EVAL_BLOCKS,
    BitsPerByte,
    bits_per_byte,
    block_sums,
    padded_size,
)
from recipelab.trainer.model import GPT
from recipelab.trainer.tokenizer import bpe_tokenizer, byte_tokenizer

REL = 1e-6
CPU = torch.device("cpu")
SEQ_LEN = 16


def tiny_shape(vocab_size: int = 256) -> Shape:
    return proxy_recipe("tiny").shape.model_copy(update={"vocab_size": vocab_size})


def fixed_model(vocab_size: int = 256, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(tiny_shape(vocab_size), SEQ_LEN)


def uniform_model(vocab_size: int) -> GPT:
    """Logits are all exactly 0: the final norm and the output projection are zeroed."""
    model = fixed_model(vocab_size)
    with torch.no_grad():
        model.final_norm.get_parameter("weight").zero_()
        model.lm_head.get_parameter("weight").zero_()
    return model


def evaluate(model: nn.Module, eval_tokens: np.ndarray, token_bytes: np.ndarray,
             seq_len: int = SEQ_LEN, batch_size: int = 3) -> BitsPerByte:
    return bits_per_byte(model, eval_tokens, token_bytes, seq_len, batch_size, CPU,
                         contextlib.nullcontext)


def random_tokens(n: int, vocab_size: int = 256, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab_size, size=n).astype(np.int32)


def hand_computed_bpb(model: nn.Module, eval_tokens: np.ndarray, token_bytes: np.ndarray,
                      seq_len: int) -> float:
    """Windows of seq_len inputs, one at a time; float64 log-softmax; bytes of the targets."""
    ids = torch.from_numpy(eval_tokens.astype(np.int64))
    nats = 0.0
    n_bytes = 0
    with torch.no_grad():
        for start in range(0, len(ids) - 1, seq_len):
            inputs = ids[start:start + seq_len]
            targets = ids[start + 1:start + seq_len + 1]
            inputs = inputs[:len(targets)]
            log_probs = torch.log_softmax(model(inputs[None])[0].double(), dim=-1)
            nats -= float(log_probs.gather(1, targets[:, None]).sum())
            n_bytes += int(token_bytes[targets.numpy()].sum())
    return nats / (math.log(2) * n_bytes)


@pytest.mark.parametrize("n_tokens", [1 + 4 * SEQ_LEN, 1 + 7 * SEQ_LEN + 5, 9])
def test_val_bpb_equals_a_hand_computation_on_a_fixed_model(n_tokens: int) -> None:
    model = fixed_model().eval()
    eval_tokens = random_tokens(n_tokens)
    token_bytes = np.ones(256, dtype=np.int64)
    score = evaluate(model, eval_tokens, token_bytes)
    expected = hand_computed_bpb(model, eval_tokens, token_bytes, SEQ_LEN)
    assert score.bpb == pytest.approx(expected, rel=REL)
    assert score.tokens == score.bytes == n_tokens - 1
    assert score.nats == pytest.approx(expected * math.log(2) * (n_tokens - 1), rel=REL)


def test_val_bpb_divides_by_the_bytes_each_predicted_token_stands_for() -> None:
    """With uneven byte lengths, only the predicted tokens' bytes count (not the first's)."""
    model = fixed_model().eval()
    eval_tokens = random_tokens(1 + 3 * SEQ_LEN + 4)
    token_bytes = np.arange(256, dtype=np.int64) % 4 + 1
    eval_tokens[0] = 255  # 4 bytes that are never predicted
    score = evaluate(model, eval_tokens, token_bytes)
    assert score.bytes == int(token_bytes[eval_tokens[1:]].sum())
    expected = hand_computed_bpb(model, eval_tokens, token_bytes, SEQ_LEN)
    assert score.bpb == pytest.approx(expected, rel=REL)


def test_a_uniform_model_scores_eight_bits_per_byte_with_the_byte_tokenizer() -> None:
    tok = byte_tokenizer()
    eval_tokens = tok.encode("The quick brown fox — café, naïve, 日本語. " * 20)
    score = evaluate(uniform_model(256), eval_tokens, tok.token_bytes)
    assert score.bpb == pytest.approx(8.0, rel=REL)


@pytest.fixture(scope="module")
def corpus_text() -> str:
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key] for key in sorted(topics))


def test_with_a_bpe_tokenizer_the_denominator_is_bytes_not_tokens(
    tmp_path: Path, corpus_text: str,
) -> None:
    vocab = 320
    tok = bpe_tokenizer(corpus_text[:200_000], vocab, tmp_path)
    eval_tokens = tok.encode(corpus_text[-3_000:])
    n_bytes = int(tok.token_bytes[eval_tokens[1:]].sum())
    n_tokens = len(eval_tokens) - 1
    assert n_bytes > 1.2 * n_tokens, "BPE merges must make tokens longer than one byte"
    score = evaluate(uniform_model(vocab), eval_tokens, tok.token_bytes)
    assert (score.tokens, score.bytes) == (n_tokens, n_bytes)
    assert score.bpb == pytest.approx(math.log2(vocab) * n_tokens / n_bytes, rel=REL)


class Recorder(nn.Module):
    """Wraps a model and records every input batch it is shown."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.batches: list[torch.Tensor] = []

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        self.batches.append(idx.clone())
        result: torch.Tensor = self.inner(idx)
        return result


@pytest.mark.parametrize(("n_tokens", "tail"), [(1 + 5 * SEQ_LEN, 0), (1 + 5 * SEQ_LEN + 7, 7),
                                                (1 + 5 * SEQ_LEN + 1, 1), (4, 3)])
def test_every_token_after_the_first_is_predicted_exactly_once(n_tokens: int, tail: int) -> None:
    """Token values are positions counted from 1, so an input value v is the prediction of
    token v + 1, and padding (token 0) is told apart from the inputs."""
    recorder = Recorder(fixed_model())
    eval_tokens = np.arange(1, n_tokens + 1, dtype=np.int32)
    score = evaluate(recorder, eval_tokens, np.ones(256, dtype=np.int64), batch_size=2)
    shown = torch.cat([batch.flatten() for batch in recorder.batches])
    assert sorted(shown[shown > 0].tolist()) == list(range(1, n_tokens))
    assert all(batch.size(1) <= SEQ_LEN for batch in recorder.batches)
    rows = [row[row > 0] for batch in recorder.batches for row in batch if row[0] > 0]
    for row in rows:  # every window is a run of consecutive tokens
        assert (row[1:] - row[:-1] == 1).all()
    widths = [row.numel() for row in rows]
    assert (widths[-1] == tail) if tail else all(w == SEQ_LEN for w in widths)
    assert score.tokens == n_tokens - 1


@pytest.mark.parametrize(("seq_len", "batch_size", "n_tokens"),
                         [(16, 2, 88), (16, 3, 4), (100, 4, 1000), (37, 16, 777), (20, 4, 95)])
def test_every_forward_pass_shows_whole_multiples_of_16_tokens_padded_only_at_the_ends(
    seq_len: int, batch_size: int, n_tokens: int,
) -> None:
    """TransformerEngine runs FP8 GEMMs only over token counts divisible by 8 (16 for the
    backward), so the tail window and a short last batch are padded: at the end of rows, and
    with whole rows, never beyond seq_len, and never beyond batch_size × seq_len when that is
    itself a multiple of 16."""
    torch.manual_seed(0)
    recorder = Recorder(GPT(tiny_shape(), seq_len))
    evaluate(recorder, np.arange(1, n_tokens + 1, dtype=np.int32) % 255 + 1,
             np.ones(256, dtype=np.int64), seq_len=seq_len, batch_size=batch_size)
    for batch in recorder.batches:
        assert batch.numel() % FP8_TOKEN_MULTIPLE == 0
        assert batch.size(1) <= seq_len
        if batch_size * seq_len % FP8_TOKEN_MULTIPLE == 0:
            assert batch.numel() <= batch_size * seq_len
        real = batch > 0
        assert (real.cummin(dim=1).values == real).all(), "padding only after a row's tokens"


@pytest.mark.parametrize(("rows", "width", "seq_len", "expected"), [
    (16, 64, 64, (16, 64)), (1, 255, 256, (1, 256)), (1, 7, 16, (1, 16)), (3, 100, 100, (4, 100)),
    (1, 99, 100, (4, 100)), (5, 37, 37, (16, 37)), (1, 3, 4, (4, 4)),
])
def test_padded_size_is_the_smallest_legal_batch_holding_the_real_one(
    rows: int, width: int, seq_len: int, expected: tuple[int, int],
) -> None:
    assert padded_size(rows, width, seq_len) == expected


def unpadded_bits_per_byte(model: nn.Module, eval_tokens: np.ndarray, token_bytes: np.ndarray,
                           seq_len: int, batch_size: int) -> BitsPerByte:
    """The evaluation as it was before padding, kept verbatim to compare against."""
    tokens = torch.from_numpy(np.asarray(eval_tokens, dtype=np.int64))
    predicted = tokens.numel() - 1
    full = predicted // seq_len
    pairs = []
    if full:
        body = tokens[: full * seq_len + 1]
        pairs.append((body[:-1].view(full, seq_len), body[1:].view(full, seq_len)))
    if predicted % seq_len:
        tail = tokens[full * seq_len:]
        pairs.append((tail[:-1].unsqueeze(0), tail[1:].unsqueeze(0)))
    nats = torch.zeros((), dtype=torch.float64)
    with torch.no_grad():
        for inputs, targets in pairs:
            for start in range(0, inputs.size(0), batch_size):
                x, y = inputs[start:start + batch_size], targets[start:start + batch_size]
                logits = model(x)
                nats += F.cross_entropy(logits.float().flatten(0, 1), y.flatten(),
                                        reduction="sum").double()
    n_bytes = int(token_bytes[np.asarray(eval_tokens[1:], dtype=np.int64)].sum())
    total = float(nats.item())
    return BitsPerByte(bpb=total / (math.log(2) * n_bytes), nats=total, bytes=n_bytes,
                       tokens=int(eval_tokens.size - 1))


@pytest.mark.parametrize(("seq_len", "batch_size", "n_tokens", "position"), [
    (64, 8, 4_096, "rope"), (100, 3, 1_000, "rope"), (37, 5, 777, "learned"),
    (20, 1, 95, "rope"), (50, 7, 3_001, "learned"),
])
def test_padding_leaves_val_bpb_exactly_the_number_it_was_in_fp32(
    seq_len: int, batch_size: int, n_tokens: int, position: str,
) -> None:
    """The model is causal and padding only follows real positions, so the real logits, the
    float32 sums and val_bpb are bit for bit what the unpadded evaluation gave."""
    torch.manual_seed(0)
    model = GPT(tiny_shape().model_copy(update={"position": position}), seq_len).eval()
    eval_tokens = random_tokens(n_tokens)
    token_bytes = np.arange(256, dtype=np.int64) % 4 + 1
    padded = evaluate(model, eval_tokens, token_bytes, seq_len=seq_len, batch_size=batch_size)
    unpadded = unpadded_bits_per_byte(model, eval_tokens, token_bytes, seq_len, batch_size)
    assert (padded.bpb, padded.nats, padded.bytes, padded.tokens) == (
        unpadded.bpb, unpadded.nats, unpadded.bytes, unpadded.tokens)


def test_evaluation_leaves_the_model_in_the_mode_it_found_it_in() -> None:
    model = fixed_model().train()
    evaluate(model, random_tokens(40), np.ones(256, dtype=np.int64))
    assert model.training
    model.eval()
    evaluate(model, random_tokens(40), np.ones(256, dtype=np.int64))
    assert not model.training


def test_an_evaluation_slice_of_one_token_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least two tokens"):
        evaluate(fixed_model(), np.array([7], dtype=np.int32), np.ones(256, dtype=np.int64))


def test_the_log_softmax_of_uniform_logits_is_minus_log_vocab() -> None:
    """The premise of the uniform-model tests: zeroed head and norm give all-zero logits."""
    model = uniform_model(300)
    with torch.no_grad():
        logits = model(torch.tensor([[1, 2, 3]]))
    assert torch.equal(logits, torch.zeros_like(logits))
    assert float(F.cross_entropy(logits[0].double(), torch.tensor([0, 1, 2]))) == pytest.approx(
        math.log(300), rel=1e-12)


# --- the sampling error of the slice itself -------------------------------------------------


def hand_computed_blocks(model: nn.Module, eval_tokens: np.ndarray, token_bytes: np.ndarray,
                         blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """Every predicted token's nats in float64, one at a time, summed into ``blocks`` blocks by
    the byte its text starts at."""
    ids = torch.from_numpy(eval_tokens.astype(np.int64))
    pieces = []
    with torch.no_grad():
        for start in range(0, len(ids) - 1, SEQ_LEN):  # the evaluation's windows
            targets = ids[start + 1:start + SEQ_LEN + 1]
            log_probs = torch.log_softmax(
                model(ids[start:start + len(targets)][None])[0].double(), dim=-1)
            pieces.append(-log_probs.gather(1, targets[:, None])[:, 0].numpy())
    nats = np.concatenate(pieces)
    widths = token_bytes[eval_tokens[1:]].astype(np.float64)
    starts, total = np.cumsum(widths) - widths, widths.sum()
    block_nats, block_bytes = np.zeros(blocks), np.zeros(blocks)
    for nat, width, start in zip(nats, widths, starts, strict=True):
        index = min(int(start * blocks // total), blocks - 1)
        block_nats[index] += nat
        block_bytes[index] += width
    return block_nats, block_bytes


def test_the_sampling_error_of_val_bpb_is_the_ratio_estimators_over_byte_blocks() -> None:
    model = fixed_model().eval()
    eval_tokens = random_tokens(1 + 7 * SEQ_LEN + 5)  # seven full windows and the tail
    token_bytes = np.arange(256, dtype=np.int64) % 4 + 1
    score = evaluate(model, eval_tokens, token_bytes)
    nats, n_bytes = hand_computed_blocks(model, eval_tokens, token_bytes, EVAL_BLOCKS)
    assert len(score.block_nats) == EVAL_BLOCKS
    assert np.allclose(score.block_nats, nats, rtol=1e-5)
    assert score.block_bytes == tuple(int(b) for b in n_bytes)
    assert sum(score.block_bytes) == score.bytes
    assert score.stderr is not None and score.stderr > 0
    assert score.stderr == pytest.approx(ratio_stderr(nats, n_bytes), rel=1e-4)


def test_blocks_follow_bytes_so_two_tokenizations_of_a_text_share_them() -> None:
    """A token belongs to the block its first byte is in: the same text in one-byte or in
    two-byte tokens puts each byte in the same block."""
    ones = block_sums(np.ones(64), np.ones(64), blocks=4)
    twos = block_sums(np.ones(32), np.full(32, 2.0), blocks=4)
    assert ones[1].tolist() == twos[1].tolist() == [16.0] * 4


def test_a_slice_scored_the_same_in_every_block_has_no_sampling_error() -> None:
    tok = byte_tokenizer()
    score = evaluate(uniform_model(256), random_tokens(1 + 6 * SEQ_LEN), tok.token_bytes)
    assert score.stderr == pytest.approx(0.0, abs=1e-9)


def test_one_token_gives_one_block_and_no_sampling_error() -> None:
    score = evaluate(fixed_model().eval(), random_tokens(2), np.ones(256, dtype=np.int64))
    assert (len(score.block_nats), score.stderr) == (1, None)


def test_a_longer_slice_has_a_smaller_sampling_error() -> None:
    model, token_bytes = fixed_model().eval(), np.ones(256, dtype=np.int64)
    short = evaluate(model, random_tokens(1 + 8 * SEQ_LEN), token_bytes)
    long = evaluate(model, random_tokens(1 + 128 * SEQ_LEN), token_bytes)
    assert short.stderr is not None and long.stderr is not None
    assert long.stderr < short.stderr
