"""Step Law carried from the proxy to the target (:mod:`recipelab.transfer.steplaw`): the
law's own values, its directions, and an anchor that moves the target as far as the proxy's
measured rate is off the law."""

from __future__ import annotations

import math

from recipelab.recipe import Recipe, Shape, non_embedding_params
from recipelab.targets import Target, proxy_recipe
from recipelab.transfer.steplaw import Anchored, Scale

PROXY = proxy_recipe("cpu", "llama2-7b")
GPT2_SMALL = Target("gpt2-small", "GPT-2 small's shape", Shape(
    n_layer=12, d_model=768, n_head=12, n_kv_head=12, head_dim=64, ffn_ratio=4,
    activation="gelu", norm="layernorm", position="learned", tie_embeddings=True,
    vocab_size=50304), 1024)


def test_the_law_counts_parameters_without_the_embeddings_as_step_law_does() -> None:
    shape = GPT2_SMALL.shape
    assert non_embedding_params(shape) == 12 * (4 * 768**2 + 2 * 4 * 768**2 + 4 * 768) == 84_971_520
    assert Recipe(shape=shape, seq_len=1024).param_count() > 120_000_000  # with its tables


def test_a_proxy_at_the_laws_values_exports_the_laws_and_one_off_them_moves_the_target_as_far() -> None:
    tokens = 20 * 124_000_000
    law = Scale(non_embedding_params(GPT2_SMALL.shape), tokens)
    at_law = Scale(non_embedding_params(PROXY.shape), PROXY.tokens)
    measured = PROXY.apply({"optimizer.lr": at_law.learning_rate})
    anchored = Anchored.at(measured, GPT2_SMALL.shape, tokens)
    assert math.isclose(anchored.learning_rate, law.learning_rate)
    halved = Anchored.at(measured.apply({"optimizer.lr": at_law.learning_rate / 2}),
                         GPT2_SMALL.shape, tokens)
    assert math.isclose(halved.learning_rate, law.learning_rate / 2)
    assert math.isclose(law.learning_rate, 1.79 * law.params ** -0.713 * tokens ** 0.307)
    assert math.isclose(law.batch_tokens, 0.58 * tokens ** 0.571)
    bigger = Scale(16 * law.params, tokens)
    longer = Scale(law.params, 16 * tokens)
    assert bigger.learning_rate < law.learning_rate < longer.learning_rate  # the law's directions
    assert longer.batch_tokens > law.batch_tokens == bigger.batch_tokens


def test_the_campaigns_size_exponent_replaces_the_laws_and_keeps_its_ratio_in_tokens() -> None:
    tokens = 20 * 124_000_000
    law = Anchored.at(PROXY, GPT2_SMALL.shape, tokens)
    own = Anchored.at(PROXY, GPT2_SMALL.shape, tokens, params_exponent=-0.4)
    size = law.target.params / law.proxy.params
    assert math.isclose(own.learning_rate, PROXY.optimizer.lr * size ** -0.4
                        * (tokens / PROXY.tokens) ** 0.307)
    assert math.isclose(own.learning_rate / law.learning_rate, size ** (0.713 - 0.4))
    assert "N^-0.400" in own.describe_lr() and "N^-0.400" not in law.describe_lr()
    assert own.to_json()["lr_params_exponent"] == -0.4
