"""Trainer throughput: recipelab's trainer against a plain hand-rolled PyTorch GPT loop.

What it measures
    Training tokens per second of two implementations of the same run: the proxy recipe
    of ``--preset`` (by default ``cpu``: SwiGLU, RMSNorm, RoPE, GQA 3:1, d_model 192,
    2 layers, batch 16, seq 256, fp32), the same parameter count (asserted), the same
    data (the byte-tokenized ``python-docs`` train split from
    :func:`recipelab.trainer.data.load_dataset`) and the same number of steps.

    * ``recipelab``: the real code path. ``GPT`` from ``recipelab.trainer.model`` and
      ``TrialRunner.train`` (which builds its optimizer with ``build_optimizer``), timed by
      the runner itself (``progress.timed_s`` / ``progress.timed_steps``).
    * ``hand-rolled``: what a competent engineer writes in an afternoon, nanoGPT-style and
      unoptimised, defined in this file: separate q/k/v and gate/up/down ``nn.Linear``
      layers, RoPE recomputed from the positions in every forward, GQA by
      ``repeat_interleave`` of k/v before ``scaled_dot_product_attention(is_causal=True)``,
      ``nn.RMSNorm``, ``torch.optim.AdamW`` with torch's default implementation, nanoGPT's
      ``get_batch`` (numpy random offsets, ``torch.stack`` of slices), ``loss.item()``,
      ``clip_grad_norm_`` and the learning rate set on every step.

    Both exclude the same warm-up steps from the clock: the hand-rolled loop skips as many
    as the trainer reports it skipped (today the first ``min(5, steps // 5)``). Machines
    are shared and noisy, so the two run interleaved in one process (recipelab,
    hand-rolled, recipelab, hand-rolled, ...), each round on a freshly initialised model,
    and the table reports medians over rounds.

How to read the output
    ``tok/s`` and ``step ms`` are medians over rounds. ``MFU %`` is the model FLOPs
    utilisation: ``Recipe.flops_per_token() * tok/s`` over the peak measured here by timing
    a large square fp32 matmul (``2 n^3`` FLOPs per matmul; measured after warm-up before
    every round, the best time of all rounds counts, so a busy moment does not lower it).
    ``ratio`` is recipelab's median tok/s over the hand-rolled loop's; the per-round
    ratios show how much of it is noise, and the load averages printed before and after
    say whether other work shared the CPUs. On 2 cores, load from other processes makes
    OpenMP threads wait on each other and both loops slow down several fold, unevenly;
    a "noisy" line then says to rerun before reading much into the ratio. The target is
    ``ratio >= 1.2`` and the last line says "target met" or "target missed". The script
    always exits 0: it reports, it does not test.

Run it with ``.venv/bin/python bench/trainer_throughput.py [--preset cpu] [--steps 30]
[--rounds 3]``.
"""

from __future__ import annotations

import argparse
import gc
import io
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from torch import nn

from recipelab.recipe import PROXY_PRESETS, Recipe, Shape, proxy_recipe
from recipelab.trainer.data import load_dataset
from recipelab.trainer.device import autocast, linear_factory, resolve_device, synchronize
from recipelab.trainer.loop import TIMED_WARMUP_STEPS, TrialRunner
from recipelab.trainer.model import GPT
from recipelab.trainer.spec import CorpusSpec, TrialSpec

TARGET_RATIO = 1.2
NOISY_SPREAD = 0.10  # per-round ratios further apart than this mean a busy machine
ROPE_BASE = 10_000.0
PEAK_MATMUL_CPU = 2048
PEAK_MATMUL_CUDA = 8192
PEAK_WARMUP = 2
PEAK_REPEATS = 5

Context = Callable[[], AbstractContextManager[Any]]


# --- the hand-rolled baseline (nanoGPT-style, deliberately unoptimised) -------------------


def _norm(shape: Shape, width: int) -> nn.Module:
    if shape.norm == "rmsnorm":
        return nn.RMSNorm(width, eps=1e-6)
    return nn.LayerNorm(width, eps=1e-5)


