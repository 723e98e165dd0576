"""Specification of the proxy GPT: shapes, GQA, tied embeddings, positions, causality."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from recipelab.recipe import Shape, proxy_recipe
from recipelab.trainer.model import GPT, Block

B, T = 3, 24


def shape(**changes: Any) -> Shape:
    return proxy_recipe("tiny").shape.model_copy(update=changes)


def tokens(vocab: int = 256, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (B, T), generator=generator)


def blocks(gpt: GPT) -> list[Block]:
    found = [block for block in gpt.blocks if isinstance(block, Block)]
    assert len(found) == gpt.shape.n_layer
    return found


def model(s: Shape, max_len: int = T, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(s, max_len).eval()


@pytest.mark.parametrize("changes", [
    {},
    {"activation": "gelu", "norm": "layernorm", "position": "learned"},
    {"activation": "relu2", "qk_norm": True, "tie_embeddings": False},
    {"vocab_size": 300},
])
def test_forward_gives_finite_logits_of_shape_batch_time_vocab(changes: dict[str, Any]) -> None:
    s = shape(**changes)
    logits = model(s)(tokens(s.vocab_size))
    assert logits.shape == (B, T, s.vocab_size)
    assert torch.isfinite(logits).all()


def test_a_sequence_shorter_than_max_len_is_accepted() -> None:
    logits = model(shape(position="learned"), max_len=64)(tokens()[:, :5])
    assert logits.shape == (B, 5, 256)


def test_grouped_query_attention_uses_fewer_key_value_heads_than_query_heads() -> None:
    s = shape(n_head=4, n_kv_head=2, head_dim=16, d_model=64)
    gpt = model(s)
    qkv = blocks(gpt)[0].attn.qkv
    assert isinstance(qkv, torch.nn.Linear)
    assert qkv.weight.shape == (4 * 16 + 2 * 2 * 16, 64)
    logits = gpt(tokens())
    assert logits.shape == (B, T, 256)
    assert torch.isfinite(logits).all()


def test_grouped_query_attention_equals_multi_head_attention_with_repeated_kv_heads() -> None:
    """GQA with 2 kv heads is MHA with 4 heads whose k/v weights repeat each kv head twice."""
    gqa = model(shape(n_head=4, n_kv_head=2, head_dim=16, d_model=64))
    mha = model(shape(n_head=4, n_kv_head=4, head_dim=16, d_model=64))
    state = gqa.state_dict()
    for i, block in enumerate(blocks(gqa)):
        weight = block.attn.qkv.get_parameter("weight")
        q, k, v = weight[:64], weight[64:96], weight[96:]
        repeat = [k.view(2, 16, 64).repeat_interleave(2, dim=0).reshape(64, 64),
                  v.view(2, 16, 64).repeat_interleave(2, dim=0).reshape(64, 64)]
        state[f"blocks.{i}.attn.qkv.weight"] = torch.cat([q, *repeat])
    mha.load_state_dict(state)
    x = tokens()
    torch.testing.assert_close(gqa(x), mha(x), rtol=1e-5, atol=1e-5)


def test_tied_embeddings_share_one_tensor_counted_once() -> None:
    tied = model(shape(tie_embeddings=True))
    untied = model(shape(tie_embeddings=False))
    assert tied.lm_head.weight is tied.embed.weight
    assert untied.lm_head.weight is not untied.embed.weight
    assert untied.param_count() - tied.param_count() == 256 * tied.shape.d_model


def test_tied_embeddings_get_the_gradient_of_both_uses() -> None:
    gpt = model(shape(tie_embeddings=True))
    gpt(tokens()).sum().backward()
    grad = gpt.embed.weight.grad
    assert grad is not None
    unused = sorted(set(range(256)) - set(tokens().flatten().tolist()))
    assert unused, "some token ids must be absent from the input for this test"
    assert grad[unused].abs().sum() > 0  # only the output projection touches unused rows


def test_learned_positions_are_a_table_of_max_len_rows_that_changes_the_output() -> None:
    s = shape(position="learned")
    gpt = model(s, max_len=40)
    assert gpt.positions is not None
    assert gpt.positions.weight.shape == (40, s.d_model)
    x = tokens()
    before = gpt(x)
    with torch.no_grad():
        gpt.positions.weight[1].add_(1.0)
    after = gpt(x)
    torch.testing.assert_close(after[:, 0], before[:, 0])
    assert not torch.allclose(after[:, 1], before[:, 1])


def test_rope_models_have_no_position_table_yet_are_sensitive_to_order() -> None:
    gpt = model(shape(position="rope"))
    assert gpt.positions is None
    x = torch.tensor([[5, 6, 7, 8]])
    swapped = torch.tensor([[6, 5, 7, 8]])
    assert not torch.allclose(gpt(x)[0, -1], gpt(swapped)[0, -1])


@pytest.mark.parametrize("position", ["rope", "learned"])
def test_changing_a_future_token_does_not_change_earlier_logits(position: str) -> None:
    gpt = model(shape(position=position, n_head=4, n_kv_head=2, qk_norm=True))
    x = tokens()
    edited = x.clone()
    edited[:, 10] = (edited[:, 10] + 1) % 256
    before, after = gpt(x), gpt(edited)
    torch.testing.assert_close(after[:, :10], before[:, :10], rtol=0, atol=1e-6)
    assert not torch.allclose(after[:, 10:], before[:, 10:])


def test_the_same_seed_builds_the_same_weights() -> None:
    a, b = model(shape(), seed=3), model(shape(), seed=3)
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q), name
