"""A plain nanoGPT training loop: the reference recipelab's trainer is measured against.

This is the textbook design of karpathy/nanoGPT's ``model.py`` and ``train.py``, written out
here so the benchmark has a fixed, honest baseline: a GPT-2 block (LayerNorm, causal
self-attention with one ``c_attn`` projection and ``scaled_dot_product_attention(is_causal)``,
a 4x GELU MLP), learned position embeddings, tied input/output embeddings, AdamW with torch's
default implementation choice (weight decay on matrices only), ``clip_grad_norm_(1.0)``, the
cosine learning-rate schedule set on every step, ``loss.item()`` every step, and nanoGPT's
``get_batch`` (numpy random offsets, one slice per row, ``torch.stack``). No ``torch.compile``.

Linear layers have no bias and LayerNorm keeps its bias (nanoGPT's ``bias=False`` setting
drops both; recipelab's LayerNorm has a bias), so the parameter count equals recipelab's for
the same shape; the benchmark asserts it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from torch import nn

Context = Callable[[], AbstractContextManager[Any]]


@dataclass(frozen=True)
class GPTConfig:
    block_size: int
    vocab_size: int
    n_layer: int
    n_head: int
    n_embd: int


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=False)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.n_head, self.n_embd = config.n_head, config.n_embd

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        out: torch.Tensor = self.c_proj(y)
        return out


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=False)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.c_proj(self.gelu(self.c_fc(x)))
        return out


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        out: torch.Tensor = x + self.mlp(self.ln_2(x))
        return out


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        _, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)  # (B, T, C)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, vocab)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def configure_optimizers(self, weight_decay: float, learning_rate: float,
                             betas: tuple[float, float], eps: float) -> torch.optim.AdamW:
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, eps=eps)


def get_batch(data: npt.NDArray[Any], batch_size: int, block_size: int,
              device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64))
                     for i in ix])
    return x.to(device), y.to(device)


def get_lr(it: int, learning_rate: float, warmup_iters: int, lr_decay_iters: int,
           min_lr: float) -> float:
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


@dataclass(frozen=True)
class LoopConfig:
    batch_size: int
    steps: int
    timed_from: int  # the clock starts at this step; earlier steps are warm-up
    learning_rate: float = 3e-3
    warmup_iters: int = 6
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0
    seed: int = 0


def train(config: GPTConfig, loop: LoopConfig, data: npt.NDArray[Any], device: torch.device,
          context: Context) -> tuple[float, int, float]:
    """Train a fresh model; returns (timed seconds, timed steps, last loss)."""
    torch.manual_seed(loop.seed)
    model = GPT(config).to(device)
    optimizer = model.configure_optimizers(loop.weight_decay, loop.learning_rate,
                                           (loop.beta1, loop.beta2), loop.eps)
    min_lr = loop.learning_rate / 10
    t0 = time.perf_counter()
    loss_value = math.nan
    for it in range(loop.steps):
        if it == loop.timed_from:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
        lr = get_lr(it, loop.learning_rate, loop.warmup_iters, loop.steps, min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(data, loop.batch_size, config.block_size, device)
        with context():
            loss = model(x, y)
        loss.backward()
        if loop.grad_clip != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), loop.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss_value = loss.item()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0, loop.steps - loop.timed_from, loss_value


def param_count(config: GPTConfig) -> int:
    return sum(p.numel() for p in GPT(config).parameters())