def apply_rope(x: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (B, H, T, hd) by its positions; the cos/sin tables are rebuilt each call."""
    T, hd = x.size(-2), x.size(-1)
    positions = torch.arange(T, device=x.device, dtype=torch.float32)
    inv_freq = 1.0 / ROPE_BASE ** (
        torch.arange(0, hd, 2, device=x.device, dtype=torch.float32) / hd)
    angles = torch.outer(positions, inv_freq)  # (T, hd/2)
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).type_as(x)


class HandAttention(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = shape.n_head, shape.n_kv_head, shape.head_dim
        self.rope = shape.position == "rope"
        self.q_proj = nn.Linear(shape.d_model, shape.attn_width, bias=False)
        self.k_proj = nn.Linear(shape.d_model, shape.kv_width, bias=False)
        self.v_proj = nn.Linear(shape.d_model, shape.kv_width, bias=False)
        self.o_proj = nn.Linear(shape.attn_width, shape.d_model, bias=False)
        self.q_norm = _norm(shape, shape.head_dim) if shape.qk_norm else None
        self.k_norm = _norm(shape, shape.head_dim) if shape.qk_norm else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.size()
        q = self.q_proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        k = self.k_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope:
            q, k = apply_rope(q), apply_rope(k)
        groups = self.n_head // self.n_kv_head
        k = k.repeat_interleave(groups, dim=1)  # (B, H, T, hd)
        v = v.repeat_interleave(groups, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, self.n_head * self.head_dim)
        out: torch.Tensor = self.o_proj(y)
        return out


class HandMLP(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.activation = shape.activation
        hidden = shape.ffn_hidden
        self.gate_proj = (nn.Linear(shape.d_model, hidden, bias=False)
                          if shape.activation == "swiglu" else None)
        self.up_proj = nn.Linear(shape.d_model, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, shape.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_proj is not None:
            h = F.silu(self.gate_proj(x)) * self.up_proj(x)
        elif self.activation == "gelu":
            h = F.gelu(self.up_proj(x), approximate="tanh")
        else:
            h = F.relu(self.up_proj(x)).square()
        out: torch.Tensor = self.down_proj(h)
        return out


class HandBlock(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.ln_1 = _norm(shape, shape.d_model)
        self.attn = HandAttention(shape)
        self.ln_2 = _norm(shape, shape.d_model)
        self.mlp = HandMLP(shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        out: torch.Tensor = x + self.mlp(self.ln_2(x))
        return out


class HandGPT(nn.Module):
    def __init__(self, shape: Shape, block_size: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(shape.vocab_size, shape.d_model)
        self.wpe = (nn.Embedding(block_size, shape.d_model)
                    if shape.position == "learned" else None)
        self.h = nn.ModuleList([HandBlock(shape) for _ in range(shape.n_layer)])
        self.ln_f = _norm(shape, shape.d_model)
        self.lm_head = nn.Linear(shape.d_model, shape.vocab_size, bias=False)
        if shape.tie_embeddings:
            self.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * shape.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx)  # (B, T, C)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.h:
            x = block(x)
        logits: torch.Tensor = self.lm_head(self.ln_f(x))  # (B, T, vocab)
        return logits


def get_batch(data: npt.NDArray[Any], rng: np.random.Generator, batch_size: int,
              block_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """nanoGPT's get_batch: random offsets, one slice per row, ``torch.stack``."""
    ix = rng.integers(len(data) - block_size, size=batch_size)
    x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64))
                     for i in ix])
    return x.to(device), y.to(device)


def get_lr(it: int, recipe: Recipe, total: int) -> float:
    """nanoGPT's schedule: linear warmup, then cosine decay to ``min_lr_ratio * lr``."""
    lr, warmup = recipe.optimizer.lr, recipe.schedule.warmup_steps
    min_lr = lr * recipe.schedule.min_lr_ratio
    if it < warmup:
        return lr * (it + 1) / warmup
    decay_ratio = min(1.0, (it - warmup) / max(1, total - warmup))
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (lr - min_lr)


