"""The one training core: the model, the optimizer, the learning rate and the step.

Every run recipelab makes goes through these four functions: the 60-step proxy trial, the
rung and stress runs, and the long run of Phase 3 (:mod:`recipelab.longrun`). What the
night ranked is then what the cloud trains: the whole recipe (its stability knobs, z-loss
and per-group learning-rate multipliers included), the same arithmetic, step for step. The
callers add what is theirs around the core (a trial its checkpoints and failure reasons, the
long run DDP, budget and metrics), never inside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from recipelab.recipe import Recipe
from recipelab.trainer.device import linear_factory, optimizer_options
from recipelab.trainer.model import GPT

__all__ = [
    "Batch",
    "ParamGroup",
    "build_model",
    "build_optimizer",
    "param_groups",
    "set_learning_rate",
    "train_step",
    "z_loss",
]

ParamGroup = Literal["embeddings", "output", "hidden", "norms"]
Batch = Callable[[int], tuple[torch.Tensor, torch.Tensor]]
"""Micro-batch ``index`` (``step × grad_accum + micro``) → ``(inputs, targets)`` on the device."""


def build_model(recipe: Recipe, device: torch.device) -> GPT:
    """The recipe's model on ``device``: its shape, its precision's linear layers and its
    stability knobs (initialisation scales, logit soft-cap). Seed the generator first."""
    return GPT(recipe.shape, recipe.seq_len, linear_factory(recipe.precision),
               recipe.stability).to(device)


def param_groups(model: GPT) -> dict[ParamGroup, list[nn.Parameter]]:
    """The model's trainable parameters by the role the optimizer knobs address.

    With tied embeddings the output layer is the embedding table and counts as embeddings.
    Parameters are listed in ``model.parameters()`` order within each group.
    """
    embeddings = {id(model.embed.weight)}
    if model.positions is not None:
        embeddings.add(id(model.positions.weight))
    groups: dict[ParamGroup, list[nn.Parameter]] = {
        "embeddings": [], "output": [], "hidden": [], "norms": []}
    for p in model.parameters():
        if not p.requires_grad:
            continue
        if id(p) in embeddings:
            groups["embeddings"].append(p)
        elif p is model.lm_head.weight:
            groups["output"].append(p)
        elif p.dim() >= 2:
            groups["hidden"].append(p)
        else:
            groups["norms"].append(p)
    return groups


def build_optimizer(model: GPT, recipe: Recipe, device: torch.device) -> torch.optim.AdamW:
    """AdamW with one parameter group per role (embeddings, output, hidden, norms), each with
    its learning-rate multiplier (kept in ``lr_mult``, applied by :func:`set_learning_rate`)
    and weight decay rule, in the implementation that is fastest on ``device``
    (:func:`~recipelab.trainer.device.optimizer_options`)."""
    opt = recipe.optimizer
    mult: dict[ParamGroup, float] = {"embeddings": opt.lr_embed_mult,
                                     "output": opt.lr_output_mult,
                                     "hidden": opt.lr_hidden_mult, "norms": 1.0}
    decays: dict[ParamGroup, bool] = {"embeddings": opt.decay_embeddings, "output": True,
                                      "hidden": True, "norms": opt.decay_norms}
    groups = [{"params": params, "weight_decay": opt.weight_decay if decays[role] else 0.0,
               "lr": opt.lr * mult[role], "lr_mult": mult[role], "role": role}
              for role, params in param_groups(model).items() if params]
    return torch.optim.AdamW(groups, lr=opt.lr, betas=(opt.beta1, opt.beta2), eps=opt.eps,
                             **optimizer_options(device))


def set_learning_rate(optimizer: torch.optim.Optimizer, recipe: Recipe, step: int) -> float:
    """Set each group's rate for 0-based ``step`` from the schedule; returns the base rate."""
    lr = recipe.optimizer.lr * recipe.schedule.lr_multiplier(step, recipe.steps)
    for group in optimizer.param_groups:
        group["lr"] = lr * group["lr_mult"]
    return lr


def z_loss(logits: torch.Tensor) -> torch.Tensor:
    """``mean(logsumexp(logits)²)`` over the tokens: zero when every softmax normaliser is 1."""
    return torch.logsumexp(logits, dim=-1).square().mean()


def train_step(forward: nn.Module, optimizer: torch.optim.Optimizer,
               params: list[nn.Parameter], recipe: Recipe, step: int, batch: Batch,
               precision: Callable[[], AbstractContextManager[Any]],
               no_sync: Callable[[], AbstractContextManager[Any]] | None = None,
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step over the recipe's ``grad_accum`` micro-batches.

    The objective is the mean cross-entropy plus ``z_loss × mean(logsumexp²)``, averaged over
    the micro-batches; gradients are clipped to ``grad_clip`` (none when 0). ``no_sync``
    (DDP's) wraps every micro-batch but the last, so gradients are all-reduced once per step.
    Returns the step's mean cross-entropy and its gradient norm before clipping, both still
    on the device, so the caller decides when the host waits for them.
    """
    accum, vocab, z_coef = recipe.grad_accum, recipe.shape.vocab_size, recipe.stability.z_loss
    step_loss = torch.zeros((), device=params[0].device)
    for micro in range(accum):
        x, y = batch(step * accum + micro)
        sync = no_sync() if no_sync is not None and micro < accum - 1 else nullcontext()
        with sync:
            with precision():
                logits = forward(x)
            flat = logits.float().view(-1, vocab)
            loss = F.cross_entropy(flat, y.view(-1))
            objective = loss + z_coef * z_loss(flat) if z_coef else loss
            (objective / accum).backward()  # type: ignore[no-untyped-call]
        step_loss += loss.detach() / accum
    grad_norm = torch.nn.utils.clip_grad_norm_(params, recipe.optimizer.grad_clip or math.inf)
    whole = getattr(grad_norm, "full_tensor", None)  # a sharded run's norm is a DTensor
    if callable(whole):
        grad_norm = whole()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return step_loss, grad_norm.detach()
