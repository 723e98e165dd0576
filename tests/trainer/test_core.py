"""The one training core: parameter groups, their multipliers and weight decay, z-loss,
and a step that makes the same arithmetic wherever it runs."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch

from recipelab.targets import proxy_recipe
from recipelab.trainer.core import build_model, build_optimizer, param_groups, train_step, z_loss
from recipelab.trainer.model import GPT

TINY = proxy_recipe("tiny")


def test_parameters_fall_into_embeddings_output_hidden_and_norms() -> None:
    untied = TINY.shape.model_copy(update={"tie_embeddings": False, "position": "learned"})
    gpt = GPT(untied, TINY.seq_len)
    groups = param_groups(gpt)
    assert groups["embeddings"] == [gpt.embed.weight, gpt.positions.weight]  # type: ignore[union-attr]
    assert groups["output"] == [gpt.lm_head.weight]
    assert all(p.dim() == 2 for p in groups["hidden"]) and all(p.dim() == 1 for p in groups["norms"])
    assert sum(len(g) for g in groups.values()) == len(list(gpt.parameters()))
    tied = param_groups(GPT(TINY.shape, TINY.seq_len))
    assert tied["output"] == [] and len(tied["embeddings"]) == 1


def test_each_group_gets_its_learning_rate_multiplier_and_weight_decay_rule() -> None:
    untied = TINY.shape.model_copy(update={"tie_embeddings": False})
    recipe = TINY.model_copy(update={"shape": untied}).apply({
        "optimizer.lr_embed_mult": 2.0, "optimizer.lr_output_mult": 0.5,
        "optimizer.lr_hidden_mult": 4.0, "optimizer.decay_embeddings": False,
        "optimizer.decay_norms": True})
    optimizer = build_optimizer(GPT(untied, TINY.seq_len), recipe, torch.device("cpu"))
    got = {g["role"]: (g["lr"], g["weight_decay"]) for g in optimizer.param_groups}
    lr, wd = recipe.optimizer.lr, recipe.optimizer.weight_decay
    assert got == {"embeddings": (2 * lr, 0.0), "output": (0.5 * lr, wd),
                   "hidden": (4 * lr, wd), "norms": (lr, wd)}


def test_z_loss_is_the_mean_squared_log_normaliser() -> None:
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    assert z_loss(logits).item() == pytest.approx((math.log(2.0) ** 2 + math.log(4.0) ** 2) / 2)


def test_a_step_of_two_micro_batches_takes_the_gradient_of_their_mean() -> None:
    """Accumulation: grad_accum micro-batches of half the rows make the step one whole
    batch would (cross-entropy is a mean over equal micro-batches)."""
    recipe = TINY.apply({"batch_size": 4, "optimizer.grad_clip": 0.0})
    torch.manual_seed(0)
    x = torch.randint(0, recipe.shape.vocab_size, (4, recipe.seq_len))
    y = torch.randint(0, recipe.shape.vocab_size, (4, recipe.seq_len))
    losses, grads = [], []
    for accum in (1, 2):
        torch.manual_seed(0)
        model = build_model(recipe.apply({"grad_accum": accum, "batch_size": 4 // accum}),
                            torch.device("cpu"))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
        rows = 4 // accum

        def batch(index: int, rows: int = rows) -> tuple[torch.Tensor, torch.Tensor]:
            return x[index * rows:(index + 1) * rows], y[index * rows:(index + 1) * rows]

        loss, grad_norm = train_step(
            model, optimizer, list(model.parameters()),
            recipe.apply({"grad_accum": accum, "batch_size": rows}), 0, batch,
            contextlib.nullcontext)
        losses.append(loss.item())
        grads.append(grad_norm.item())
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    assert grads[1] == pytest.approx(grads[0], rel=1e-4)
