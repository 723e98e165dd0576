"""The fp8 path can finish a trial: every preset and target trains and evaluates under TE's rules.

TransformerEngine's FP8 GEMMs need an sm_89+ GPU, so these tests run the trainer's fp8 path
against :mod:`tests.trainer.te_standin`, which is installed as ``transformer_engine`` and
raises what TE raises for a shape TE refuses. The models run on the ``meta`` device: every
operation checks its shapes and allocates nothing, so a 200M-parameter proxy costs no more
than a tiny one, while the evaluation's own arithmetic (windows, padding, masking, the sums)
runs for real on the CPU.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from recipelab.recipe import Recipe
from recipelab.targets import PROXY_PRESETS, TARGETS, ProxyBudgetError, proxy_recipe
from recipelab.trainer.batches import sample_batch
from recipelab.trainer.device import autocast, linear_factory
from recipelab.trainer.evaluate import bits_per_byte
from recipelab.trainer.model import GPT
from recipelab.trainer.tokenizer import byte_tokenizer
from tests.trainer import te_standin
from tests.trainer.te_standin import FP8State

CPU = torch.device("cpu")
META = torch.device("meta")
LLAMA2_BUDGETS = (30_000_000, 80_000_000, 150_000_000)
"""Budgets whose llama2-7b proxies once had FFN widths of 1720, 2408 and 3096 (≡ 8 mod 16)."""


def _derivable(preset: str, target: str) -> bool:
    try:
        proxy_recipe(preset, target)
    except ProxyBudgetError:
        return False
    return True


CASES = [pytest.param(preset, target, None, id=f"{preset}-{target}")
         for preset in PROXY_PRESETS for target in TARGETS if _derivable(preset, target)]
CASES += [pytest.param("spark", "llama2-7b", budget, id=f"llama2-7b-{budget // 1_000_000}M")
          for budget in LLAMA2_BUDGETS]


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> FP8State:
    return te_standin.install(monkeypatch)


class OnMeta(nn.Module):
    """Runs ``inner`` on the meta device for its shapes, and hands the evaluation uniform
    (all-zero) logits on the CPU: each real token then scores exactly ln(vocab) nats, so
    val_bpb with the byte tokenizer is 8 exactly, and any scored padding would raise it."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        logits = self.inner(idx.to(META))
        return torch.zeros(logits.shape, dtype=torch.float32, device=idx.device)


def fp8_recipe(preset: str, target: str, budget: int | None) -> Recipe:
    return proxy_recipe(preset, target, budget).apply({"precision": "fp8"})


def train_step(model: nn.Module, recipe: Recipe) -> None:
    """One micro-step as the trial loop runs it: a sampled batch, forward in the precision
    context, cross-entropy in float32, backward."""
    train = np.random.default_rng(0).integers(0, 256, size=4 * recipe.tokens_per_step + 1)
    x, y = sample_batch(train.astype(np.uint16), recipe.batch_size, recipe.seq_len,
                        recipe.seed, 0)
    with autocast(recipe.precision, CPU)():
        logits = model(x.to(META))
    loss = F.cross_entropy(logits.float().view(-1, recipe.shape.vocab_size), y.to(META).view(-1))
    loss.backward()  # type: ignore[no-untyped-call]


@pytest.mark.parametrize(("preset", "target", "budget"), CASES)
def test_an_fp8_trial_of_every_preset_and_target_trains_and_evaluates_under_te_rules(
    standin: FP8State, preset: str, target: str, budget: int | None,
) -> None:
    recipe = fp8_recipe(preset, target, budget)
    with META:
        model = GPT(recipe.shape, recipe.seq_len, linear_factory(recipe.precision))
    train_step(model, recipe)
    eval_tokens = np.random.default_rng(1).integers(0, 256, size=recipe.eval_bytes)
    score = bits_per_byte(OnMeta(model), eval_tokens.astype(np.uint16),
                          byte_tokenizer().token_bytes, recipe.seq_len, recipe.batch_size, CPU,
                          autocast(recipe.precision, CPU))
    assert score.tokens == recipe.eval_bytes - 1
    assert score.bpb == pytest.approx(8.0, rel=1e-6)  # float32 sums; one padded token: 2e-4
    blocks = 4 * recipe.shape.n_layer  # qkv, out, up, down per block
    assert standin.forward_gemms > blocks, "the stand-in must have seen the FP8 GEMMs"
    assert standin.backward_gemms == 2 * blocks


def test_the_standin_refuses_what_te_refuses_with_tes_messages(standin: FP8State) -> None:
    """The premise of the test above: the stand-in is as strict as TE, not a no-op."""
    standin.enabled = True
    ffn_down = te_standin.Linear(1720, 640, bias=False)
    with pytest.raises(ValueError, match=r"dims=\[2, 8, 1720\] \(product of leading dims = 16, "
                                         r"last dim = 1720\)"):
        ffn_down(torch.zeros(2, 8, 1720))
    wide_out = te_standin.Linear(32, 1720 // 2, bias=False)
    with pytest.raises(ValueError, match=r"dims=\[860, 32\] \(product of leading dims = 860"):
        wide_out(torch.zeros(2, 8, 32))
    qkv = te_standin.Linear(64, 128, bias=False)
    with pytest.raises(ValueError, match=r"divisible by 8 .* dims=\[1, 255, 64\]"):
        qkv(torch.zeros(1, 255, 64))
    narrow = te_standin.Linear(16, 8, bias=False)
    out = narrow(torch.zeros(16, 16, requires_grad=True))
    with pytest.raises(RuntimeError, match="Leading dimension requirement on A for FP8 GEMM"):
        out.sum().backward()
    assert qkv(torch.zeros(1, 256, 64)).shape == (1, 256, 128)