def hand_optimizer(model: nn.Module, recipe: Recipe) -> torch.optim.AdamW:
    """nanoGPT's configure_optimizers, minus the fused flag: torch picks the implementation."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = recipe.optimizer
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": opt.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=opt.lr, betas=(opt.beta1, opt.beta2), eps=opt.eps)


def train_hand(model: nn.Module, recipe: Recipe, data: npt.NDArray[Any],
               device: torch.device, context: Context, timed_from: int) -> tuple[float, int]:
    """The hand-rolled loop; returns (timed seconds, timed steps), the clock starting at
    step ``timed_from`` as the trainer's does."""
    optimizer = hand_optimizer(model, recipe)
    rng = np.random.default_rng(recipe.seed)
    steps, vocab = recipe.steps, recipe.shape.vocab_size
    losses: list[float] = []
    t0 = time.perf_counter()
    for it in range(steps):
        if it == timed_from:
            synchronize(device)
            t0 = time.perf_counter()
        lr = get_lr(it, recipe, steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        for _ in range(recipe.grad_accum):
            x, y = get_batch(data, rng, recipe.batch_size, recipe.seq_len, device)
            with context():
                logits = model(x)
                loss = F.cross_entropy(logits.view(-1, vocab), y.view(-1))
            (loss / recipe.grad_accum).backward()  # type: ignore[no-untyped-call]
        if recipe.optimizer.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.optimizer.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    synchronize(device)
    elapsed = time.perf_counter() - t0
    if not all(math.isfinite(v) for v in losses):
        raise RuntimeError(f"hand-rolled loss is not finite: {losses[-5:]}")
    return elapsed, steps - timed_from


# --- the recipelab side: the real trainer ------------------------------------------------


def train_recipelab(recipe: Recipe, data: Any, device: torch.device, context: Context,
                    out_dir: str) -> tuple[float, int]:
    spec = TrialSpec(trial_id="bench-recipelab", recipe=recipe, out_dir=out_dir,
                     device="cuda" if device.type == "cuda" else "cpu")
    torch.manual_seed(recipe.seed)
    model = GPT(recipe.shape, recipe.seq_len, linear_factory(recipe.precision)).to(device)
    runner = TrialRunner(spec, resume=False, log=io.StringIO())
    runner.train(model, data, device, context)
    return runner.progress.timed_s, runner.progress.timed_steps


def run_hand(recipe: Recipe, data: npt.NDArray[Any], device: torch.device,
             context: Context, timed_from: int) -> tuple[float, int]:
    torch.manual_seed(recipe.seed)
    model = HandGPT(recipe.shape, recipe.seq_len).to(device)
    return train_hand(model, recipe, data, device, context, timed_from)


# --- measurement helpers ------------------------------------------------------------------


def matmul_peak(device: torch.device) -> tuple[float, int]:
    """Best fp32 FLOP/s of a large square matmul after warm-up, and its size."""
    n = PEAK_MATMUL_CUDA if device.type == "cuda" else PEAK_MATMUL_CPU
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    best = math.inf
    for i in range(PEAK_WARMUP + PEAK_REPEATS):
        synchronize(device)
        start = time.perf_counter()
        torch.mm(a, b)
        synchronize(device)
        if i >= PEAK_WARMUP:
            best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best, n


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


@dataclass
class Series:
    name: str
    tokens_per_step: int
    rounds: list[tuple[float, int]]

    def tokens_per_s(self) -> list[float]:
        return [steps * self.tokens_per_step / s for s, steps in self.rounds]

    def median_tokens_per_s(self) -> float:
        return statistics.median(self.tokens_per_s())

    def median_step_ms(self) -> float:
        return statistics.median(1000 * s / steps for s, steps in self.rounds)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--preset", default="cpu", choices=sorted(PROXY_PRESETS),
                        help="proxy preset whose baseline recipe both loops train (default cpu)")
    parser.add_argument("--steps", type=int, default=30,
                        help="optimizer steps per round, warm-up included (default 30)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds per implementation (default 3)")
    args = parser.parse_args(argv)
    if args.steps < 2 or args.rounds < 1:
        parser.error("--steps must be >= 2 and --rounds >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    recipe = proxy_recipe(args.preset).apply({"steps": args.steps})
    device = resolve_device("auto")
    if recipe.precision == "fp8":
        print(f"preset {args.preset} trains in fp8, which the hand-rolled loop does not "
              "implement; nothing to compare")
        return 0
    context = autocast(recipe.precision, device)
    data = load_dataset(CorpusSpec(source="python-docs"), tokenizer=recipe.tokenizer,
                        vocab_size=recipe.shape.vocab_size, eval_bytes=recipe.eval_bytes,
                        min_train_tokens=recipe.batch_size * recipe.seq_len + 1)

    torch.manual_seed(recipe.seed)
    hand_params = HandGPT(recipe.shape, recipe.seq_len).to(device)
    ours = GPT(recipe.shape, recipe.seq_len, linear_factory(recipe.precision))
    n_hand = sum(p.numel() for p in hand_params.parameters())
    assert n_hand == ours.param_count() == recipe.param_count(), (
        f"parameter counts differ: hand-rolled {n_hand:,}, recipelab {ours.param_count():,}, "
        f"recipe {recipe.param_count():,}")
    del hand_params, ours

    s = recipe.shape
    print(f"torch {torch.__version__}  device {device.type}  threads {torch.get_num_threads()} "
          f"(interop {torch.get_num_interop_threads()}, {os.cpu_count()} logical CPUs)")
    print(f"cpu: {cpu_model()}")
    print(f"preset {args.preset}: {n_hand:,} params, n_layer {s.n_layer}, d_model {s.d_model}, "
          f"heads {s.n_head}/{s.n_kv_head} x {s.head_dim}, {s.activation}, {s.norm}, "
          f"{s.position}, tied {s.tie_embeddings}, batch {recipe.batch_size} x seq "
          f"{recipe.seq_len}, {recipe.precision}")
    print(f"data: {data.description}, {len(data.train):,} train tokens")
    load_before = load_average()
    print(f"load average (1, 5, 15 min) before: {load_before}")
    print(f"{args.rounds} rounds x {args.steps} steps each, the trainer's first "
          f"min({TIMED_WARMUP_STEPS}, steps // 5) untimed in both, interleaved recipelab / "
          "hand-rolled")

    tokens = recipe.tokens_per_step
    ours_series = Series("recipelab", tokens, [])
    hand_series = Series("hand-rolled", tokens, [])
    train_tokens = np.asarray(data.train)
    peak, n = 0.0, 0
    with tempfile.TemporaryDirectory(prefix="recipelab-bench-") as out_dir:
        for r in range(args.rounds):
            round_peak, n = matmul_peak(device)
            peak = max(peak, round_peak)
            ours_series.rounds.append(train_recipelab(recipe, data, device, context, out_dir))
            gc.collect()
            # Untimed warm-up steps exactly as the trainer just skipped them.
            timed_from = args.steps - ours_series.rounds[-1][1]
            hand_series.rounds.append(run_hand(recipe, train_tokens, device, context,
                                               timed_from))
            gc.collect()
            print(f"  round {r + 1}: recipelab {ours_series.tokens_per_s()[-1]:,.0f} tok/s, "
                  f"hand-rolled {hand_series.tokens_per_s()[-1]:,.0f} tok/s, "
                  f"matmul {round_peak / 1e9:.0f} GFLOP/s", flush=True)

    flops = recipe.flops_per_token()
    print(f"load average (1, 5, 15 min) after: {load_average()}")
    print(f"fp32 matmul peak: {peak / 1e9:.1f} GFLOP/s ({n}x{n}, best over rounds)")
    print()
    print(f"{'implementation':<14} {'tok/s':>10} {'step ms':>9} {'MFU %':>7}")
    for series in (ours_series, hand_series):
        tps = series.median_tokens_per_s()
        print(f"{series.name:<14} {tps:>10,.0f} {series.median_step_ms():>9.1f} "
              f"{100 * flops * tps / peak:>7.1f}")
    ratio = ours_series.median_tokens_per_s() / hand_series.median_tokens_per_s()
    per_round = [a / b for a, b in zip(ours_series.tokens_per_s(), hand_series.tokens_per_s(),
                                       strict=True)]
    print(f"ratio recipelab / hand-rolled: {ratio:.2f}x (per round: "
          f"{', '.join(f'{x:.2f}' for x in per_round)}; {flops:,} FLOPs/token)")
    spread = max(per_round) / min(per_round) - 1
    if spread > NOISY_SPREAD:
        print(f"noisy: per-round ratios differ by {100 * spread:.0f}% (load before "
              f"{load_before}), so other work shared the CPUs; rerun on a quiet machine "
              "before trusting the ratio")
    verdict = "target met" if ratio >= TARGET_RATIO else "target missed"
    print(f"{verdict}: {ratio:.2f}x vs target {TARGET_RATIO:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
